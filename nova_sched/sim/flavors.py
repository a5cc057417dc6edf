"""The demo cloud's catalogue: host shapes, flavors, images, boot requests.

Everything is drawn from one ``random.Random(seed)``, so a seed gives the
same fleet and the same stream of requests every run. The mix is chosen to
exercise the default filters the way a real cloud does: most requests are
small general-purpose flavors; a few need SSD hosts
(``ComputeCapabilitiesFilter`` on the ``disk_type`` stat), ARM hosts
(``ImagePropertiesFilter`` on ``hw_architecture``) or a big-memory host
(``RamFilter``: the largest flavor fits only on the few 512 GB nodes and
fails once spreading has put smaller instances there).
"""

from __future__ import annotations

import dataclasses
import random
import uuid as uuid_mod

# A request asks for several instances this often (nova's min_count/max_count).
MULTI_INSTANCE_SHARE = 0.2
MAX_INSTANCES_PER_REQUEST = 5
PROJECTS = tuple(f"project-{i:02d}" for i in range(8))


@dataclasses.dataclass(frozen=True)
class HostShape:
    """One kind of hypervisor in the fleet."""

    name: str
    vcpus: int
    memory_mb: int
    local_gb: int
    weight: int
    arch: str = "x86_64"
    stats: tuple[tuple[str, str], ...] = ()
    reserved_host_memory_mb: int = 512


HOST_SHAPES = (
    HostShape("general", vcpus=16, memory_mb=65536, local_gb=800, weight=50),
    HostShape("compute", vcpus=32, memory_mb=131072, local_gb=1600, weight=30),
    HostShape("ssd", vcpus=32, memory_mb=131072, local_gb=960, weight=10,
              stats=(("disk_type", "ssd"),)),
    HostShape("bigmem", vcpus=48, memory_mb=524288, local_gb=2000, weight=5),
    HostShape("arm", vcpus=64, memory_mb=131072, local_gb=1000, weight=5,
              arch="aarch64"),
)


@dataclasses.dataclass(frozen=True)
class Flavor:
    """An instance type as nova's flavors table has it, plus its share."""

    flavorid: str
    name: str
    memory_mb: int
    vcpus: int
    root_gb: int
    ephemeral_gb: int = 0
    swap: int = 0
    extra_specs: tuple[tuple[str, str], ...] = ()
    weight: int = 1

    def instance_type(self, type_id: int) -> dict:
        """The ``instance_type`` dict of a Havana request_spec."""
        return {
            "id": type_id,
            "name": self.name,
            "flavorid": self.flavorid,
            "memory_mb": self.memory_mb,
            "vcpus": self.vcpus,
            "root_gb": self.root_gb,
            "ephemeral_gb": self.ephemeral_gb,
            "swap": self.swap,
            "extra_specs": dict(self.extra_specs),
            # Keys a real nova sends that the scheduler must tolerate.
            "rxtx_factor": 1.0,
            "is_public": True,
            "disabled": False,
        }


FLAVORS = (
    Flavor("1", "m1.tiny", 512, 1, 1, weight=15),
    Flavor("2", "m1.small", 2048, 1, 20, weight=30),
    Flavor("3", "m1.medium", 4096, 2, 40, weight=24),
    Flavor("4", "m1.large", 8192, 4, 80, weight=14),
    Flavor("5", "m1.xlarge", 16384, 8, 160, weight=7),
    Flavor("6", "r1.2xlarge", 65536, 8, 80, weight=3),
    Flavor("7", "r1.8xlarge", 262144, 32, 200, weight=2),
    Flavor("8", "s1.large", 8192, 4, 80, swap=1024, weight=5,
           extra_specs=(("capabilities:disk_type", "ssd"),)),
)

# (image, share): most images are x86_64; ARM images need an ARM host.
IMAGES = (
    ({"id": "5f0c6c2e-0000-4000-8000-00000000c1d1", "name": "cirros-x86_64",
      "properties": {"hw_architecture": "x86_64", "img_hv_type": "kvm"}}, 90),
    ({"id": "5f0c6c2e-0000-4000-8000-0000000000b1", "name": "ubuntu-legacy",
      "properties": {"architecture": "x86_64", "vm_mode": "hvm"}}, 6),
    ({"id": "5f0c6c2e-0000-4000-8000-00000000a64a", "name": "ubuntu-arm64",
      "properties": {"hw_architecture": "aarch64"}}, 4),
)


@dataclasses.dataclass
class BootRequest:
    """One compute-api boot call: a request_spec for one or more instances."""

    flavor: Flavor
    image_name: str
    request_spec: dict
    filter_properties: dict

    @property
    def instance_uuids(self) -> list[str]:
        return self.request_spec["instance_uuids"]


def _uuid(rng: random.Random) -> str:
    return str(uuid_mod.UUID(int=rng.getrandbits(128), version=4))


def fleet(rng: random.Random, count: int) -> list[tuple[str, HostShape]]:
    """``count`` (host name, shape) pairs.

    Host names have no dots: the demo's single compute listener binds
    ``compute.*``, and an AMQP ``*`` matches exactly one word.
    """
    shapes = rng.choices(HOST_SHAPES, weights=[s.weight for s in HOST_SHAPES], k=count)
    width = max(4, len(str(count)))
    return [(f"sim-{shape.name}-{i:0{width}d}", shape) for i, shape in enumerate(shapes)]


def boot_requests(rng: random.Random, instances: int) -> list[BootRequest]:
    """Requests adding up to exactly ``instances`` instances."""
    flavor_weights = [f.weight for f in FLAVORS]
    images = [img for img, _ in IMAGES]
    image_weights = [w for _, w in IMAGES]
    requests: list[BootRequest] = []
    left = instances
    while left > 0:
        flavor = rng.choices(FLAVORS, weights=flavor_weights)[0]
        image = rng.choices(images, weights=image_weights)[0]
        count = 1
        if rng.random() < MULTI_INSTANCE_SHARE:
            count = rng.randint(2, MAX_INSTANCES_PER_REQUEST)
        count = min(count, left)
        left -= count
        project = rng.choice(PROJECTS)
        uuids = [_uuid(rng) for _ in range(count)]
        requests.append(BootRequest(
            flavor=flavor,
            image_name=image["name"],
            request_spec=_request_spec(flavor, image, uuids, project),
            filter_properties={"scheduler_hints": {}},
        ))
    return requests


def _request_spec(flavor: Flavor, image: dict, uuids: list[str], project: str) -> dict:
    """nova Havana's request_spec, as its compute API builds it."""
    type_id = int(flavor.flavorid)
    return {
        "instance_properties": {
            "uuid": uuids[0],
            "memory_mb": flavor.memory_mb,
            "vcpus": flavor.vcpus,
            "root_gb": flavor.root_gb,
            "ephemeral_gb": flavor.ephemeral_gb,
            "swap": flavor.swap,
            "availability_zone": None,
            "project_id": project,
            "user_id": "sim-user",
            "os_type": "linux",
            "image_ref": image["id"],
            "instance_type_id": type_id,
            "display_name": f"sim-{uuids[0][:8]}",
        },
        "instance_type": flavor.instance_type(type_id),
        "image": {"id": image["id"], "name": image["name"],
                  "properties": dict(image["properties"])},
        "instance_uuids": list(uuids),
        "num_instances": len(uuids),
        "block_device_mapping": [],
        "security_group": ["default"],
    }
