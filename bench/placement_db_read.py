"""What reading Placement's database costs nova-sched (issue 39, item 4): a
whole read (``PlacementDatabase.read_all``, the first read and every
reconciliation) against a read by change when nothing changed
(``read_changed``, every refresh), and a read by change after a few
providers moved.

    python bench/placement_db_read.py                          # SQLite, 10,000 roots
    python bench/placement_db_read.py --backend mysql          # MariaDB at 127.0.0.1:3306
    python bench/placement_db_read.py --roots 1000 --traits 80 --consumers 10

Placement 16's schema by its own migrations (the nova venv's
``placement-manage db sync``; tests/unit/scheduler/sources/placement_tables.py),
then rows written straight by SQL in bulk: ``--roots`` root providers with
VCPU, MEMORY_MB and DISK_GB, ``--traits`` traits each (from a pool of 400),
one of 20 aggregates each, ``--consumers`` consumers on each with three
allocation rows apiece (30 consumers: 900,000 allocation rows at 10,000
roots). Prints rows read and seconds per read, the model's apply, and the
process's peak memory.
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import sys
import tempfile
import time
import uuid as uuidlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sqlalchemy as sa  # noqa: E402

from nova_sched.scheduler.cloud.sources.placement_db import (  # noqa: E402
    PlacementDatabase, PlacementModelReader)
from tests.unit.scheduler.sources.placement_tables import sync_schema  # noqa: E402

_BATCH = 20000


def _insert(conn, table: str, rows: list[dict]) -> None:
    if not rows:
        return
    columns = list(rows[0])
    statement = sa.text(f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
                        f"({', '.join(':' + c for c in columns)})")
    for start in range(0, len(rows), _BATCH):
        conn.execute(statement, rows[start:start + _BATCH])


def write_rows(url: str, roots: int, traits: int, consumers: int) -> dict[str, int]:
    """The rows of ``roots`` compute nodes; their counts per table."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        trait_rows = [{"id": i + 1, "name": f"CUSTOM_TRAIT_{i:03d}"} for i in range(400)]
        _insert(conn, "traits", trait_rows)
        _insert(conn, "placement_aggregates",
                [{"id": i + 1, "uuid": str(uuidlib.uuid4())} for i in range(20)])
        tables = ("resource_providers", "inventories", "allocations",
                  "resource_provider_traits", "resource_provider_aggregates")
        counts = dict.fromkeys(tables, 0)
        rows: dict[str, list[dict]] = {t: [] for t in tables}

        def flush():
            for table in tables:  # in this order: providers first
                _insert(conn, table, rows[table])
                counts[table] += len(rows[table])
                rows[table].clear()

        for i in range(roots):
            rp = i + 1
            rows["resource_providers"].append({
                "id": rp, "uuid": str(uuidlib.uuid4()), "name": f"cn{i}",
                "generation": 1, "root_provider_id": rp, "parent_provider_id": None})
            for rc, total, ratio in ((0, 64, 4.0), (1, 262144, 1.0), (2, 2000, 1.0)):
                rows["inventories"].append({
                    "resource_provider_id": rp, "resource_class_id": rc, "total": total,
                    "reserved": 0, "min_unit": 1, "max_unit": total, "step_size": 1,
                    "allocation_ratio": ratio})
            for c in range(consumers):
                consumer = f"{i:08d}-0000-0000-0000-{c:012d}"
                for rc, used in ((0, 2), (1, 4096), (2, 20)):
                    rows["allocations"].append({
                        "resource_provider_id": rp, "consumer_id": consumer,
                        "resource_class_id": rc, "used": used})
            first = (i * 7) % (400 - traits + 1)
            rows["resource_provider_traits"] += [
                {"resource_provider_id": rp, "trait_id": first + t + 1}
                for t in range(traits)]
            rows["resource_provider_aggregates"].append(
                {"resource_provider_id": rp, "aggregate_id": i % 20 + 1})
            if rp % 1000 == 0:  # the rows of a million providers never in memory
                flush()
        flush()
    engine.dispose()
    return counts


def _timed(fn):
    """fn's result, wall seconds and this thread's CPU seconds (SQLite's
    work included: it runs in the calling thread; a server's is not)."""
    started, cpu = time.perf_counter(), time.thread_time()
    result = fn()
    return result, time.perf_counter() - started, time.thread_time() - cpu


@contextlib.contextmanager
def _database(backend: str, directory: Path):
    if backend == "sqlite":
        yield f"sqlite:///{directory}/placement.sqlite"
        return
    from tests.db_backends import temporary_database

    with temporary_database("mysql") as url:
        yield url


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "mysql"), default="sqlite")
    parser.add_argument("--roots", type=int, default=10000)
    parser.add_argument("--traits", type=int, default=100)
    parser.add_argument("--consumers", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp, _database(args.backend, Path(tmp)) as url:
        sync_schema(url, Path(tmp))
        counts, seconds, _ = _timed(lambda: write_rows(
            url, args.roots, args.traits, args.consumers))
        print(f"{args.backend}: wrote {sum(counts.values()):,} rows in {seconds:.1f} s: "
              + ", ".join(f"{t} {n:,}" for t, n in counts.items()))
        database = PlacementDatabase(url)
        reader = PlacementModelReader(database)
        try:
            for _ in range(args.repeat):
                (providers, _, _), seconds, cpu = _timed(database.read_all)
                print(f"read_all:            {seconds * 1000:8.0f} ms wall "
                      f"{cpu * 1000:8.0f} ms CPU  {database.last_read.total_rows:>10,} rows"
                      f"  ({len(providers):,} providers)")
            _, seconds, cpu = _timed(reader.reconcile)
            print(f"reader's first read: {seconds * 1000:8.0f} ms wall "
                  f"{cpu * 1000:8.0f} ms CPU (read_all + ProviderModel.apply; "
                  f"model lock held {reader.last_hold * 1000:.0f} ms)")
            _, seconds, cpu = _timed(reader.reconcile)
            print(f"reconcile, no change:{seconds * 1000:8.0f} ms wall "
                  f"{cpu * 1000:8.0f} ms CPU (read_all + compare; "
                  f"model lock held {reader.last_hold * 1000:.0f} ms)")
            known = {p.uuid: p.generation for p in providers}
            for _ in range(args.repeat):
                (changed, removed), seconds, cpu = _timed(
                    lambda: database.read_changed(known))
                print(f"read_changed, none:  {seconds * 1000:8.0f} ms wall "
                      f"{cpu * 1000:8.0f} ms CPU  {database.last_read.total_rows:>10,} rows"
                      f"  ({len(changed)} changed, {len(removed)} removed)")
            engine = sa.create_engine(url)
            with engine.begin() as conn:
                conn.execute(sa.text("UPDATE resource_providers SET generation = 2 "
                                     "WHERE id % 100 = 0"))
            engine.dispose()
            (changed, _), seconds, cpu = _timed(
                lambda: database.read_changed(known))
            print(f"read_changed, 1 %:   {seconds * 1000:8.0f} ms wall "
                  f"{cpu * 1000:8.0f} ms CPU  {database.last_read.total_rows:>10,} rows"
                  f"  ({len(changed)} changed)")
            _, seconds, cpu = _timed(reader.refresh)
            print(f"reader refresh, 1 %: {seconds * 1000:8.0f} ms wall "
                  f"{cpu * 1000:8.0f} ms CPU (read_changed + apply; "
                  f"model lock held {reader.last_hold * 1000:.1f} ms)")
        finally:
            database.dispose()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak RSS of this process: {peak:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
