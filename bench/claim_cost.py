"""What one claim's transaction costs, to compare two trees.

    python bench/claim_cost.py [--claims 300] [--rounds 10] [--database-url URL]
    PYTHONPATH=/path/to/other/tree python /path/to/other/tree/bench/claim_cost.py

Times ``db.allocations.claim`` (the guarded UPDATE and the allocation's
INSERT, one transaction) in ``--rounds`` rounds of ``--claims`` claims in
this process, on a fresh SQLite file, or on a database of the server
``--database-url`` names (made for the run, dropped after), and prints the
median thread CPU and wall time per claim. Where the tree's claim takes the
count of operators' changes a decision's table had read
(``db.operator_changes``, issue 38), each claim passes the current count,
as a decision does; run the script of each tree in turn, alternating, to
see what that guard costs.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import pathlib
import statistics
import sys
import tempfile
import time
import uuid

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nova_sched.db import allocations, compute_nodes  # noqa: E402
from nova_sched.scheduler.claims import Claim  # noqa: E402
from nova_sched.scheduler.cloud import compute_report  # noqa: E402
from tests.db_backends import scheduler_database, temporary_database  # noqa: E402
from tests.unit.scheduler.conftest import compute_report as report  # noqa: E402


@contextlib.contextmanager
def _database(url: str | None):
    if url is None:
        with tempfile.TemporaryDirectory() as folder, \
                scheduler_database(f"sqlite:///{folder}/claims.sqlite"):
            yield "sqlite"
        return
    kind = "postgresql" if url.startswith("postgresql") else "mysql"
    with temporary_database(kind) as made, scheduler_database(made):
        yield kind


def _guard() -> dict:
    """The claim's keyword for the operators' count, where the tree has one."""
    if "operator_changes" not in inspect.signature(allocations.claim).parameters:
        return {}
    from nova_sched.db import operator_changes
    return {"operator_changes": operator_changes.current()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--database-url", default=None,
                        help="a PostgreSQL or MySQL server's URL (default: SQLite)")
    args = parser.parse_args()
    with _database(args.database_url) as kind:
        # Room for every claim of the run (PostgreSQL's integers bound it).
        node_id = compute_nodes.upsert_report(compute_report.validate(report(
            "c1", vcpus=10**6, memory_mb=10**8, local_gb=10**6)))
        ratios = Claim("", node_id, 0, 0, 0).ratio_of_each()
        guard = _guard()
        cpu, wall = [], []
        for _ in range(args.rounds):
            started_cpu, started = time.thread_time(), time.perf_counter()
            for _ in range(args.claims):
                allocations.claim(uuid.uuid4().hex, node_id, 1, 1, 1, ratios, **guard)
            cpu.append((time.thread_time() - started_cpu) / args.claims)
            wall.append((time.perf_counter() - started) / args.claims)
        print(f"claim_cost: {ROOT.name}, {kind}, "
              f"{'with' if guard else 'without'} the operators' guard: thread CPU "
              f"{statistics.median(cpu) * 1e6:.1f} us, wall "
              f"{statistics.median(wall) * 1e6:.1f} us per claim "
              f"(median of {args.rounds} rounds of {args.claims})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
