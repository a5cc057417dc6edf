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

``--operation live-migration`` or ``targeted`` (issue 40) makes each call
a move of an instance booted before, as nova-conductor 34's
``LiveMigrationTask`` asks it, with the cloud's ``--nova-conf`` (its
Placement and API database) and ``--nodes N`` (the fleet). Untimed, per
call: the instance's boot claim on a source node (``claim_resources`` as
the scheduler made it), then conductor's
``replace_allocation_with_migration`` step (nova's own
``SchedulerReportClient.move_allocations``: the allocation now belongs to
a new migration uuid, the instance is a consumer with nothing); then the
RequestSpec as conductor has it: the boot's spec through its database
round trip (``_get_update_primitives`` / ``_from_db_object``), the forced
hosts reset, no port resources, ``ignore_hosts`` the source host and
``requested_destination`` a ``Destination`` with the instance's
``CellMapping`` read from the API database (``targeted``: with the named
host and node first, as nova-api sets it for a live migration to a host
without ``force``). Timed: ``select_destinations`` with
``return_alternates=False``. Lines also carry ``"operation"``,
``"source"``, ``"source_uuid"``, ``"migration"`` and for ``targeted``
``"target_uuid"``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
import warnings

warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")


OPERATIONS = ("boot", "live-migration", "targeted")


def say(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


class Mover:
    """What nova-conductor 34 does for a live migration before it calls
    ``select_destinations`` (nova/conductor/tasks/live_migrate.py
    ``_execute``, ``_find_destination``), for instances booted with the
    driver's boot RequestSpec."""

    def __init__(self, ctxt, args, request_spec):
        import nova.conf
        from nova import objects
        from nova.db.api import api as api_db
        from nova.scheduler.client import report

        api_db.configure(nova.conf.CONF)
        self.ctxt, self.args, self.boot_spec = ctxt, args, request_spec
        self.placement = report.report_client_singleton()
        # conductor's _get_source_cell_mapping reads it from the API
        # database: the whole record goes over the wire.
        self.cell = objects.CellMapping.get_by_uuid(ctxt, args.cell_uuid)
        self.targeted = args.operation == "targeted"

    def node(self, index: int) -> tuple[str, str]:
        """The name (host and node alike, as the fake driver's) and uuid
        (nova_cloud_register.py's uuid5) of node ``index``."""
        name = f"{self.args.sync_prefix}{index % self.args.nodes:05d}"
        return name, str(uuid.uuid5(uuid.NAMESPACE_DNS, name))

    def prepare(self, i: int, instance_uuid: str, flavor, line: dict):
        """The instance's claim on its source moved to a migration
        consumer, and the RequestSpec conductor then sends."""
        from nova import objects
        from nova.scheduler import utils as scheduler_utils

        # Sources spread over the fleet (7919 is prime: no short cycle).
        source, source_uuid = self.node(i * 7919)
        migration = str(uuid.uuid4())
        resources = {"VCPU": flavor.vcpus, "MEMORY_MB": flavor.memory_mb,
                     "DISK_GB": flavor.root_gb}
        if not self.placement.claim_resources(
                self.ctxt, instance_uuid,
                {"allocations": {source_uuid: {"resources": resources}}},
                self.ctxt.project_id, self.ctxt.user_id,
                allocation_request_version="1.28"):
            raise RuntimeError(f"Placement refused the boot claim on {source}")
        if not self.placement.move_allocations(self.ctxt, instance_uuid, migration):
            raise RuntimeError("Placement refused the move to the migration")
        line.update(operation=self.args.operation, source=source,
                    source_uuid=source_uuid, migration=migration)

        # The spec as the API database keeps it (per-request fields dropped).
        stored = self.boot_spec(instance_uuid, flavor)
        db_row = {"id": i + 1, "instance_uuid": instance_uuid,
                  "spec": stored._get_update_primitives()["spec"]}
        spec = objects.RequestSpec._from_db_object(
            self.ctxt, objects.RequestSpec(), db_row)
        if self.targeted:
            # nova-api's live_migrate with a host and force False; half the
            # fleet away from the source so it is never the source.
            target, target_uuid = self.node(i * 7919 + self.args.nodes // 2)
            spec.requested_destination = objects.Destination(host=target, node=target)
            line["target_uuid"] = target_uuid
        # _get_request_spec_for_select_destinations, with neutron's
        # answer for an instance without ports.
        spec.reset_forced_destinations()
        spec.requested_resources = []
        spec.request_level_params = objects.RequestLevelParams()
        spec.generate_request_groups_from_pci_requests()
        scheduler_utils.setup_instance_group(self.ctxt, spec)
        if "requested_destination" in spec and spec.requested_destination:
            spec.requested_destination.cell = self.cell
        else:
            spec.requested_destination = objects.Destination(cell=self.cell)
        # _find_destination: the source first among the attempted hosts.
        spec.ignore_hosts = [source]
        return spec


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
    parser.add_argument("--operation", choices=OPERATIONS, default="boot")
    parser.add_argument("--nova-conf", help="the cloud's nova.conf (moves: its "
                        "[placement] and [api_database])")
    parser.add_argument("--nodes", type=int, default=0,
                        help="moves: the fleet, <sync-prefix><i:05d> for i < N")
    parser.add_argument("--cell-uuid", help="moves: the instances' cell")
    args = parser.parse_args()
    moving = args.operation != "boot"
    if moving and not (args.nova_conf and args.nodes > 1 and args.cell_uuid
                       and not args.flavors):
        parser.error("a move needs --nova-conf, --nodes (2 or more) and "
                     "--cell-uuid, and takes the one flavor")

    import nova.conf
    from nova import context as nova_context
    from nova import objects, rpc
    from nova.scheduler import rpcapi
    from nova.scheduler import utils as scheduler_utils
    from oslo_messaging import transport as om_transport

    conf = nova.conf.CONF
    # As nova's config.parse_args: the exchange default before parsing.
    rpc.set_defaults(control_exchange=args.exchange)
    # Boots read no configuration file, as before issue 40, so that their
    # figures stay comparable; a move needs Placement and the API database.
    conf([], project="nova", default_config_files=[args.nova_conf] if moving else [],
         default_config_dirs=[])
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

    move = Mover(ctxt, args, request_spec) if moving else None
    total = args.warmup + args.calls
    errors = 0
    for i in range(total):
        instance_uuid = str(uuid.uuid4())
        kind, call_flavor = flavors[i % len(flavors)]
        line = {"i": i, "warmup": i < args.warmup, "uuid": instance_uuid}
        if kind:
            line["flavor"] = kind
        try:
            if move:
                spec = move.prepare(i, instance_uuid, call_flavor, line)
            else:
                spec = request_spec(instance_uuid, call_flavor)
        except Exception as err:
            # Untimed, but a failed call: a move that could not be set up
            # measured nothing.
            line["ms"] = None
            line["error"] = f"set-up: {type(err).__name__}: {err}"
            errors += 1
            say(line)
            continue
        started = time.perf_counter()
        try:
            answer = api.select_destinations(
                ctxt, spec, [instance_uuid], return_objects=True,
                return_alternates=not move)
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
