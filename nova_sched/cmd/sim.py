"""nova-sched-sim: the embedded demo (CONTRACT section 1).

    nova-sched-sim [--hosts N] [--instances M] [--seed S] [--plot FILE.png] [--json]

Runs the scheduler daemon, N simulated compute nodes and a compute-api
client in one process on the in-memory transport ``kombu+memory:////`` and
an in-memory SQLite database (no broker, no database server), boots M
instances of mixed flavors through ``run_instance`` casts and prints a
summary: placed, failed with the reasons, decisions per second, latency
percentiles and the utilisation spread. ``--json`` prints the same figures
as one JSON object. A progress bar is drawn on stderr when it is a
terminal.

Exit codes: 0 when every instance was placed or failed visibly; 1 when the
run gave up with instances still unaccounted for, or could not start;
2 on a bad command line, or ``--plot`` without matplotlib installed.
"""

from __future__ import annotations

import argparse
import json
import sys

import nova_sched  # noqa: F401  (selects oslo.service's threading backend)

PROG = "nova-sched-sim"


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Embedded demo: the scheduler, N fake compute nodes and a "
        "compute-api client in one process (in-memory transport and database).")
    parser.add_argument("--hosts", type=_positive, default=100,
                        help="simulated compute nodes (default: 100)")
    parser.add_argument("--instances", type=_positive, default=1000,
                        help="instances to boot (default: 1000)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the fleet and of the request stream "
                        "(default: 0)")
    parser.add_argument("--plot", metavar="FILE.png",
                        help="draw placements per second and per-host "
                        "utilisation to this file "
                        "(needs matplotlib: pip install 'nova-sched[plot]')")
    parser.add_argument("--json", action="store_true",
                        help="print the summary as one JSON object")
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    except SystemExit as exit_:  # argparse printed the reason
        return int(exit_.code or 0)

    from nova_sched import sim
    from nova_sched.sim import report

    if args.plot and not report.plot_available():
        print(f"{PROG}: --plot needs matplotlib, which is not installed; "
              "install it with: pip install 'nova-sched[plot]'", file=sys.stderr)
        return 2

    try:
        result = sim.run(args.hosts, args.instances, args.seed)
    except Exception as err:
        print(f"{PROG}: {err}".splitlines()[0], file=sys.stderr)
        return 1
    summary = result.summary

    if args.plot:
        report.plot(args.plot, result.usage, result.shapes,
                    f"nova-sched-sim: {summary['placed']} of {summary['instances']} "
                    f"instances on {summary['hosts']} hosts (seed {summary['seed']})",
                    timeline=summary["placements_per_second"])
        summary["plot"] = args.plot

    if args.json:
        print(json.dumps(summary, sort_keys=False))
    else:
        print(report.format_text(summary))
        if args.plot:
            print(f"  plot                {args.plot}")
    return 1 if summary["lost"] else 0


if __name__ == "__main__":
    sys.exit(main())
