"""What one run_instance costs the daemon's request thread, in this process.

    python bench/request_cost.py [--hosts 10000] [--requests 400] [--rounds 3]
        [--warmup 300] [--database-url URL] [--callgrind] [--cprofile FILE]
        [--reports-per-request N]
    python bench/request_cost.py --smoke     # 500 hosts, one round of 50 (CI)

The end-to-end benchmark's CPU per request moves by a third between runs on
these machines, more than most single changes to the request path save.
This measures that path alone, repeatably: a ``SchedulerManager`` built in
this process as the daemon builds it, on the real RabbitMQ (a private vhost
made for the run and deleted after it) and a fresh SQLite file database (or,
with ``--database-url`` naming a PostgreSQL or MySQL server, a database made
on it for the run and dropped after, as ``e2e_bench.py`` makes its own),
logging at INFO to a file as the daemon does; the
hosts are registered through its ``compute_node_update`` and written by its
report writer. Then the requests of the end-to-end benchmark's clients
(Havana's shape, one instance, as JSON made them) are handed to
``run_instance`` one after another, as the consumer's worker thread hands
them (``topic_consumer.handling``, the next request always waiting): parse,
record, decide, claim with the record of the previous request's cast,
cast with its notifications (each publish confirmed by the broker); the
last request's cast is recorded as a worker finding no request waiting
records it. Not included: reading
the message off the socket and oslo.messaging's dispatcher (the consumer
thread and ``RPCDispatcher``), compute reports, and the reads of changed
rows (the host refresher's thread, as in the daemon).

After the warm-up the process's long-lived objects are frozen out of the
garbage collector's full passes, as the daemon's periodic tasks do once
hosts have joined (``nova_sched.long_lived``; ``--no-freeze`` leaves them
in). It prints the thread's CPU milliseconds and wall milliseconds per
request (p50 of ``--rounds`` rounds), then how long one full collection
takes at the end (the pause, every thread of the process held, that the
collector takes every few seconds in a daemon ingesting reports), and
exits 1 if any request was not placed, its cast not recorded or its
message not let go. With ``--callgrind``, run under
``valgrind --tool=callgrind --instr-atstart=no``: instrumentation is switched
on (``callgrind_control -i on``) for the measured requests only, so
``callgrind_annotate``'s total divided by ``--requests`` is the
instructions one request costs, a figure that does not move with the
machine's speed (background threads' idle polls during the loop are
counted too: a few per cent).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import e2e_peers  # puts tests/functional on sys.path; threading backend first
import cloudlib  # noqa: E402  (tests/functional/cloudlib.py)
from e2e_bench import BenchError, Database  # noqa: E402

DEFAULTS = {"hosts": 10000, "requests": 400, "rounds": 3, "warmup": 300}
SMOKE = {"hosts": 500, "requests": 50, "rounds": 1, "warmup": 20}


def _configure(workdir: Path, broker_url: str, database_url: str) -> None:
    from oslo_log import log as oslo_logging

    from nova_sched import rpc  # noqa: F401  (nova-sched's messaging defaults)
    from nova_sched.conf import CONF

    oslo_logging.register_options(CONF)
    CONF([], project="nova-sched", default_config_files=[])
    for name, value, group in (
            ("transport_url", broker_url, None),
            ("connection", database_url, "database"),
            ("host", "request-cost-scheduler", None),
            ("log_file", str(workdir / "nova-sched.log"), None),
            ("debug", False, None)):
        CONF.set_override(name, value, group=group)
    oslo_logging.setup(CONF, "nova-sched")


def _register(manager, hosts: int) -> None:
    from nova_sched import rpc

    ctxt = rpc.admin_context()
    for host in e2e_peers.host_names(hosts):
        manager.compute_node_update(ctxt, e2e_peers.compute_report(host))
    if not manager.reports.flush(timeout=300):
        raise SystemExit("the report writer did not store the hosts")


def _requests(count: int) -> list[tuple[dict, dict, dict]]:
    """(context, request_spec, filter_properties) as they come off the wire."""
    itype = cloudlib.named_flavor(e2e_peers.FLAVOR)
    out = []
    for _ in range(count):
        spec, fprops, _uuids = cloudlib.havana_request(itype)
        out.append(json.loads(json.dumps((cloudlib.request_context(), spec, fprops))))
    return out


def _run(manager, serializer, requests, acks: list,
         reporting: "_Reporting") -> tuple[float, float]:
    """(thread CPU s, wall s) for handing ``requests`` to run_instance; each
    message let go is appended to ``acks``."""
    from nova_sched.scheduler.wire import topic_consumer

    cpu, wall = time.thread_time(), time.perf_counter()
    for number, (ctxt, spec, fprops) in enumerate(requests):
        reporting.owe()
        with topic_consumer.handling(lambda number=number: acks.append(number)):
            manager.run_instance(serializer.deserialize_context(ctxt), spec,
                                 "secret-request-cost", None, None, True, fprops)
    manager.write_held_casts(idle=True)
    return time.thread_time() - cpu, time.perf_counter() - wall


class _Reporting:
    """Compute reports handed to ``compute_node_update`` from a thread of its
    own, as a daemon's consumer thread hands a reporting fleet's: ``per_request``
    for each request handed to run_instance (``owe``), the hosts in turn.
    Tied to the requests rather than to the clock, so that a run under
    callgrind, fifty times slower, sees the same mix."""

    def __init__(self, manager, hosts: int, per_request: float):
        self._per_request = per_request
        self._owed = 0.0
        self._due = threading.Condition()
        self._stopping = False
        self.sent = 0
        self._thread = None
        if per_request > 0:
            self._thread = threading.Thread(target=self._loop, args=(manager, hosts),
                                            name="request-cost-reports", daemon=True)
            self._thread.start()

    def owe(self) -> None:
        """One more request handed over: its share of reports is due."""
        if self._thread is not None:
            with self._due:
                self._owed += self._per_request
                self._due.notify()

    def _loop(self, manager, hosts: int) -> None:
        from nova_sched import rpc

        ctxt = rpc.admin_context().to_dict()
        names = e2e_peers.host_names(hosts)
        while True:
            with self._due:
                while self._owed < 1 and not self._stopping:
                    self._due.wait()
                if self._stopping:
                    return
                self._owed -= 1
            manager.compute_node_update(ctxt, e2e_peers.compute_report(
                names[self.sent % hosts]))
            self.sent += 1

    def stop(self) -> None:
        with self._due:
            self._stopping = True
            self._due.notify()
        if self._thread is not None:
            self._thread.join()


def _callgrind(switch: str) -> None:
    subprocess.run(["callgrind_control", "-i", switch, str(os.getpid())],
                   check=True, capture_output=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int)
    p.add_argument("--requests", type=int, help="requests per measured round")
    p.add_argument("--rounds", type=int)
    p.add_argument("--warmup", type=int)
    p.add_argument("--database-url",
                   help="a PostgreSQL or MySQL server, on which a fresh database is "
                   "made for the run and dropped after (default: a SQLite file in "
                   "a temporary directory)")
    p.add_argument("--callgrind", action="store_true",
                   help="switch callgrind's collection on for one measured round")
    p.add_argument("--cprofile", metavar="FILE",
                   help="profile the first measured round with cProfile into FILE")
    p.add_argument("--no-freeze", action="store_true",
                   help="leave the long-lived objects in the garbage collector's "
                   "full passes (the daemon freezes them)")
    p.add_argument("--reports-per-request", type=float, default=0.0,
                   help="compute reports handed to compute_node_update from "
                   "another thread while the requests run, this many for each "
                   "request handed to run_instance, the hosts in turn, as the "
                   "consumer thread hands a reporting fleet's (default 0; the "
                   "end-to-end benchmark's fleet sends about 4)")
    p.add_argument("--smoke", action="store_true",
                   help="500 hosts, one round of 50 requests: seconds (CI)")
    p.set_defaults(**DEFAULTS)
    if p.parse_args(argv).smoke:
        # The smoke sizes, unless given on the command line.
        p.set_defaults(**SMOKE)
    args = p.parse_args(argv)

    broker = cloudlib.Broker("request_cost").open()
    if broker.vhost is None:
        print("request_cost: no private vhost (rabbitmqctl missing or refused)",
              file=sys.stderr)
        return 2
    try:
        with tempfile.TemporaryDirectory(prefix="nova-sched-request-cost-") as tmp:
            workdir = Path(tmp)
            try:
                database = Database(workdir, args.database_url)
            except BenchError as err:
                print(f"request_cost: {err}", file=sys.stderr)
                return 2
            try:
                _configure(workdir, broker.url, database.url)
                return _measure(args, database.url)
            finally:
                database.close()
    finally:
        broker.close()


def _measure(args, url: str) -> int:
    from nova_sched import rpc
    from nova_sched.db import api as db_api
    from nova_sched.db import migration
    from nova_sched.long_lived import LongLived
    from nova_sched.scheduler.manager import SchedulerManager

    migration.db_sync(db_api.configure(url))
    transport = rpc.get_transport()
    manager = SchedulerManager(transport)
    manager.reports.start()
    serializer = rpc.ContextSerializer()
    reporting: _Reporting | None = None
    try:
        started = time.perf_counter()
        _register(manager, args.hosts)
        print(f"request_cost: {args.hosts:,} hosts registered in "
              f"{time.perf_counter() - started:.1f} s; {url.split(':')[0]} database")
        # Past the re-reads of the rows registration just inserted (read
        # back within the refresh's overlap window) and the first full resync.
        time.sleep(2.5)
        # As the daemon does: the table refreshed beside the requests.
        manager.refresher.start()
        acks: list = []
        reporting = _Reporting(manager, args.hosts, args.reports_per_request)
        _run(manager, serializer, _requests(args.warmup), acks, reporting)
        if not args.no_freeze:
            LongLived().settle(manager.host_manager.table)
        rounds = []
        for index in range(1 if args.callgrind else args.rounds):
            batch = _requests(args.requests)
            if args.callgrind:
                _callgrind("on")
            if args.cprofile and index == 0:
                import cProfile
                profile = cProfile.Profile()
                rounds.append(profile.runcall(_run, manager, serializer, batch, acks,
                                                  reporting))
                profile.dump_stats(args.cprofile)
            else:
                rounds.append(_run(manager, serializer, batch, acks, reporting))
            if args.callgrind:
                _callgrind("off")
        placed, recorded = _placed(manager)
        cpu = statistics.median(c for c, _ in rounds) / args.requests * 1e3
        wall = statistics.median(w for _, w in rounds) / args.requests * 1e3
        print(f"request_cost: {args.hosts:,} hosts, {args.requests} requests x "
              f"{len(rounds)} rounds after {args.warmup} warm-up; request thread "
              f"CPU {cpu:.3f} ms, wall {wall:.3f} ms per request (p50 of rounds: "
              + ", ".join(f"{c / args.requests * 1e3:.3f}" for c, _ in rounds)
              + f"); {placed} instances placed")
        started = time.perf_counter()
        gc.collect()
        pause_ms = (time.perf_counter() - started) * 1000
        print(f"request_cost: one full garbage collection {pause_ms:.1f} ms, "
              f"{len(gc.get_objects()):,} objects walked, "
              f"{gc.get_freeze_count():,} frozen")
        expected = args.warmup + args.requests * len(rounds)
        if (placed, recorded, len(acks)) != (expected,) * 3:
            print(f"request_cost: of {expected} requests {placed} were placed, "
                  f"{recorded} recorded as cast, {len(acks)} let go",
                  file=sys.stderr)
            return 1
        return 0
    finally:
        if reporting is not None:
            reporting.stop()
        manager.refresher.stop()
        manager.reports.stop()
        manager.stop_publishing()
        transport.cleanup()
        db_api.get_engine().dispose()  # so that a server's database can be dropped
        logging.shutdown()


def _placed(manager) -> tuple[int, int]:
    """Instances placed, and of them those recorded as cast."""
    import sqlalchemy as sa

    from nova_sched.db import api as db_api

    with db_api.get_engine().connect() as conn:
        return tuple(conn.execute(sa.text(
            "SELECT count(host), count(cast_at) FROM instances")).one())


if __name__ == "__main__":
    sys.exit(main())
