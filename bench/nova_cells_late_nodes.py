"""Nodes registered in bulk while nova-sched runs in a cloud of today's nova:
are they ever chosen?

    python bench/nova_cells_late_nodes.py                  # 10 nodes, nova-sched, then 10,000 more
    python bench/nova_cells_late_nodes.py --late 1000 --calls 50

The cloud of bench/nova_cloud_bench.py (nova 34 and Placement 16 from the
nova venv, the local MariaDB and RabbitMQ; no nova-compute process).
``--before`` nodes are registered (bench/nova_cloud_register.py, bulk SQL
as nova-compute with the fake driver leaves them: 1,000 vCPU each), then
nova-sched starts (``[nova_cells] refresh_interval = 5``) and reads them;
then ``--late`` more nodes are registered the same way while it runs. The
late rows are stamped ``--stamped-behind`` seconds (60) before they are
written, as rows written by tooling that stamps them before a long
transaction commits, or by a writer whose clock is behind, are (the
services' heartbeats, rewritten every 10 s, are current). After
``--wait`` seconds, ``--calls`` sequential ``select_destinations`` calls
(bench/nova_select_driver.py, nova's own SchedulerAPI, 1 vCPU / 512 MB /
1 GB, claimed in Placement). All nodes are alike, so the weighers spread:
the ``--before`` nodes take one instance each, then every call goes to an
empty late node, if nova-sched knows them. Prints how many calls chose a
late node, the calls' errors, and the claims' check (lost, doubled, wrong
node, stray) as nova_cloud_bench.py does.

Exit status: 0; 1 when a claim was wrong or a call failed; 2 when the cloud
could not run. The work directory is kept with ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import nova_cloud_bench  # noqa: E402
from nova_cloud_bench import PREFIX, Bench, BenchError, say  # noqa: E402


def run(args) -> dict:
    args.schedulers, args.sizes = ["nova-sched"], [args.before + args.late]
    args.no_instance_sync, args.py_spy = True, False
    bench = Bench(args)
    result: dict = {"before": args.before, "late": args.late, "calls": args.calls,
                    "wait_s": args.wait, "stamped_behind_s": args.stamped_behind}
    try:
        bench.open()
        bench.register(args.before)
        bench.start("nova-sched", args.before)
        try:
            bench._settled("nova-sched")
            registered = time.monotonic()
            # The late rows stamped before they are visible.
            bench.register_args = ("--stamped-behind", str(args.stamped_behind))
            done = bench.register(args.before + args.late)
            result["register_s"] = round(time.monotonic() - registered, 1)
            result["added"] = done["added"]
            time.sleep(max(0.0, args.wait - (time.monotonic() - registered)))
            lines = bench.driver([f"--calls={args.calls}", "--warmup=0"], "late-calls")
        finally:
            bench.stop("nova-sched")
        calls = [line for line in lines if "i" in line]
        early = {f"{PREFIX}{i:05d}" for i in range(args.before)}
        chosen = [c.get("host") for c in calls if "error" not in c]
        result.update(
            answered=len(chosen),
            errors=sorted({c["error"][:120] for c in calls if "error" in c}),
            on_late_nodes=sum(1 for host in chosen if host not in early),
            distinct_late_nodes=len({host for host in chosen if host not in early}),
            check=bench.check(calls))
        bench.clean()
    finally:
        result["workdir"] = str(bench.workdir)
        if not args.keep:
            bench.close()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=int, default=10)
    parser.add_argument("--late", type=int, default=10000)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--wait", type=float, default=20.0,
                        help="seconds from the start of the late registration to "
                        "the first call (default 20: the registration, then a few "
                        "refresh_interval)")
    parser.add_argument("--stamped-behind", type=float, default=60.0,
                        help="seconds before now the late rows are stamped")
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("--nova-sched-set", action="append", default=[])
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--workdir")
    args = parser.parse_args()
    try:
        result = run(args)
    except (BenchError, nova_cloud_bench.novacloud.CloudError) as err:
        say(f"cannot run: {err}")
        return 2
    print(json.dumps(result, indent=1))
    check = result["check"]
    bad = result["errors"] or any(check[k] for k in ("lost", "doubled", "wrong_node",
                                                     "stray"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
