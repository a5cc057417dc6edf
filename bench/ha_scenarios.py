"""The HA scenarios, run N times: what each lost, claimed or cast twice.

Runs the cluster scenario tests (a RabbitMQ cluster node killed mid-burst,
the whole cluster restarted, a poison request among good ones, a Galera
node killed mid-burst, writers on two Galera nodes) ``--runs`` times, and
prints, per scenario over all runs: requests sent, placed, in ERROR, lost,
claimed twice, cast twice (to the same node: the documented window), and
the longest pause between two casts during a burst. A run whose tests
failed is counted and its pytest summary shown.

    python bench/ha_scenarios.py --runs 5
    python bench/ha_scenarios.py --runs 2 --only rabbit
    python bench/ha_scenarios.py --runs 30 --busy 2 --keep-failed /tmp/ha-failed

Each run starts its own clusters (about 15 s each) and takes about four
minutes on two cores; the machine's own RabbitMQ, MariaDB and PostgreSQL
must run (the tests use them beside their private clusters).

``--keep-failed DIR``: a scenario that fails keeps its evidence (every
daemon's log, the broker nodes' logs and queue state, the database's state
of each request: ``clusters.FailureEvidence``) under DIR, and the whole
pytest output of a failed run (with ``--keep-output``, of every run) is
written there too. "sender again": casts the test's client (oslo.messaging)
could not get confirmed and made again. ``--busy N``
keeps N processes spinning on the CPU beside the runs (at normal priority),
as a loaded CI machine would. Each run's line names the commit of the tree
it ran (``+`` when the tree had changes not committed).
"""

from __future__ import annotations

import argparse
import collections
import os
import pathlib
import re
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODULES = {
    "rabbit": "tests/functional/test_rabbit_cluster.py",
    "poison": "tests/functional/test_poison_requests.py",
    "galera": "tests/functional/test_galera_cluster.py",
}
LINE = re.compile(
    r"^(?P<name>[a-z][\w-]*): sent=(?P<sent>\d+) placed=(?P<placed>\d+) "
    r"error=(?P<error>\d+) lost=(?P<lost>\d+) claimed_twice=(?P<claimed_twice>\d+) "
    r"cast_twice=(?P<cast_twice>\d+) longest_pause=(?P<pause>[\d.]+)s"
    r"(?:.*? casts_not_confirmed=(?P<unconfirmed>\d+))?")
COUNTS = ("sent", "placed", "error", "lost", "claimed_twice", "cast_twice", "unconfirmed")


KEPT = re.compile(r"evidence of this failure kept in (\S+)")


def _run_once(modules: list[str], keep: pathlib.Path | None
              ) -> tuple[list[dict], str, int, float, str]:
    started = time.monotonic()
    env = dict(os.environ)
    if keep is not None:
        env["NOVA_SCHED_KEEP_FAILED"] = str(keep)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *modules],
        cwd=ROOT, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env)
    took = time.monotonic() - started
    figures = []
    for line in done.stdout.splitlines():
        match = LINE.match(line.strip())
        if match:
            figures.append({**match.groupdict(),
                            "unconfirmed": match["unconfirmed"] or "0"})
    summary = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    return figures, summary, done.returncode, took, done.stdout + done.stderr


def _tree() -> str:
    """The commit the runs use, ``+`` if the tree has uncommitted changes."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "--short", "HEAD") + ("+" if dirty else "")




def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", choices=sorted(MODULES), action="append",
                        help="run only these modules (repeatable)")
    parser.add_argument("--keep-failed", type=pathlib.Path, metavar="DIR",
                        help="keep the evidence and pytest output of failed runs here")
    parser.add_argument("--keep-output", action="store_true",
                        help="with --keep-failed: the pytest output of every run too")
    parser.add_argument("--busy", type=int, default=0, metavar="N",
                        help="keep N processes spinning on the CPU meanwhile")
    args = parser.parse_args()
    modules = [MODULES[name] for name in (args.only or MODULES)]
    if args.keep_failed is not None:
        args.keep_failed.mkdir(parents=True, exist_ok=True)
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                 stdin=subprocess.DEVNULL) for _ in range(args.busy)]
    try:
        return _runs(args, modules)
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()


def _runs(args: argparse.Namespace, modules: list[str]) -> int:
    totals: dict[str, dict] = collections.defaultdict(
        lambda: {"runs": 0, **{key: 0 for key in COUNTS}, "pauses": []})
    failed = []
    for number in range(1, args.runs + 1):
        tree = _tree()
        figures, summary, code, took, output = _run_once(modules, args.keep_failed)
        print(f"run {number}: {summary} ({took:.0f} s, tree {tree}, "
              f"{time.strftime('%H:%M:%S')})", flush=True)
        if code != 0:
            failed.append((number, summary))
            for kept in KEPT.findall(output):
                print(f"  evidence kept in {kept}", flush=True)
        if args.keep_failed is not None and (code != 0 or args.keep_output):
            path = args.keep_failed / f"run-{number}-{os.getpid()}.txt"
            path.write_text(output)
            print(f"  pytest output in {path}", flush=True)
        for fig in figures:
            total = totals[fig["name"]]
            total["runs"] += 1
            for key in COUNTS:
                total[key] += int(fig[key])
            total["pauses"].append(float(fig["pause"]))
            print(f"  {fig['name']}: sent {fig['sent']}, placed {fig['placed']}, "
                  f"error {fig['error']}, lost {fig['lost']}, claimed twice "
                  f"{fig['claimed_twice']}, cast twice {fig['cast_twice']}, "
                  f"longest pause {fig['pause']} s, casts the sender made again "
                  f"{fig['unconfirmed']}", flush=True)
    print(f"\nover {args.runs} runs ({len(failed)} with a failed test):")
    print(f"{'scenario':32} {'runs':>4} {'sent':>6} {'placed':>6} {'error':>5} "
          f"{'lost':>4} {'claimed 2x':>10} {'cast 2x':>7} {'longest pause: median (max)':>28} "
          f"{'sender again':>12}")
    for name, total in totals.items():
        pauses = sorted(total["pauses"])
        print(f"{name:32} {total['runs']:>4} {total['sent']:>6} {total['placed']:>6} "
              f"{total['error']:>5} {total['lost']:>4} {total['claimed_twice']:>10} "
              f"{total['cast_twice']:>7} "
              f"{pauses[len(pauses) // 2]:>17.2f} s ({pauses[-1]:.2f} s) "
              f"{total['unconfirmed']:>12}")
    for number, summary in failed:
        print(f"run {number} failed: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
