"""nova-conductor's select_destinations calls, timed: run with the python of a
venv holding nova.

    <nova venv>/bin/python bench/nova_select_driver.py --transport-url URL \
        [--calls 100] [--warmup 5] [--sync-prefix bench-node- --sync-count N]

Calls the scheduler sequentially through nova's own
``nova.scheduler.rpcapi.SchedulerAPI.select_destinations`` (RPC API 4.5,
``return_objects=True, return_alternates=True``, as conductor's
``_schedule_instances`` calls it), each time with a RequestSpec made as
nova-api makes it for a boot (``RequestSpec.from_components`` with the
flavor, the image, ``build_filter_properties``, the default security
group) for a fresh instance uuid: flavor 1 vCPU / 512 MB / 1 GB root disk,
no group, no zone, no hints. Each call's time is the client's, from the
call to nova's deserialised Selections.

Prints one JSON line per call (``{"i", "warmup", "uuid", "ms", "host",
"nodename", "node_uuid", "alternates"}`` or ``"error"``), then one line
``{"done": ...}``.

``--sync-count N`` first fanout-casts ``sync_instance_info`` twice for
each node ``<prefix><i:05d>`` with no instance (what every nova-compute
sends at start and every ``scheduler_instance_sync_interval``): without
it nova-scheduler reads each candidate host's instances from the cell
database on every request. With ``--calls 0`` it only does that.

``--flavors plain,trait,pcpu,vgpu,pci`` (issue 39) takes the calls' flavors
in turn from bench/placement_rows.py's ``FLAVORS`` (extra specs as an
operator sets them: a required trait, ``hw:cpu_policy=dedicated`` with the
NUMA topology nova-api derives from it, ``resources:VGPU``, a PCI resource
class); each line then names its ``"flavor"``. Without it, the one flavor
of ``--vcpus``/``--memory-mb``/``--root-gb`` as before.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
import warnings

warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")


def say(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transport-url", required=True)
    parser.add_argument("--exchange", default="nova")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--sync-prefix", default="bench-node-")
    parser.add_argument("--sync-count", type=int, default=0)
    parser.add_argument("--sync-rounds", type=int, default=2)
    parser.add_argument("--vcpus", type=int, default=1)
    parser.add_argument("--memory-mb", type=int, default=512)
    parser.add_argument("--root-gb", type=int, default=1)
    parser.add_argument("--flavors", default="",
                        help="comma-separated kinds of bench/placement_rows.py's "
                        "FLAVORS, taken in turn")
    args = parser.parse_args()

    import nova.conf
    from nova import context as nova_context
    from nova import objects, rpc
    from nova.scheduler import rpcapi
    from nova.scheduler import utils as scheduler_utils
    from oslo_messaging import transport as om_transport

    conf = nova.conf.CONF
    # As nova's config.parse_args: the exchange default before parsing.
    rpc.set_defaults(control_exchange=args.exchange)
    conf([], project="nova", default_config_files=[], default_config_dirs=[])
    conf.register_opts(om_transport._transport_opts)
    conf.set_override("transport_url", args.transport_url)
    objects.register_all()
    rpc.init(conf)

    ctxt = nova_context.get_admin_context()
    ctxt.project_id, ctxt.user_id = "bench-project", "bench-user"
    api = rpcapi.SchedulerAPI()

    if args.sync_count:
        started = time.monotonic()
        for _ in range(args.sync_rounds):
            for i in range(args.sync_count):
                api.sync_instance_info(ctxt, f"{args.sync_prefix}{i:05d}", [])
        say({"synced": args.sync_count, "rounds": args.sync_rounds,
             "seconds": round(time.monotonic() - started, 2)})

    flavor = objects.Flavor(
        id=1, flavorid="bench.small", name="bench.small", memory_mb=args.memory_mb,
        vcpus=args.vcpus, root_gb=args.root_gb, ephemeral_gb=0, swap=0,
        rxtx_factor=1.0, vcpu_weight=0, disabled=False, is_public=True,
        extra_specs={}, description=None)
    image = {"id": str(uuid.uuid4()), "name": "cirros", "status": "active",
             "container_format": "bare", "disk_format": "raw", "min_disk": 0,
             "min_ram": 0, "size": 16338944, "properties": {}}
    security_groups = objects.SecurityGroupList(
        objects=[objects.SecurityGroup(name="default")])
    flavors = [(None, flavor)]
    if args.flavors:
        from nova.virt import hardware
        from placement_rows import FLAVORS

        flavors = []
        for n, kind in enumerate(k for k in args.flavors.split(",") if k):
            vcpus, extra_specs, _ = FLAVORS[kind]
            flavors.append((kind, objects.Flavor(
                id=n + 1, flavorid=f"bench.{kind}", name=f"bench.{kind}",
                memory_mb=args.memory_mb, vcpus=vcpus, root_gb=args.root_gb,
                ephemeral_gb=0, swap=0, rxtx_factor=1.0, vcpu_weight=0,
                disabled=False, is_public=True, extra_specs=dict(extra_specs),
                description=None)))
        image_meta = objects.ImageMeta.from_dict(image)

    def request_spec(instance_uuid: str, flavor):
        """nova-api's _provision_instances, for one instance of a boot."""
        filter_properties = scheduler_utils.build_filter_properties(
            {}, None, None, flavor)
        numa_topology = (hardware.numa_get_constraints(flavor, image_meta)
                         if args.flavors else None)
        spec = objects.RequestSpec.from_components(
            ctxt, instance_uuid, image, flavor, numa_topology,
            objects.InstancePCIRequests(requests=[]), filter_properties,
            None, None, security_groups=security_groups,
            port_resource_requests=[],
            request_level_params=objects.RequestLevelParams())
        spec.is_bfv = False
        spec.num_instances = 1
        return spec

    total = args.warmup + args.calls
    errors = 0
    for i in range(total):
        instance_uuid = str(uuid.uuid4())
        kind, call_flavor = flavors[i % len(flavors)]
        spec = request_spec(instance_uuid, call_flavor)
        line = {"i": i, "warmup": i < args.warmup, "uuid": instance_uuid}
        if kind:
            line["flavor"] = kind
        started = time.perf_counter()
        try:
            answer = api.select_destinations(
                ctxt, spec, [instance_uuid], return_objects=True,
                return_alternates=True)
        except Exception as err:  # recorded; the orchestrator decides
            line["ms"] = round((time.perf_counter() - started) * 1000, 3)
            line["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            errors += 1
            say(line)
            continue
        line["ms"] = round((time.perf_counter() - started) * 1000, 3)
        first = answer[0][0]
        line.update(host=first.service_host, nodename=first.nodename,
                    node_uuid=str(first.compute_node_uuid),
                    alternates=len(answer[0]) - 1,
                    allocation_request=bool(first.allocation_request))
        say(line)
    say({"done": total, "errors": errors})
    return 0


if __name__ == "__main__":
    sys.exit(main())
