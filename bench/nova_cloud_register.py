"""Compute nodes registered as nova-compute leaves them, in bulk: run with the
python of a venv holding nova and openstack-placement.

    <nova venv>/bin/python bench/nova_cloud_register.py \
        --api-db URL --cell-db URL --placement-db URL --total 10000 \
        [--nova-conf nova.conf] [--prefix bench-node-] [--heartbeat-every 10]
        [--stamped-behind 60] [--shapes plain|varied] [--aggregates 20]

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

``--shapes varied`` (issue 39) registers nodes as a libvirt cloud's
nova-compute leaves them instead: 80-130 traits per root, Placement
aggregates, and one node in ten with GPU or PCI child providers or PCPU
inventory and a NUMA topology (bench/placement_rows.py says which and
how). The shape of node ``i`` depends on ``i`` only, so runs add to each
other.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import sys
import time
import uuid
import warnings
from unittest import mock

warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")

BATCH = 2000
# Nodes written per transaction step: 100,000 nodes of 130 traits are
# 13 million rows, never all in memory at once.
CHUNK = 5000


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
            "service_version": service_obj.SERVICE_VERSION,
            "known_traits": sorted(os_traits.get_traits()),
            "pcpu_numa_topology": _pcpu_numa_topology(node)}


def _pcpu_numa_topology(node) -> str:
    """The ``compute_nodes.numa_topology`` of a dedicated-CPU host: two
    cells, each half of the node's memory and 8 of its PCPUs
    (``cpu_dedicated_set``), the rest of its CPUs shared
    (``cpu_shared_set``), 4 KiB pages only."""
    from nova import objects
    from placement_rows import PCPU_PER_HOST

    half = PCPU_PER_HOST // 2
    shared = (node.vcpus - PCPU_PER_HOST) // 2
    memory = node.memory_mb // 2
    cells = []
    for cell in range(2):
        first = cell * (half + shared)
        cells.append(objects.NUMACell(
            id=cell, socket=cell, memory=memory, cpu_usage=0, memory_usage=0,
            pcpuset=set(range(first, first + half)),
            cpuset=set(range(first + half, first + half + shared)),
            pinned_cpus=set(), siblings=[],
            mempages=[objects.NUMAPagesTopology(size_kb=4, total=memory * 256,
                                                used=0, reserved=0)],
            network_metadata=objects.NetworkMetadata(physnets=set(), tunneled=False)))
    return objects.NUMATopology(cells=cells)._to_json()


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

    import placement_rows as shapes

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
    wanted = [(i, node_name(args.prefix, i)) for i in range(args.total)]
    missing = [(i, h) for i, h in wanted if h not in have]
    result = {"total": args.total, "existing": len(have & {h for _, h in wanted}),
              "added": len(missing), "shapes": args.shapes}
    if not missing:
        result["seconds"] = round(time.monotonic() - started, 2)
        return result
    t = templates(missing[0][1], args.nova_conf)
    result["traits"] = t["traits"]
    result["service_version"] = t["service_version"]
    now = _now() - dt.timedelta(seconds=args.stamped_behind)

    with api.connect() as conn:
        cells_t = api_models.CellMapping.__table__
        cell_id = conn.execute(sa.select(cells_t.c.id).where(
            cells_t.c.uuid != "00000000-0000-0000-0000-000000000000")
            .order_by(cells_t.c.id)).scalars().first()
    if cell_id is None:
        raise SystemExit("no cell other than cell0 in the API database")
    names = _placement_names(placement, t, args.shapes, args.aggregates)
    counts = collections.Counter()
    for k in range(0, len(missing), CHUNK):
        part = missing[k:k + CHUNK]
        _register_cell(cell, api, part, t, now, cell_id, args.shapes, services_t,
                       nodes_t, api_models)
        _register_placement(placement, part, t, now, names, args, counts)
    result["providers"] = dict(counts)
    result["inventory"] = {rc: {k: inv[k] for k in ("total", "reserved", "allocation_ratio")}
                           for rc, inv in t["inventory"].items()}
    result["seconds"] = round(time.monotonic() - started, 2)
    return result


def _register_cell(cell, api, part, t, now, cell_id, shapes_name, services_t, nodes_t,
                   api_models) -> None:
    """Cell database: services, then compute_nodes pointing at them; API
    database: the cell's host mappings (what discover_hosts adds)."""
    import sqlalchemy as sa

    import placement_rows as shapes

    hosts = [h for _, h in part]
    with cell.begin() as conn:
        rows = []
        for host in hosts:
            row = dict(t["service"])
            row.update(host=host, uuid=str(uuid.uuid4()), created_at=now,
                       updated_at=now, last_seen_up=now, report_count=1)
            rows.append(row)
        for i in range(0, len(rows), BATCH):
            conn.execute(services_t.insert(), rows[i:i + BATCH])
        ids = dict(conn.execute(sa.select(services_t.c.host, services_t.c.id).where(
            services_t.c.host.in_(hosts), services_t.c.binary == "nova-compute",
            services_t.c.deleted == 0)).all())
        rows = []
        for index, host in part:
            row = dict(t["compute_node"])
            row.update(host=host, hypervisor_hostname=host, uuid=node_uuid(host),
                       service_id=ids[host], created_at=now, updated_at=now)
            if shapes.shape_of(index, shapes_name) == "pcpu":
                row["numa_topology"] = t["pcpu_numa_topology"]
            rows.append(row)
        for i in range(0, len(rows), BATCH):
            conn.execute(nodes_t.insert(), rows[i:i + BATCH])
    hm_t = api_models.HostMapping.__table__
    with api.begin() as conn:
        rows = [{"cell_id": cell_id, "host": h, "created_at": now} for h in hosts]
        for i in range(0, len(rows), BATCH):
            conn.execute(hm_t.insert(), rows[i:i + BATCH])


def _placement_names(placement, t, shapes_name, aggregate_count) -> dict:
    """Ids of the traits, resource classes and aggregates the rows use;
    the custom resource class and the aggregates are created when
    missing (as Placement's API would)."""
    import sqlalchemy as sa
    from placement.db.sqlalchemy import models as pl_models

    import placement_rows as shapes

    trait_t = pl_models.Trait.__table__
    rc_t = pl_models.ResourceClass.__table__
    agg_t = pl_models.PlacementAggregate.__table__
    now = _now()
    with placement.begin() as conn:
        classes = dict(conn.execute(sa.select(rc_t.c.name, rc_t.c.id)).all())
        if shapes_name == "varied" and shapes.PCI_RC not in classes:
            top = conn.execute(sa.select(sa.func.max(rc_t.c.id))).scalar() or 0
            conn.execute(rc_t.insert().values(id=max(top + 1, 10000), name=shapes.PCI_RC,
                                              created_at=now))
            classes = dict(conn.execute(sa.select(rc_t.c.name, rc_t.c.id)).all())
        trait_ids = dict(conn.execute(sa.select(trait_t.c.name, trait_t.c.id)).all())
        absent = [n for n in t["traits"] if n not in trait_ids]
        unknown = [rc for rc in t["inventory"] if rc not in classes]
        if absent or unknown:
            raise SystemExit(f"placement's tables lack traits {absent} or "
                             f"resource classes {unknown}: start placement once first")
        aggregates = {}
        if shapes_name == "varied":
            wanted = [shapes.aggregate_uuid(k) for k in range(aggregate_count)]
            aggregates = dict(conn.execute(sa.select(agg_t.c.uuid, agg_t.c.id).where(
                agg_t.c.uuid.in_(wanted))).all())
            new = [{"uuid": u, "created_at": now} for u in wanted if u not in aggregates]
            if new:
                conn.execute(agg_t.insert(), new)
                aggregates = dict(conn.execute(sa.select(agg_t.c.uuid, agg_t.c.id).where(
                    agg_t.c.uuid.in_(wanted))).all())
    known = [n for n in t["known_traits"] if n in trait_ids]
    return {"classes": classes, "traits": trait_ids, "aggregates": aggregates,
            "known": known}


def _register_placement(placement, part, t, now, names, args, counts) -> None:
    """Placement: root providers, their children, inventories, traits,
    aggregates."""
    import sqlalchemy as sa
    from placement.db.sqlalchemy import models as pl_models

    import placement_rows as shapes

    rp_t = pl_models.ResourceProvider.__table__
    inv_t = pl_models.Inventory.__table__
    rpt_t = pl_models.ResourceProviderTrait.__table__
    rpa_t = pl_models.ResourceProviderAggregate.__table__
    classes, trait_ids = names["classes"], names["traits"]
    hosts = [h for _, h in part]
    shape = {h: shapes.shape_of(i, args.shapes) for i, h in part}
    kids = {h: shapes.children(h, shape[h]) for h in hosts}

    def insert(conn, table, rows):
        for i in range(0, len(rows), BATCH * 5):
            conn.execute(table.insert(), rows[i:i + BATCH * 5])

    def insert_pairs(conn, table, column, pairs):
        """(provider id, ``column``) rows through the driver's executemany
        (PyMySQL sends them as multi-row INSERTs): the trait rows are most
        of the rows, 13 million at 100,000 nodes."""
        statement = (f"INSERT INTO {table.name} (resource_provider_id, {column}, "
                     "created_at) VALUES (%s, %s, %s)")
        for i in range(0, len(pairs), BATCH * 10):
            conn.exec_driver_sql(statement, [(rp, other, now)
                                             for rp, other in pairs[i:i + BATCH * 10]])

    with placement.begin() as conn:
        insert(conn, rp_t, [{"uuid": node_uuid(h), "name": h, "generation": 2,
                             "created_at": now, "updated_at": now} for h in hosts])
        # A root provider is its own root.
        conn.execute(rp_t.update().where(rp_t.c.name.in_(hosts))
                     .values(root_provider_id=rp_t.c.id))
        rp_ids = dict(conn.execute(sa.select(rp_t.c.name, rp_t.c.id).where(
            rp_t.c.name.in_(hosts))).all())
        child_rows = [{"uuid": c["uuid"], "name": c["name"], "generation": 1,
                       "parent_provider_id": rp_ids[h], "root_provider_id": rp_ids[h],
                       "created_at": now, "updated_at": now}
                      for h in hosts for c in kids[h]]
        if child_rows:
            insert(conn, rp_t, child_rows)
            rp_ids.update(conn.execute(sa.select(rp_t.c.name, rp_t.c.id).where(
                rp_t.c.name.in_([c["name"] for c in child_rows]))).all())
        counts["roots"] += len(hosts)
        counts["children"] += len(child_rows)

        def inv_rows(provider, inventory):
            return [{"resource_provider_id": rp_ids[provider],
                     "resource_class_id": classes[rc],
                     "total": inv["total"], "reserved": inv["reserved"],
                     "min_unit": inv["min_unit"], "max_unit": inv["max_unit"],
                     "step_size": inv["step_size"],
                     "allocation_ratio": inv["allocation_ratio"],
                     "created_at": now, "updated_at": now}
                    for rc, inv in inventory.items()]
        rows = []
        for h in hosts:
            rows += inv_rows(h, {**t["inventory"], **shapes.root_extra_inventory(shape[h])})
            for c in kids[h]:
                rows += inv_rows(c["name"], c["inventory"])
        insert(conn, inv_t, rows)
        counts["inventories"] += len(rows)

        rows = []
        for i, h in part:
            traits = (shapes.root_traits(i, t["traits"], names["known"])
                      if args.shapes == "varied" else t["traits"])
            rows += [(rp_ids[h], trait_ids[n]) for n in traits]
            for c in kids[h]:
                rows += [(rp_ids[c["name"]], trait_ids[n]) for n in c["traits"]]
        insert_pairs(conn, rpt_t, "trait_id", rows)
        counts["traits"] += len(rows)

        if args.shapes == "varied":
            aggs = names["aggregates"]
            rows = [(rp_ids[h], aggs[a])
                    for i, h in part for a in shapes.aggregates_of(i, args.aggregates)]
            insert_pairs(conn, rpa_t, "aggregate_id", rows)
            counts["aggregates"] += len(rows)


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


def churn(args) -> dict:
    """Claims as boots make them, through Placement's REST API (a side
    process of the benchmark's ``--keep-up``): ``--churn-rate`` a second
    for ``--churn-seconds``, each a new consumer on a random node among
    the first ``--total`` (1 VCPU, 512 MB, 1 GB on its root provider,
    microversion 1.28 as nova-scheduler claims). Eight threads keep the
    pace; a claim Placement refuses is counted, not retried."""
    import random
    import threading

    import requests

    headers = {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.28",
               "Accept": "application/json"}
    base = args.churn_url.rstrip("/")
    interval = 1.0 / args.churn_rate
    counts = collections.Counter()
    lock = threading.Lock()
    started = time.monotonic()
    stop_at = started + args.churn_seconds
    state = {"next": started}
    rng = random.Random(39)

    def work():
        session = requests.Session()
        session.headers.update(headers)
        while True:
            with lock:
                at = state["next"]
                state["next"] += interval
                node = node_uuid(node_name(args.prefix, rng.randrange(args.total)))
            if at >= stop_at:
                return
            pause = at - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            body = {"allocations": {node: {"resources": {
                "VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}}},
                "consumer_generation": None, "project_id": "bench-churn",
                "user_id": "bench-churn"}
            try:
                resp = session.put(f"{base}/allocations/{uuid.uuid4()}", json=body,
                                   timeout=30)
                key = "claimed" if resp.status_code == 204 else f"http_{resp.status_code}"
            except requests.RequestException as err:
                key = type(err).__name__
            with lock:
                counts[key] += 1
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    return {**counts, "seconds": round(elapsed, 1),
            "per_second": round(counts["claimed"] / elapsed, 1)}


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
    parser.add_argument("--shapes", choices=("plain", "varied"), default="plain",
                        help="plain: the fake driver's nodes; varied: libvirt-like "
                        "traits, aggregates, GPU/PCI children, PCPU "
                        "(bench/placement_rows.py)")
    parser.add_argument("--aggregates", type=int, default=20,
                        help="Placement aggregates of --shapes varied (default 20)")
    parser.add_argument("--churn-url", help="Placement's endpoint: write claims "
                        "(--churn-rate a second for --churn-seconds) instead")
    parser.add_argument("--churn-rate", type=float, default=20)
    parser.add_argument("--churn-seconds", type=float, default=60)
    parser.add_argument("--heartbeat", action="store_true")
    parser.add_argument("--heartbeat-every", type=float, default=0)
    args = parser.parse_args()
    if args.churn_url:
        print(json.dumps(churn(args)), flush=True)
        return 0
    if args.heartbeat or args.heartbeat_every:
        print(json.dumps(heartbeat(args)), flush=True)
        return 0
    if not args.placement_db:
        parser.error("--placement-db is needed to register nodes")
    print(json.dumps(register(args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
