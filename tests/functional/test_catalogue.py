"""Every built-in filter and weigher, enabled at once, deciding real placements.

One daemon whose configuration enables the whole catalogue, and nine fake
compute processes that each stand out in one or two ways, so that each
filter has a host to remove and each weigher something to weigh:

========== ================================================================
host        what sets it apart
========== ================================================================
h-big       zone ``east`` (aggregate agg-east: ``ssd=true``,
            ``ram_weight_multiplier=3.0``); two NUMA cells; rack r1;
            cpu.percent 10; host_ip 10.1.0.11
h-new       zone ``east``; the newest hypervisor (9000000); one NUMA cell;
            rack r2; cpu.percent 50; two I/O operations; host_ip 10.9.0.12
h-pci       two PCI devices 8086:154d; agg-tenant (``filter_tenant_id`` =
            tenant-a, ``os_distro=windows``)
h-arm       aarch64 only; agg-arm (``instance_type=arm.small``,
            ``max_instances_per_host=1``)
h-tight     agg-tight (RAM ratio 1.0, CPU ratio 1.0, disk ratio 0.5,
            ``max_io_ops_per_host=1``); reserves 4096 MB and 2 CPUs; one
            I/O operation
h-busy      fifty I/O operations (``max_io_ops_per_host`` is 40 here: every
            claim counts as one more until the node's next report, and the
            last test packs a host with one request)
h-fail      the biggest and best on every weigher, but every build fails
h-iso       the only host in ``isolated_hosts``
h-nometrics reports no metrics
========== ================================================================

The fake computes are ``nova-sched-fake-compute`` itself, started through a
few lines (``_COMPUTE``) that add those properties (metrics, PCI pools, NUMA
cells, hypervisor version, stats) to the reports it sends; aggregates are
made with ``nova-sched-manage``'s own ``main`` (``_MANAGE``), run for a list
of commands in one process to spare a dozen interpreter start-ups. Requests
go through a plain oslo.messaging client; where they land is read from the
database; ``explain`` says beforehand what each decision will be and every
NoValidHost fault must name the same filters, with the same counts, in the
order they ran.

The tests run in file order and share the cloud: the retry test must come
first (h-fail is the best host only until its first failure), the others
read how many instances hosts already have where it matters.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid

import pytest

import cloudlib

pytestmark = pytest.mark.integration

FILTERS = [
    # Cheap, structural: where a request may go at all.
    "RetryFilter", "AvailabilityZoneFilter", "ComputeFilter", "AllHostsFilter",
    "IsolatedHostsFilter", "AggregateMultiTenancyIsolation",
    "AggregateTypeAffinityFilter", "AggregateImagePropertiesIsolation",
    "AggregateInstanceExtraSpecsFilter", "ComputeCapabilitiesFilter",
    "ImagePropertiesFilter",
    # The request's hints and server group.
    "JsonFilter", "SameHostFilter", "DifferentHostFilter",
    "SimpleCIDRAffinityFilter", "ServerGroupAntiAffinityFilter",
    "ServerGroupAffinityFilter",
    # Capacity, each followed by its per-aggregate variant.
    "RamFilter", "AggregateRamFilter", "CoreFilter", "AggregateCoreFilter",
    "DiskFilter", "AggregateDiskFilter", "IoOpsFilter", "AggregateIoOpsFilter",
    "NumInstancesFilter", "AggregateNumInstancesFilter",
    # Devices and topology, the most expensive last.
    "MetricsFilter", "PciPassthroughFilter", "NUMATopologyFilter",
]
WEIGHERS = [
    "RAMWeigher", "CPUWeigher", "DiskWeigher", "IoOpsWeigher", "MetricsWeigher",
    "ServerGroupSoftAffinityWeigher", "ServerGroupSoftAntiAffinityWeigher",
    "BuildFailureWeigher", "NumInstancesWeigher", "HypervisorVersionWeigher",
]
MAX_INSTANCES_PER_HOST = 30
ISO_IMAGE = "1f0d5d6e-0b1c-4d5e-9f3a-150c0a7e1e50"
PCI_ALIAS = {"name": "nic", "vendor_id": "8086", "product_id": "154d"}


def _metrics(percent):
    return [{"name": "cpu.percent", "value": percent, "source": "fake",
             "timestamp": "2013-10-17T00:00:00Z"}]


def _numa(*cells):
    out, first = [], 0
    for i, (cpus, memory_mb) in enumerate(cells):
        out.append({"id": i, "cpus": list(range(first, first + cpus)),
                    "memory_mb": memory_mb, "cpu_usage": 0, "memory_usage": 0})
        first += cpus
    return {"cells": out}


# host -> ((vcpus, memory_mb, local_gb), what its reports add, fail rate)
NODES = {
    "h-big": ((16, 32768, 400), {
        "metrics": _metrics(10), "numa_topology": _numa((8, 16384), (8, 16384)),
        "hypervisor_version": 6002000, "host_ip": "10.1.0.11",
        "extra_stats": {"rack": "r1"}}, 0.0),
    "h-new": ((16, 32768, 400), {
        "metrics": _metrics(50), "numa_topology": _numa((16, 32768)),
        "hypervisor_version": 9000000, "host_ip": "10.9.0.12",
        "extra_stats": {"rack": "r2", "io_workload": 2}}, 0.0),
    "h-pci": ((8, 16384, 200), {
        "metrics": _metrics(30), "host_ip": "10.2.0.13",
        "pci_stats": [{"vendor_id": "8086", "product_id": "154d", "count": 2,
                       "dev_type": "type-PCI"}]}, 0.0),
    "h-arm": ((8, 16384, 200), {
        "metrics": _metrics(20), "host_ip": "10.3.0.14",
        "supported_instances": [["aarch64", "kvm", "hvm"]]}, 0.0),
    "h-tight": ((8, 16384, 200), {
        "metrics": _metrics(20), "host_ip": "10.3.0.15",
        "reserved_host_memory_mb": 4096, "reserved_host_cpus": 2,
        "extra_stats": {"rack": "r1", "io_workload": 1}}, 0.0),
    "h-busy": ((8, 16384, 200), {
        "metrics": _metrics(20), "host_ip": "10.3.0.16",
        "extra_stats": {"io_workload": 50}}, 0.0),
    "h-fail": ((32, 65536, 800), {
        "metrics": _metrics(0), "hypervisor_version": 7000000,
        "host_ip": "10.3.0.17"}, 1.0),
    "h-iso": ((8, 16384, 200), {"metrics": _metrics(20), "host_ip": "10.3.0.18"}, 0.0),
    "h-nometrics": ((8, 16384, 200), {"host_ip": "10.3.0.19"}, 0.0),
}

AGGREGATES = [
    ("agg-east", "east", ["h-big", "h-new"],
     ["ssd=true", "ram_weight_multiplier=3.0"]),
    ("agg-tenant", None, ["h-pci"], ["filter_tenant_id=tenant-a", "os_distro=windows"]),
    ("agg-arm", None, ["h-arm"], ["instance_type=arm.small", "max_instances_per_host=1"]),
    ("agg-tight", None, ["h-tight"],
     ["ram_allocation_ratio=1.0", "cpu_allocation_ratio=1.0",
      "disk_allocation_ratio=0.5", "max_io_ops_per_host=1"]),
]

# nova-sched-fake-compute whose reports carry the extra properties given as
# the first argument (JSON); the rest is its usual command line.
_COMPUTE = r"""
import json, sys
from nova_sched.compute import fake
from nova_sched.cmd import fake_compute

extra = json.loads(sys.argv.pop(1))
_init, _report = fake.FakeComputeNode.__init__, fake.FakeComputeNode.report

def __init__(self, *args, **kwargs):
    for key in ("supported_instances", "host_ip", "extra_stats",
                "reserved_host_memory_mb", "reserved_host_cpus"):
        if key in extra:
            kwargs[key] = extra[key]
    _init(self, *args, **kwargs)

def report(self):
    values = _report(self)
    for key in ("metrics", "pci_stats", "numa_topology", "hypervisor_version"):
        if key in extra:
            values[key] = extra[key]
    return values

fake.FakeComputeNode.__init__ = __init__
fake.FakeComputeNode.report = report
sys.exit(fake_compute.main(sys.argv[1:]))
"""

# nova-sched-manage's main() for each command of a JSON list, in one process.
_MANAGE = r"""
import json, sys
from nova_sched.cmd import manage

config, commands = sys.argv[1], json.loads(sys.argv[2])
for argv in commands:
    code = manage.main(["--config-file", config, *argv])
    if code:
        sys.exit(f"nova-sched-manage {' '.join(argv)}: exit code {code}")
"""


def _manage_batch(cloud, commands):
    done = subprocess.run(
        [sys.executable, "-c", _MANAGE, str(cloud.config_file), json.dumps(commands)],
        capture_output=True, text=True, timeout=120, env=cloudlib.subprocess_env(),
        cwd=str(cloud.workdir), stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def cat(rabbitmq, workdir):
    c = cloudlib.Cloud(workdir("catalogue"), "catalogue")
    try:
        c.write_config(c.config_file, {
            "filter_scheduler": {
                "enabled_filters": FILTERS,
                "weight_classes": WEIGHERS,
                "isolated_hosts": "h-iso",
                "isolated_images": ISO_IMAGE,
                "max_instances_per_host": MAX_INSTANCES_PER_HOST,
                "max_io_ops_per_host": 40,
                # Strong enough to decide against the other eight weighers.
                "soft_affinity_weight_multiplier": 100.0,
                "soft_anti_affinity_weight_multiplier": 100.0,
                # Spread by instance count (0, its default, would switch it off).
                "num_instances_weight_multiplier": -1.0,
            },
            "metrics": {"weight_setting": "cpu.percent=-1.0"},
            "pci": {"alias": json.dumps(PCI_ALIAS)},
        })
        commands = [["db", "sync"]]
        for name, zone, hosts, metadata in AGGREGATES:
            commands.append(["aggregate", "create", name]
                            + (["--zone", zone] if zone else []))
            commands += [["aggregate", "add-host", name, h] for h in hosts]
            commands.append(["aggregate", "set-metadata", name, *metadata])
        _manage_batch(c, commands)
        c.start_daemon()
        for host, ((vcpus, ram, disk), extra, fail) in NODES.items():
            args = ["--config-file", str(c.config_file), "--host", host,
                    "--vcpus", str(vcpus), "--memory-mb", str(ram),
                    "--local-gb", str(disk), "--report-interval", "1"]
            if fail:
                args += ["--fail-builds", str(fail)]
            c.spawn(host, [sys.executable, "-c", _COMPUTE, json.dumps(extra), *args])
        c.wait_for_nodes(list(NODES))
        yield c
    finally:
        codes = c.close()
    assert all(code == 0 for code in codes.values()), \
        f"processes that did not exit 0 on SIGTERM: {codes}"


# -- requests ------------------------------------------------------------------
class Request:
    """One Havana request (request_spec, filter_properties) and its context."""

    def __init__(self, itype=None, num=1, project="demo-project", az=None,
                 hints=None, image_props=None, image_id=None, group=None):
        itype = itype or cloudlib.named_flavor("m1.small")
        self.spec, self.fprops, self.uuids = cloudlib.havana_request(
            itype, num, project_id=project, availability_zone=az,
            scheduler_hints=hints)
        if image_props is not None:
            self.spec["image"]["properties"] = dict(image_props)
        if image_id:
            self.spec["image"]["id"] = image_id
            self.spec["instance_properties"]["image_ref"] = image_id
        if group:
            self.spec["instance_group"] = group
            self.fprops["scheduler_hints"]["group"] = group["uuid"]
        self.ctxt = cloudlib.request_context(project_id=project)

    @property
    def uuid(self):
        return self.uuids[0]


def _flavor(name, memory_mb=512, vcpus=1, root_gb=1, **extra_specs):
    return cloudlib.flavor(name, memory_mb, vcpus, root_gb, extra_specs=extra_specs)


def _group(policy, name=None, **rules):
    group_uuid = str(uuid.uuid4())
    return {"uuid": group_uuid, "name": name or f"{policy}-{group_uuid[:8]}",
            "policy": policy, "rules": rules}


def _query(*terms):
    return {"query": json.dumps(terms[0] if len(terms) == 1 else ["and", *terms])}


def _boot(cloud, *requests):
    for req in requests:
        cloud.client.run_instance(req.ctxt, req.spec, req.fprops)
    return cloud.wait_for_final([u for r in requests for u in r.uuids], timeout=60)


def _explain(cloud, req):
    cctxt = cloud.client.client.prepare(version="2.10", timeout=30)
    return cctxt.call(req.ctxt, "explain", request_spec=req.spec,
                      filter_properties=req.fprops)


def _removed(reply):
    return {name: sorted(h for h, _ in pairs) for name, pairs in reply["removed"].items()
            if pairs}


def _fault(cloud, uuid_):
    faults = cloud.faults(uuid_)
    assert faults, f"no fault for {uuid_}"
    return faults[-1]["message"]


def _instances_on(cloud) -> dict[str, int]:
    """Instances each host holds (placed and not failed)."""
    rows = cloud.query("SELECT host, COUNT(*) AS n FROM instances WHERE host IS NOT "
                       "NULL AND vm_state != 'error' GROUP BY host")
    return {r["host"]: r["n"] for r in rows}


def _wait_for_explain(cloud, req, predicate, what, timeout=15):
    def _check():
        reply = _explain(cloud, req)
        return reply if predicate(reply) else None
    return cloudlib.wait_until(_check, timeout, 0.3, what)


# -- the tests -----------------------------------------------------------------
def test_the_whole_catalogue_is_enabled_and_reported_by_explain(cat):
    listed = subprocess.run(
        [sys.executable, "-c",
         "import json; from nova_sched.scheduler.filters import all_filters; "
         "from nova_sched.scheduler.weights import all_weighers; "
         "print(json.dumps([[c.__name__ for c in all_filters()], "
         "[c.__name__ for c in all_weighers()]]))"],
        capture_output=True, text=True, timeout=60, env=cloudlib.subprocess_env())
    assert listed.returncode == 0, listed.stderr
    builtin_filters, builtin_weighers = json.loads(listed.stdout.splitlines()[-1])
    assert sorted(FILTERS) == sorted(builtin_filters)
    assert sorted(WEIGHERS) == sorted(builtin_weighers)

    reply = _explain(cat, Request())
    # Every filter ran, in the configured order; the structural ones each
    # removed the host set apart for them.
    assert list(reply["removed"]) == FILTERS
    assert _removed(reply) == {
        "IsolatedHostsFilter": ["h-iso"],
        "AggregateMultiTenancyIsolation": ["h-pci"],
        "AggregateTypeAffinityFilter": ["h-arm"],
        "IoOpsFilter": ["h-busy"],
        "AggregateIoOpsFilter": ["h-tight"],
        "MetricsFilter": ["h-nometrics"],
    }
    # h-fail is the biggest, idlest, newest-but-one: best on every weigher.
    assert reply["hosts"][0]["host"] == "h-fail"
    assert sorted(h["host"] for h in reply["hosts"]) == ["h-big", "h-fail", "h-new"]
    for h in reply["hosts"]:
        assert list(h["weights"]) == WEIGHERS
        assert h["weight"] == pytest.approx(sum(h["weights"].values()))


def test_a_failed_build_is_retried_elsewhere_and_its_host_sinks(cat):
    """RetryFilter and BuildFailureWeigher; then h-fail is disabled (ComputeFilter)."""
    req = Request()
    assert _explain(cat, req)["hosts"][0]["host"] == "h-fail"
    row = _boot(cat, req)[req.uuid]
    assert row["vm_state"] == "active", (row, cat.faults(req.uuid))
    assert row["host"] in ("h-big", "h-new")
    assert f"Build of instance {req.uuid} failed on h-fail" in cat.log_text("h-fail")
    results = [e["result"] for a in cat.actions(req.uuid) for e in a["events"]
               if e["event"] == "schedule"]
    assert results == ["Success", "Success"]

    # h-fail now reports a failed build: it sinks below every other host.
    probe = Request()
    reply = _wait_for_explain(
        cat, probe,
        lambda r: any(h["host"] == "h-fail" and h["weights"]["BuildFailureWeigher"]
                      == -1000000.0 for h in r["hosts"]),
        "h-fail's failed build to be weighed")
    assert reply["hosts"][-1]["host"] == "h-fail"
    best = reply["hosts"][0]["host"]
    assert _boot(cat, probe)[probe.uuid]["host"] == best

    done = cat.run_manage("service", "disable", "h-fail", "--reason", "failing builds")
    assert done.returncode == 0, done.stderr
    reply = _wait_for_explain(cat, Request(),
                              lambda r: _removed(r).get("ComputeFilter") == ["h-fail"],
                              "ComputeFilter to remove the disabled h-fail")
    assert "h-fail" not in [h["host"] for h in reply["hosts"]]


def test_each_filter_steers_a_placement(cat):
    east = {"h-big", "h-new"}
    cases = {
        "AvailabilityZoneFilter": (Request(az="east"), east),
        "ComputeCapabilitiesFilter": (Request(_flavor(
            "caps", **{"capabilities:hypervisor_version": ">= 9000000"})), {"h-new"}),
        "ImagePropertiesFilter+AggregateTypeAffinityFilter": (Request(
            _flavor("arm.small"), image_props={"hw_architecture": "aarch64"}),
            {"h-arm"}),
        "AggregateMultiTenancyIsolation+PciPassthroughFilter+"
        "AggregateImagePropertiesIsolation": (Request(
            _flavor("pci", **{"pci_passthrough:alias": "nic:2"}), project="tenant-a",
            image_props={"os_distro": "windows"}), {"h-pci"}),
        "AggregateInstanceExtraSpecsFilter": (Request(_flavor(
            "ssd", **{"aggregate_instance_extra_specs:ssd": "true"})), east),
        "JsonFilter": (Request(hints=_query([">=", "$free_ram_mb", 20000],
                                            ["=", "$stats.rack", "r1"])), {"h-big"}),
        "SimpleCIDRAffinityFilter": (Request(hints={
            "build_near_host_ip": "10.9.200.1", "cidr": "/16"}), {"h-new"}),
        "NUMATopologyFilter": (Request(_flavor(
            "numa", memory_mb=4096, vcpus=4, **{"hw:numa_nodes": "2"})), {"h-big"}),
        "IsolatedHostsFilter": (Request(image_id=ISO_IMAGE), {"h-iso"}),
        "plain": (Request(cloudlib.named_flavor("m1.tiny")), east),
    }
    rows = _boot(cat, *(req for req, _ in cases.values()))
    for name, (req, expected) in cases.items():
        row = rows[req.uuid]
        assert row["vm_state"] == "active", (name, row, cat.faults(req.uuid))
        assert row["host"] in expected, (name, row["host"], expected)

    # Hints about other instances: where the zone request above landed.
    anchor = rows[cases["AvailabilityZoneFilter"][0].uuid]["host"]
    same = Request(hints={"same_host": [cases["AvailabilityZoneFilter"][0].uuid]})
    different = Request(az="east", hints={
        "different_host": [cases["AvailabilityZoneFilter"][0].uuid]})
    rows = _boot(cat, same, different)
    assert rows[same.uuid]["host"] == anchor
    assert rows[different.uuid]["host"] == (east - {anchor}).pop()


def test_weighers_decide_as_explain_says(cat):
    time.sleep(1.5)  # let every node report (claims count as I/O until then)
    counts = _instances_on(cat)
    req = Request(cloudlib.named_flavor("m1.tiny"))
    reply = _explain(cat, req)
    by_host = {h["host"]: h["weights"] for h in reply["hosts"]}
    assert set(by_host) == {"h-big", "h-new"}
    big, new = by_host["h-big"], by_host["h-new"]
    # Metrics: cpu.percent=-1.0 prefers h-big (10%) to h-new (50%).
    assert (big["MetricsWeigher"], new["MetricsWeigher"]) == (1.0, 0.0)
    # The newest hypervisor.
    assert (big["HypervisorVersionWeigher"], new["HypervisorVersionWeigher"]) == (0.0, 1.0)
    # h-new's two I/O operations count against it (multiplier -1.0).
    assert (big["IoOpsWeigher"], new["IoOpsWeigher"]) == (0.0, -1.0)
    # agg-east's ram_weight_multiplier=3.0 replaces the option's 1.0.
    assert max(big["RAMWeigher"], new["RAMWeigher"]) == pytest.approx(3.0)
    assert max(big["CPUWeigher"], new["CPUWeigher"]) == pytest.approx(1.0)
    assert max(big["DiskWeigher"], new["DiskWeigher"]) == pytest.approx(1.0)
    # More instances weigh less (multiplier -1.0, scaled between the two).
    fuller = max(("h-big", "h-new"), key=lambda h: counts.get(h, 0))
    if counts.get("h-big", 0) != counts.get("h-new", 0):
        assert by_host[fuller]["NumInstancesWeigher"] == -1.0
    for weights in (big, new):
        assert weights["BuildFailureWeigher"] == 0.0
        assert weights["ServerGroupSoftAffinityWeigher"] == 0.0
        assert weights["ServerGroupSoftAntiAffinityWeigher"] == 0.0

    assert _boot(cat, req)[req.uuid]["host"] == reply["hosts"][0]["host"]


def test_server_groups(cat):
    # The two east hosts, by JsonFilter, which binds every instance of a
    # request (AvailabilityZoneFilter runs once per request: see the last test).
    east = _query(["in", "$host", "h-big", "h-new"])
    # Hard anti-affinity: two members on two hosts, one each.
    anti = Request(num=2, hints=east, group=_group("anti-affinity"))
    # Soft anti-affinity spreads as far as it can and never fails.
    soft_anti = Request(num=3, hints=east, group=_group("soft-anti-affinity"))
    # Soft affinity packs the members together.
    soft = Request(cloudlib.named_flavor("m1.tiny"), num=3, group=_group("soft-affinity"))
    rows = _boot(cat, anti)
    rows.update(_boot(cat, soft_anti))
    rows.update(_boot(cat, soft))
    assert {rows[u]["vm_state"] for u in rows} == {"active"}, \
        {u: cat.faults(u) for u in rows if rows[u]["vm_state"] != "active"}
    assert sorted(rows[u]["host"] for u in anti.uuids) == ["h-big", "h-new"]
    spread = [rows[u]["host"] for u in soft_anti.uuids]
    assert set(spread[:2]) == {"h-big", "h-new"} and spread[2] in ("h-big", "h-new")
    assert len({rows[u]["host"] for u in soft.uuids}) == 1

    # A third hard anti-affinity member has nowhere to go.
    third = Request(hints=east, group=anti.spec["instance_group"])
    row = _boot(cat, third)[third.uuid]
    assert row["vm_state"] == "error"
    assert _fault(cat, third.uuid) == (
        "No valid host was found. 0/9 hosts available: ComputeFilter removed 1, "
        "IsolatedHostsFilter removed 1, AggregateMultiTenancyIsolation removed 1, "
        "AggregateTypeAffinityFilter removed 1, JsonFilter removed 3, "
        "ServerGroupAntiAffinityFilter removed 2")

    # ... unless the group allows two per host (max_server_per_host).
    two_per_host = _group("anti-affinity", max_server_per_host=2)
    pairs = Request(num=4, hints=east, group=two_per_host)
    rows = _boot(cat, pairs)
    hosts = sorted(rows[u]["host"] for u in pairs.uuids)
    assert hosts == ["h-big", "h-big", "h-new", "h-new"], \
        {u: (rows[u]["vm_state"], cat.faults(u)) for u in pairs.uuids}


def _uuid_on(cloud, host):
    rows = cloud.query("SELECT uuid FROM instances WHERE host = :h AND vm_state = "
                       "'active' LIMIT 1", h=host)
    assert rows, f"no instance on {host}"
    return rows[0]["uuid"]


def test_no_valid_host_faults_name_the_filters_in_order(cat):
    tight = ["=", "$host", "h-tight"]
    nic = {"pci_passthrough:alias": "nic:1"}
    # name -> (request, the filter that removed the last hosts)
    cases = {
        "AvailabilityZoneFilter": (Request(az="nowhere"), None),
        "ComputeFilter": (Request(hints=_query(["=", "$host", "h-fail"])), "JsonFilter"),
        "RamFilter": (Request(_flavor("ram", memory_mb=10**6)), None),
        "CoreFilter": (Request(_flavor("core", vcpus=64)), None),
        "DiskFilter": (Request(_flavor("disk", root_gb=5000)), None),
        # With AggregateRamFilter enabled, agg-tight's ratio is h-tight's
        # ratio for every judge of RAM: RamFilter, which runs first, already
        # applies it (and the claim would too).
        "AggregateRamFilter": (
            Request(_flavor("aram", memory_mb=14000), hints=_query(tight)), "RamFilter"),
        "AggregateCoreFilter": (
            Request(_flavor("acore", vcpus=8), hints=_query(tight)), "CoreFilter"),
        "AggregateDiskFilter": (
            Request(_flavor("adisk", root_gb=150), hints=_query(tight)), "DiskFilter"),
        "AggregateIoOpsFilter": (Request(hints=_query(tight)), None),
        "IoOpsFilter": (Request(hints=_query(["=", "$host", "h-busy"])), None),
        "MetricsFilter": (Request(hints=_query(["=", "$host", "h-nometrics"])), None),
        # h-arm took the one instance agg-arm allows in the placement test.
        "AggregateNumInstancesFilter": (Request(
            _flavor("arm.small"), image_props={"hw_architecture": "aarch64"}), None),
        "AggregateTypeAffinityFilter": (Request(
            image_props={"hw_architecture": "aarch64"}), "ImagePropertiesFilter"),
        "AggregateMultiTenancyIsolation": (Request(
            _flavor("pci", **nic), project="tenant-b"), "PciPassthroughFilter"),
        "AggregateImagePropertiesIsolation": (Request(
            _flavor("pci", **nic), project="tenant-a",
            image_props={"os_distro": "linux"}), "PciPassthroughFilter"),
        "PciPassthroughFilter": (Request(
            _flavor("pci", **{"pci_passthrough:alias": "nic:3"}), project="tenant-a"),
            None),
        "NUMATopologyFilter": (Request(_flavor(
            "numa", memory_mb=4096, vcpus=4, **{"hw:numa_nodes": "4"})), None),
        "ComputeCapabilitiesFilter": (Request(_flavor(
            "caps", **{"capabilities:hypervisor_version": ">= 99000000"})), None),
        "AggregateInstanceExtraSpecsFilter": (Request(_flavor(
            "ssd", **{"aggregate_instance_extra_specs:ssd": "false"})), None),
        "SimpleCIDRAffinityFilter": (
            Request(hints={"build_near_host_ip": "192.168.0.1"}), None),
        "JsonFilter": (Request(hints=_query([">", "$free_ram_mb", 10**7])), None),
        "SameHostFilter": (Request(hints={"same_host": _uuid_on(cat, "h-iso")}), None),
        "DifferentHostFilter": (Request(hints={
            "different_host": [_uuid_on(cat, "h-big"), _uuid_on(cat, "h-new")],
            **_query(["in", "$host", "h-big", "h-new"])}), None),
    }
    explained = {name: _explain(cat, req) for name, (req, _) in cases.items()}
    rows = _boot(cat, *(req for req, _ in cases.values()))
    for name, (req, last) in cases.items():
        reply = explained[name]
        assert reply["hosts"] == [], (name, reply["hosts"])
        assert rows[req.uuid]["vm_state"] == "error", (name, rows[req.uuid])
        message = _fault(cat, req.uuid)
        # The same words as explain's summary: each filter that removed
        # hosts, with how many, in the order the filters ran.
        assert message == f"No valid host was found. {reply['reason']}", name
        assert message.startswith("No valid host was found. 0/9 hosts available: ")
        counts = {f: int(n) for f, n in re.findall(r"(\w+) removed (\d+)", message)}
        assert list(counts) == [f for f in FILTERS if f in counts], message
        # The Aggregate* resource filters remove nothing RamFilter/CoreFilter/
        # DiskFilter left: they only make the aggregates' ratios count.
        assert name in counts or name in ("AggregateRamFilter", "AggregateCoreFilter",
                                          "AggregateDiskFilter"), message
        assert list(counts)[-1] == (last or name), message
        assert sum(counts.values()) == 9, message
        assert counts == {f: len(h) for f, h in _removed(reply).items()}, message
    # Those aimed at one host: the filter named last removed just that one.
    for name in ("AggregateRamFilter", "AggregateCoreFilter", "AggregateDiskFilter",
                 "AggregateIoOpsFilter", "IoOpsFilter", "MetricsFilter",
                 "AggregateNumInstancesFilter"):
        request, last = cases[name]
        message = _fault(cat, request.uuid)
        assert message.endswith(f"{last or name} removed 1"), message


def test_malformed_json_query_fails_the_request_and_not_the_daemon(cat):
    bad = Request(hints={"query": '["!=", "$host", "h-big"]'})
    row = _boot(cat, bad)[bad.uuid]
    assert row["vm_state"] == "error"
    assert "JsonFilter" in _fault(cat, bad.uuid) and "!=" in _fault(cat, bad.uuid)
    ok = Request(cloudlib.named_flavor("m1.tiny"))
    assert _boot(cat, ok)[ok.uuid]["vm_state"] == "active"
    cat.assert_running()


def test_every_instance_of_a_request_obeys_the_once_per_request_filters(cat):
    """Filters nova runs once per request must still bind the later instances."""
    isolated = Request(cloudlib.named_flavor("m1.tiny"), num=3, image_id=ISO_IMAGE)
    zoned = Request(cloudlib.named_flavor("m1.tiny"), num=3, az="east")
    rows = _boot(cat, isolated, zoned)
    assert [rows[u]["host"] for u in isolated.uuids] == ["h-iso"] * 3
    assert {rows[u]["host"] for u in zoned.uuids} <= {"h-big", "h-new"}


def test_explain_knows_a_groups_members(cat):
    """explain must judge a group member as run_instance would."""
    east = _query(["in", "$host", "h-big", "h-new"])
    group = _group("anti-affinity")
    first = Request(cloudlib.named_flavor("m1.tiny"), hints=east, group=group)
    taken = _boot(cat, first)[first.uuid]["host"]
    second = Request(cloudlib.named_flavor("m1.tiny"), hints=east, group=group)
    reply = _explain(cat, second)
    assert _removed(reply).get("ServerGroupAntiAffinityFilter") == [taken], reply
    assert [h["host"] for h in reply["hosts"]] == [({"h-big", "h-new"} - {taken}).pop()]


def test_groups_with_the_same_name_are_different_groups(cat):
    """Server groups are told apart by uuid; names need not be unique (nova)."""
    east = _query(["in", "$host", "h-big", "h-new"])
    first = Request(cloudlib.named_flavor("m1.tiny"), hints=east,
                    group=_group("affinity", name="web"))
    assert _boot(cat, first)[first.uuid]["vm_state"] == "active"
    # Another group called "web": its own anti-affinity must hold, so the
    # third member has nowhere to go.
    other = Request(cloudlib.named_flavor("m1.tiny"), num=3, hints=east,
                    group=_group("anti-affinity", name="web"))
    rows = _boot(cat, other)
    placed = [rows[u]["host"] for u in other.uuids[:2]]
    assert sorted(placed) == ["h-big", "h-new"], placed
    assert rows[other.uuids[2]]["vm_state"] == "error", rows[other.uuids[2]]
    assert _fault(cat, other.uuids[2]).endswith("ServerGroupAntiAffinityFilter removed 2")


def test_affinity_packs_one_host_until_num_instances_filter_finds_it_full(cat):
    """Runs last: it fills a host up to max_instances_per_host."""
    probe = Request(cloudlib.named_flavor("m1.tiny"), group=_group("affinity"))
    target = _explain(cat, probe)["hosts"][0]["host"]
    room = MAX_INSTANCES_PER_HOST - _instances_on(cat).get(target, 0)
    assert room >= 1, f"{target} is already full"
    together = Request(cloudlib.named_flavor("m1.tiny"), num=room + 1,
                       group=_group("affinity"))
    rows = _boot(cat, together)
    placed, last = together.uuids[:-1], together.uuids[-1]
    assert {rows[u]["host"] for u in placed} == {target}, \
        {u: _fault(cat, u) for u in placed if rows[u]["host"] is None}
    assert rows[last]["vm_state"] == "error"
    message = _fault(cat, last)
    assert message.startswith("No valid host was found. 0/9 hosts available: ")
    assert re.search(r"ServerGroupAffinityFilter removed \d+, NumInstancesFilter "
                     r"removed 1$", message), message
