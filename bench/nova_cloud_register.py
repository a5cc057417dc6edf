"""Compute nodes registered as nova-compute leaves them, in bulk: run with the
python of a venv holding nova and openstack-placement.

    <nova venv>/bin/python bench/nova_cloud_register.py \
        --api-db URL --cell-db URL --placement-db URL --total 10000 \
        [--nova-conf nova.conf] [--prefix bench-node-] [--heartbeat-every 10]
        [--stamped-behind 60]

nova-compute with the fake driver (``compute_driver = fake.FakeDriver``)
leaves, per node: a ``services`` row (binary ``nova-compute``, the current
service version), a ``compute_nodes`` row (what the resource tracker
writes from the driver's ``get_available_resource``: cpu_info,
supported_instances, stats, usage, ratios; ``mapped`` once
``discover_hosts`` ran), a ``host_mappings`` row in the API database, and
a resource provider named after the node, with the node's uuid, the
driver's VCPU / MEMORY_MB / DISK_GB inventory and the traits the resource
tracker reports (the driver's capabilities, ``COMPUTE_NODE`` and
``OWNER_NOVA``). Placement's REST API registers about 57 nodes a second
here; this writes the same rows straight into the databases, through
nova's and placement's own table definitions, a few thousand a second.

One node's rows are made by nova's own code (the fake driver, the
``Service`` and ``ComputeNode`` objects up to the point where they call
the database API, which is captured instead); the others are copies with
the node's name and uuid. Node ``i`` is ``<prefix><i:05d>``, its uuid
``uuid5(NAMESPACE_DNS, name)`` (as nova's PredictableNodeUUIDDriver): a
second run adds only the nodes missing up to ``--total``.

Placement must have started once on its database before (it fills the
``traits`` and ``resource_classes`` tables at start-up).

``--heartbeat`` only refreshes the services' ``updated_at`` and
``last_seen_up`` (what nova's servicegroup driver does every
``report_interval``), once; ``--heartbeat-every S`` keeps doing it until
killed. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
import uuid
import warnings
from unittest import mock

warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")

BATCH = 2000


def node_name(prefix: str, index: int) -> str:
    return f"{prefix}{index:05d}"


def node_uuid(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, name))


def templates(host: str, nova_conf: str | None = None) -> dict:
    """One node's rows as nova-compute (fake driver) would write them, with
    the options of ``nova_conf`` (ratios, reserved memory, my_ip)."""
    import nova.conf
    from nova import context as nova_context
    from nova import objects
    from nova.compute import provider_tree, stats as compute_stats
    from nova.db.main import api as main_db
    from nova.virt import fake
    import os_traits

    conf = nova.conf.CONF
    conf([], project="nova", default_config_files=[nova_conf] if nova_conf else [],
         default_config_dirs=[])
    conf.set_override("host", host)
    objects.register_all()
    ctxt = nova_context.get_admin_context()

    # nova/service.py's _create_service_ref, up to db.service_create.
    captured: dict = {}

    def capture(name):
        def fake_db(context, values):
            captured[name] = dict(values)
            raise _Captured()
        return fake_db

    service = objects.Service(ctxt)
    service.host, service.binary, service.topic = host, "nova-compute", "compute"
    service.report_count = 0
    # _check_minimum_version reads the other services' versions: none here.
    with mock.patch.object(main_db, "service_create", capture("service")), \
            mock.patch.object(objects.Service, "_check_minimum_version"):
        try:
            service.create()
        except _Captured:
            pass

    # The resource tracker's _init_compute_node and
    # _update_usage_from_instances with no instance.
    driver = fake.FakeDriver(virtapi=None)
    driver.init_host(host)
    resources = driver.get_available_resource(host)
    resources["uuid"] = node_uuid(host)  # as PredictableNodeUUIDDriver
    node = objects.ComputeNode(ctxt)
    node.host = host
    node.service_id = 1  # replaced per row
    node.update_from_virt_driver(resources)
    stats = compute_stats.Stats()
    stats["failed_builds"] = 0
    stats.digest_stats(resources.get("stats"))
    node.stats = stats
    node.cpu_allocation_ratio = conf.initial_cpu_allocation_ratio
    node.ram_allocation_ratio = conf.initial_ram_allocation_ratio
    node.disk_allocation_ratio = conf.initial_disk_allocation_ratio
    node.pci_device_pools = objects.PciDevicePoolList()
    node.local_gb_used = conf.reserved_host_disk_mb / 1024
    node.memory_mb_used = conf.reserved_host_memory_mb
    node.vcpus_used = conf.reserved_host_cpus
    node.free_ram_mb = node.memory_mb - node.memory_mb_used
    node.free_disk_gb = node.local_gb - node.local_gb_used
    node.current_workload = 0
    node.running_vms = 0
    node.host_ip = conf.my_ip
    with mock.patch.object(main_db, "compute_node_create", capture("compute_node")):
        try:
            node.create()
        except _Captured:
            pass
    compute_node = captured["compute_node"]
    compute_node["mapped"] = 1  # nova-manage cell_v2 discover_hosts

    # update_provider_tree and the resource tracker's _get_traits.
    tree = provider_tree.ProviderTree()
    tree.new_root(host, node.uuid)
    driver.update_provider_tree(tree, host)
    inventory = tree.data(host).inventory
    traits = {t for t, ok in driver.capabilities_as_traits().items()
              if ok and t != os_traits.COMPUTE_REMOTE_MANAGED_PORTS}
    traits |= set(tree.data(host).traits)
    traits |= {os_traits.COMPUTE_NODE, os_traits.OWNER_NOVA}
    from nova.objects import service as service_obj
    return {"service": captured["service"], "compute_node": compute_node,
            "inventory": inventory, "traits": sorted(traits),
            "service_version": service_obj.SERVICE_VERSION}


class _Captured(Exception):
    pass


def _engine(url: str):
    import sqlalchemy as sa

    return sa.create_engine(url, future=True)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None, microsecond=0)


def register(args) -> dict:
    import sqlalchemy as sa
    from nova.db.api import models as api_models
    from nova.db.main import models as main_models
    from placement.db.sqlalchemy import models as pl_models

    api, cell, placement = (_engine(args.api_db), _engine(args.cell_db),
                            _engine(args.placement_db))
    started = time.monotonic()
    services_t = main_models.Service.__table__
    nodes_t = main_models.ComputeNode.__table__
    with cell.connect() as conn:
        have = set(conn.execute(sa.select(services_t.c.host).where(
            services_t.c.binary == "nova-compute",
            services_t.c.host.like(args.prefix + "%"),
            services_t.c.deleted == 0)).scalars())
    wanted = [node_name(args.prefix, i) for i in range(args.total)]
    missing = [h for h in wanted if h not in have]
    result = {"total": args.total, "existing": len(have & set(wanted)),
              "added": len(missing)}
    if not missing:
        result["seconds"] = round(time.monotonic() - started, 2)
        return result
    t = templates(missing[0], args.nova_conf)
    result["traits"] = t["traits"]
    result["service_version"] = t["service_version"]
    now = _now() - dt.timedelta(seconds=args.stamped_behind)

    # Cell database: services, then compute_nodes pointing at them.
    with cell.begin() as conn:
        rows = []
        for host in missing:
            row = dict(t["service"])
            row.update(host=host, uuid=str(uuid.uuid4()), created_at=now,
                       updated_at=now, last_seen_up=now, report_count=1)
            rows.append(row)
        for i in range(0, len(rows), BATCH):
            conn.execute(services_t.insert(), rows[i:i + BATCH])
        ids = dict(conn.execute(sa.select(services_t.c.host, services_t.c.id).where(
            services_t.c.host.in_(missing), services_t.c.binary == "nova-compute",
            services_t.c.deleted == 0)).all())
        rows = []
        for host in missing:
            row = dict(t["compute_node"])
            row.update(host=host, hypervisor_hostname=host, uuid=node_uuid(host),
                       service_id=ids[host], created_at=now, updated_at=now)
            rows.append(row)
        for i in range(0, len(rows), BATCH):
            conn.execute(nodes_t.insert(), rows[i:i + BATCH])

    # API database: the cell's host mappings (what discover_hosts adds).
    cells_t = api_models.CellMapping.__table__
    hm_t = api_models.HostMapping.__table__
    with api.begin() as conn:
        cell_id = conn.execute(sa.select(cells_t.c.id).where(
            cells_t.c.uuid != "00000000-0000-0000-0000-000000000000")
            .order_by(cells_t.c.id)).scalars().first()
        if cell_id is None:
            raise SystemExit("no cell other than cell0 in the API database")
        rows = [{"cell_id": cell_id, "host": h, "created_at": now} for h in missing]
        for i in range(0, len(rows), BATCH):
            conn.execute(hm_t.insert(), rows[i:i + BATCH])

    # Placement: providers, inventories, traits.
    rp_t = pl_models.ResourceProvider.__table__
    inv_t = pl_models.Inventory.__table__
    trait_t = pl_models.Trait.__table__
    rpt_t = pl_models.ResourceProviderTrait.__table__
    rc_t = pl_models.ResourceClass.__table__
    with placement.begin() as conn:
        classes = dict(conn.execute(sa.select(rc_t.c.name, rc_t.c.id)).all())
        trait_ids = dict(conn.execute(sa.select(trait_t.c.name, trait_t.c.id).where(
            trait_t.c.name.in_(t["traits"]))).all())
        absent = [n for n in t["traits"] if n not in trait_ids]
        unknown = [rc for rc in t["inventory"] if rc not in classes]
        if absent or unknown:
            raise SystemExit(f"placement's tables lack traits {absent} or "
                             f"resource classes {unknown}: start placement once first")
        rows = [{"uuid": node_uuid(h), "name": h, "generation": 2,
                 "created_at": now, "updated_at": now} for h in missing]
        for i in range(0, len(rows), BATCH):
            conn.execute(rp_t.insert(), rows[i:i + BATCH])
        # A root provider is its own root.
        conn.execute(rp_t.update().where(rp_t.c.name.in_(missing))
                     .values(root_provider_id=rp_t.c.id))
        rp_ids = dict(conn.execute(sa.select(rp_t.c.name, rp_t.c.id).where(
            rp_t.c.name.in_(missing))).all())
        rows = []
        for h in missing:
            for rc, inv in t["inventory"].items():
                rows.append({"resource_provider_id": rp_ids[h],
                             "resource_class_id": classes[rc],
                             "total": inv["total"], "reserved": inv["reserved"],
                             "min_unit": inv["min_unit"], "max_unit": inv["max_unit"],
                             "step_size": inv["step_size"],
                             "allocation_ratio": inv["allocation_ratio"],
                             "created_at": now, "updated_at": now})
        for i in range(0, len(rows), BATCH):
            conn.execute(inv_t.insert(), rows[i:i + BATCH])
        rows = [{"resource_provider_id": rp_ids[h], "trait_id": trait_ids[n],
                 "created_at": now, "updated_at": now}
                for h in missing for n in t["traits"]]
        for i in range(0, len(rows), BATCH * 5):
            conn.execute(rpt_t.insert(), rows[i:i + BATCH * 5])
    result["inventory"] = {rc: {k: inv[k] for k in ("total", "reserved", "allocation_ratio")}
                           for rc, inv in t["inventory"].items()}
    result["seconds"] = round(time.monotonic() - started, 2)
    return result


def heartbeat(args) -> dict:
    """What nova's DB servicegroup driver does for each service."""
    from nova.db.main import models as main_models

    services_t = main_models.Service.__table__
    cell = _engine(args.cell_db)
    beats = 0
    while True:
        now = _now()
        with cell.begin() as conn:
            n = conn.execute(services_t.update().where(
                services_t.c.binary == "nova-compute",
                services_t.c.host.like(args.prefix + "%"),
                services_t.c.deleted == 0).values(
                report_count=services_t.c.report_count + 1,
                updated_at=now, last_seen_up=now)).rowcount
        beats += 1
        if not args.heartbeat_every:
            return {"services": n, "beats": beats}
        time.sleep(args.heartbeat_every)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--api-db", required=True)
    parser.add_argument("--cell-db", required=True)
    parser.add_argument("--placement-db")
    parser.add_argument("--nova-conf", help="the cloud's nova.conf (what its "
                        "nova-compute would read: ratios, reserved_host_memory_mb)")
    parser.add_argument("--total", type=int, default=0)
    parser.add_argument("--prefix", default="bench-node-")
    parser.add_argument("--stamped-behind", type=float, default=0,
                        help="seconds before now the new rows are stamped: a "
                        "writer whose clock is behind, or rows that become "
                        "visible long after their stamps (default 0)")
    parser.add_argument("--heartbeat", action="store_true")
    parser.add_argument("--heartbeat-every", type=float, default=0)
    args = parser.parse_args()
    if args.heartbeat or args.heartbeat_every:
        print(json.dumps(heartbeat(args)), flush=True)
        return 0
    if not args.placement_db:
        parser.error("--placement-db is needed to register nodes")
    print(json.dumps(register(args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
