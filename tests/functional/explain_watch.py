"""Ask a running nova-sched daemon ``explain`` back to back, printing each answer.

    python tests/functional/explain_watch.py CONFIG_FILE --flavor 256,1,1 \
        [--az ZONE] [--project ID] [--every 0.05]

One transport for the whole run (``nova-sched-manage explain`` makes one per
call and starts a Python each time: too slow to time a change by). Prints
``ready`` once the first answer came, then one JSON line per answer:
``{"sent": <time.monotonic() when asked>, "hosts": [...], "removed":
{filter: [host, ...]}}``; CLOCK_MONOTONIC is the machine's, so the caller
compares ``sent`` with its own ``time.monotonic()``. Runs until stdin closes.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config_file")
    parser.add_argument("--flavor", default="256,1,1")
    parser.add_argument("--az")
    parser.add_argument("--project")
    parser.add_argument("--every", type=float, default=0.05)
    args = parser.parse_args()

    from nova_sched import rpc
    from nova_sched.cmd.explain import build_request
    from nova_sched.conf import CONF
    from nova_sched.scheduler import rpcapi

    CONF(["--config-file", args.config_file], project="nova-sched")
    transport = rpc.get_transport()
    api = rpcapi.SchedulerAPI(transport)
    closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), closed.set()), daemon=True).start()
    first = True
    try:
        while not closed.is_set():
            spec, props = build_request(args.flavor, zone=args.az, project_id=args.project)
            sent = time.monotonic()
            reply = api.explain(rpc.admin_context(), spec, props, timeout=30)
            if first:
                print("ready", flush=True)
                first = False
            removed = {name: sorted({h for h, _node in hosts})
                       for name, hosts in (reply.get("removed") or {}).items() if hosts}
            print(json.dumps({"sent": sent,
                              "hosts": sorted(h["host"] for h in reply.get("hosts", [])),
                              "removed": removed}), flush=True)
            closed.wait(args.every)
    finally:
        transport.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
