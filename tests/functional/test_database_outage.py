"""Database outage: PostgreSQL away in the middle of a burst loses nothing.

Issue: "The database away in the middle of a burst (PostgreSQL stopped for
20 s and started again): every request ends in a definite state after it
returns, none twice".

The machine's PostgreSQL server is shared, so it is never stopped. Instead
the two scheduler daemons reach their (throw-away) database through a small
TCP proxy written here (``DatabaseProxy``: threads and sockets) on a port of
its own. "Stopping the database" is the proxy closing its listening socket
and both sides of every connection it relays, so that the daemons' pooled
connections break and new ones are refused for ``OUTAGE`` seconds;
"starting it again" is the proxy listening again on the same port. The test
itself reads the database directly (not through the proxy).

As in test_crash_safety, the test plays the compute fleet: it casts every
host's ``compute_node_update`` report every ``REPORT_INTERVAL`` seconds
(through RabbitMQ, which stays up: the daemons keep receiving them during
the outage but cannot store them), and one in-process RPC server on
``Target(topic=compute, server='*')`` records every ``run_instance`` cast the
daemons send. ``REQUESTS`` one-instance run_instance requests are cast at an
even pace over ``PRE + OUTAGE + POST`` seconds: some before the cut, most
during it, some after; right before the cut ``CLUSTER`` of them are cast back
to back, so that the cut finds the daemons inside their transactions. A request that finds the database gone is parked
(``SchedulerManager.run_instance``, "parked until it answers again"), its
message kept unacknowledged, and handled again by the periodic task
(``resume_parked``) once the database answers.

What must hold once every instance is settled:
- none lost: each instance is placed (host set, its cast received) or in
  ERROR with a fault;
- an instance is cast to one host only, the one its row names, and never
  both cast and in ERROR; a cast repeated to that same host is tolerated
  only for an instance whose request was parked (its cast went out but
  ``mark_cast`` found the database gone: the request is handled again and
  ``SchedulingCycle._recast`` casts it again to the node it holds);
- claims: every allocation belongs to a placed instance, on the node its
  row names; every placed instance holds exactly one; node totals equal
  the sum of their allocations and never pass their limits;
- capacity is ample, so ERROR is only acceptable with a NoValidHost fault,
  and none is expected; faults of any ERROR are printed;
- compute hosts are not considered down after the outage: their reports
  are stored again, and the daemons, still alive, place one more request.

Knobs (environment): NOVA_SCHED_OUTAGE_SEED (the flavors),
NOVA_SCHED_TEST_DIR (keep the daemons' logs, see conftest).
"""

from __future__ import annotations

import collections
import datetime as dt
import os
import random
import re
import time

import pytest

import cloudlib
import scenario
from scenario import temporary_database, ComputeFleet, Daemons, idle_report


pytestmark = [pytest.mark.integration, pytest.mark.slow]

SEED = int(os.environ.get("NOVA_SCHED_OUTAGE_SEED", "20131203"))
OUTAGE = 20                  # seconds the database is away
PRE = 4.0                    # seconds of the burst before the cut
POST = 4.0                   # seconds of the burst after the restart
REQUESTS = 150
CLUSTER = 12                 # requests cast back to back just before the cut
CUT_DELAY = (0.0, 0.02)       # seconds from that cluster to the cut (seeded)
PERIODIC_INTERVAL = 2        # [scheduler] periodic_task_interval
OPERATION_RETRIES = 2        # [database] operation_retries: outages seen fast
SCHEDULING_TIMEOUT = 300     # [scheduler] scheduling_timeout: no sweep here
# [DEFAULT] service_down_time: the test clouds' 15 s (cloudlib), shorter than
# the outage on purpose: heartbeats stored before the cut are older than it
# once the database is back, while the daemons kept receiving fresh reports
# from every host. nova's default is 60 s (then an outage of 20 s cannot
# show a stale heartbeat); NOVA_SCHED_OUTAGE_DOWN_TIME overrides.
SERVICE_DOWN_TIME = int(os.environ.get("NOVA_SCHED_OUTAGE_DOWN_TIME", "15"))
REPORT_INTERVAL = 2.0        # seconds between two reports of every host
SETTLE_TIMEOUT = 45          # after the last request of the burst
PG_ADDRESS = ("127.0.0.1", 5432)
# Every host roomy: 150 instances of at most 2 GB fill a fifth of the RAM.
HOST_SHAPE = (16, 32768, 1000, 0)   # vcpus, memory_mb, local_gb, reserved MB
HOSTS = [f"outage-h{i:02d}" for i in range(16)]
FINAL_HOST = "outage-final"
FLAVOR_MIX = {"m1.tiny": 30, "m1.small": 30, "m1.medium": 25, "m1.large": 15}
DAEMONS = ("sched-a", "sched-b")
PARKED_LINE = "parked until it answers again"
RESUMED_LINE = "Resuming parked request"
UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


# -- the database's stand-in: a TCP proxy that can "stop" --------------------
# -- the scenario ---------------------------------------------------------------
def test_database_outage_mid_burst_loses_nothing_and_casts_nothing_twice(
        rabbitmq, workdir):
    started = time.monotonic()
    rng = random.Random(SEED)
    with temporary_database("postgresql") as url:
        proxy = cloudlib.TcpProxy(PG_ADDRESS)
        proxy.start()
        cloud = cloudlib.Cloud(workdir("outage"), "outage")
        fleet = None
        codes: dict = {}
        try:
            # The daemons (and db sync) go through the proxy; the test's own
            # queries go to PostgreSQL directly.
            scenario.use_database(cloud, proxy.url(url), query_url=url)
            fleet = ComputeFleet(cloud.config_file, cloud.scheduler_topic,
                                 cloud.compute_topic,
                                 {h: idle_report(h, *HOST_SHAPE) for h in HOSTS})
            daemons = Daemons(cloud, DAEMONS, {
                "DEFAULT": {"service_down_time": SERVICE_DOWN_TIME},
                "database": {"operation_retries": OPERATION_RETRIES},
                "scheduler": {"scheduling_timeout": SCHEDULING_TIMEOUT,
                              "periodic_task_interval": PERIODIC_INTERVAL}})
            daemons.start_all()

            fleet.register(cloud, HOSTS, REPORT_INTERVAL, PERIODIC_INTERVAL + 0.5)

            # The burst, at an even pace; the database goes away PRE seconds
            # in and comes back OUTAGE seconds later.
            names = [n for n, w in FLAVOR_MIX.items() for _ in range(w)]
            requests = [cloudlib.havana_request(cloudlib.named_flavor(rng.choice(names)))
                        for _ in range(REQUESTS)]
            uuids = [r[2][0] for r in requests]
            span = PRE + OUTAGE + POST
            burst_start = time.monotonic()
            cut_at = restored_at = None
            restored_wall = None
            cut_conns = 0
            cast_at: dict[str, float] = {}
            step = span / REQUESTS
            shift = 0          # the cluster cast at the cut is out of the pace
            i = 0

            def cast(index: int) -> None:
                spec, fprops, (uuid,) = requests[index]
                cloud.client.run_instance(cloudlib.request_context(), spec, fprops,
                                          admin_password="outage")
                cast_at[uuid] = time.monotonic()

            while i < REQUESTS or restored_at is None:
                now = time.monotonic()
                if cut_at is None and now >= burst_start + PRE:
                    # A cluster just before the cut, so that it lands while the
                    # daemons are inside transactions, not between requests.
                    cluster = list(range(i, min(REQUESTS, i + CLUSTER)))
                    for index in cluster:
                        cast(index)
                    i += len(cluster)
                    shift += len(cluster)
                    delay = rng.uniform(*CUT_DELAY)
                    time.sleep(delay)
                    cut_conns = proxy.stop()
                    cut_at = time.monotonic()
                    at_cut = cloud.instances([requests[k][2][0] for k in cluster])
                    done = sum(1 for r in at_cut.values() if r["cast_at"]
                               or r["vm_state"] == "error")
                    print(f"database stopped {cut_at - burst_start:.1f}s into the "
                          f"burst, {delay * 1000:.0f} ms after a cluster of "
                          f"{len(cluster)} requests ({done} of them cast, "
                          f"{len(at_cut) - done} recorded not cast, "
                          f"{len(cluster) - len(at_cut)} not recorded; "
                          f"{cut_conns} connections cut)", flush=True)
                elif (cut_at is not None and restored_at is None
                      and now >= cut_at + OUTAGE):
                    proxy.start()
                    restored_at = time.monotonic()
                    restored_wall = dt.datetime.now(dt.timezone.utc).replace(
                        tzinfo=None)
                    print(f"database started again {restored_at - burst_start:.1f}s "
                          f"into the burst", flush=True)
                elif i < REQUESTS and now >= burst_start + (i - shift) * step:
                    cast(i)
                    i += 1
                else:
                    time.sleep(0.01)
            assert cut_at is not None and restored_at is not None
            outage_s = restored_at - cut_at
            phase = collections.Counter(
                "before" if t < cut_at else "during" if t < restored_at else "after"
                for t in cast_at.values())

            # Every instance settled: ERROR, or host set and cast received.
            rows, casts, settle_s = scenario.wait_settled(cloud, fleet, uuids,
                                                          SETTLE_TIMEOUT, grace=1.0)

            # The daemons keep serving: a new host and a request after it all.
            fleet.add(FINAL_HOST, idle_report(FINAL_HOST, *HOST_SHAPE))
            try:
                cloudlib.wait_until(
                    lambda: fleet.report_all() or cloud.query(
                        "SELECT id FROM compute_nodes WHERE host = :h", h=FINAL_HOST),
                    15, 0.5, "the final host's report stored")
            except TimeoutError:
                pass
            spec, fprops, (final,) = cloudlib.havana_request(
                cloudlib.named_flavor("m1.small"))
            cloud.client.run_instance(cloudlib.request_context(), spec, fprops)
            try:
                cloudlib.wait_until(
                    lambda: scenario.settled(cloud.instances([final]),
                                             fleet.snapshot(), final),
                    20, 0.2, "the final request")
            except TimeoutError:
                pass
            final_row = cloud.instances([final]).get(final)
            final_casts = fleet.snapshot().get(final, [])

            # -- the figures ----------------------------------------------------
            alloc_rows = cloud.query(
                "SELECT a.*, n.host AS node_host, n.hypervisor_hostname AS node_name "
                "FROM allocations a JOIN compute_nodes n ON n.id = a.compute_node_id")
            allocs: dict[str, list[dict]] = collections.defaultdict(list)
            for a in alloc_rows:
                allocs[a["instance_uuid"]].append(a)
            nodes = cloud.query("SELECT * FROM compute_nodes")
            sums = scenario.claim_sums(alloc_rows)

            parked_lines = daemons.log_lines(PARKED_LINE)
            parked_uuids = {u for line in parked_lines for u in UUID_RE.findall(line)}
            parked_uuids &= set(uuids)
            resumed = len(daemons.log_lines(RESUMED_LINE))

            errors = [u for u in uuids if (rows.get(u) or {}).get("vm_state") == "error"]
            placed = [u for u in uuids if u not in errors
                      and (rows.get(u) or {}).get("host")]
            lost = [u for u in uuids if not scenario.settled(rows, casts, u)]
            duplicated = [u for u in uuids if len(casts.get(u, [])) > 1]
            elsewhere = [u for u in uuids if u in casts and u not in errors and (
                {c[0] for c in casts[u]} != {(rows.get(u) or {}).get("host")})]
            two_hosts = [u for u in uuids if len({c[0] for c in casts.get(u, [])}) > 1]
            repeated_unparked = [u for u in duplicated if u not in parked_uuids]
            error_cast = [u for u in errors if u in casts]
            stray_casts = [u for u in casts if u not in rows and u != final]
            no_claim = [u for u in placed if len(allocs.get(u, [])) != 1]
            bad_claim = [u for u, its in allocs.items() if u != final and (
                u not in rows or rows[u]["vm_state"] == "error"
                or rows[u]["host"] is None or len(its) != 1
                or (its[0]["node_host"], its[0]["node_name"])
                != (rows[u]["host"], rows[u]["node"]))]
            over, drift = [], []
            worst = 0.0
            for n in nodes:
                s = sums.get(n["id"], [0, 0, 0, 0])
                claimed = (n["claimed_memory_mb"], n["claimed_vcpus"],
                           n["claimed_disk_mb"], n["claimed_instances"])
                if list(claimed) != s:
                    drift.append((n["host"], claimed, tuple(s)))
                for res, value in (("ram", claimed[0]), ("vcpu", claimed[1]),
                                   ("disk", claimed[2])):
                    lim = scenario.node_limit(n, res)
                    worst = max(worst, value / lim)
                    if value > lim:
                        over.append((n["host"], res, value, lim))
            reasons = collections.Counter()
            fault_texts = {}
            for u in errors:
                faults = cloud.faults(u)
                msg = faults[-1]["message"] if faults else "(no fault)"
                fault_texts[u] = msg
                reasons["NoValidHost" if msg.startswith("No valid host")
                        else msg[:100]] += 1
            # Reports stored again after the restart: no host left looking down.
            stale_hosts = sorted(
                n["host"] for n in nodes if n["host"] in HOSTS and not n["deleted"]
                and (n["updated_at"] is None or n["updated_at"] < restored_wall))
            final_ok = bool(final_row and final_row["host"] and final_row["vm_state"]
                            != "error" and final_casts
                            and {c[0] for c in final_casts} == {final_row["host"]})
            alive = daemons.alive()
            elapsed = time.monotonic() - started
            print(f"\ndatabase-outage seed={SEED}: requests={REQUESTS} "
                  f"(before/during/after the outage {phase['before']}/"
                  f"{phase['during']}/{phase['after']}) placed={len(placed)} "
                  f"error={len(errors)} lost={len(lost)} duplicated_casts="
                  f"{len(duplicated)} (to another host: {len(two_hosts)}) "
                  f"outage={outage_s:.1f}s (cut {cut_conns} connections) "
                  f"parked={len(parked_lines)} ({len(parked_uuids)} instances) "
                  f"resume_attempts={resumed} max_claim_ratio={worst:.3f} "
                  f"settled_in={settle_s:.1f}s final_request="
                  f"{'placed' if final_ok else 'NOT placed'} "
                  f"daemons_alive={all(alive.values())} service_down_time="
                  f"{SERVICE_DOWN_TIME}s elapsed={elapsed:.0f}s",
                  flush=True)
            if errors:
                when = collections.Counter(
                    "before" if cast_at[u] < cut_at else "during"
                    if cast_at[u] < restored_at else
                    f"after (+{int(cast_at[u] - restored_at)}s)" for u in errors)
                print(f"error reasons {dict(reasons)}; cast {dict(when)} the outage",
                      flush=True)
            if fleet.report_failures:
                print(f"{fleet.report_failures} report rounds failed", flush=True)

            # -- the checks -----------------------------------------------------
            def evidence(bad):
                flat = {u: allocs.get(u) for u in bad}
                return "\n" + scenario.evidence(cloud, DAEMONS, rows, casts, flat, bad)

            assert not lost, (f"{len(lost)} instances lost (neither ERROR nor placed "
                              f"and cast):" + evidence(lost))
            assert not two_hosts, ("instances cast to two different hosts:"
                                   + evidence(two_hosts))
            assert not elsewhere, ("instances cast to another host than their row "
                                   "names:" + evidence(elsewhere))
            assert not error_cast, ("instances both cast and in ERROR:"
                                    + evidence(error_cast))
            assert not repeated_unparked, (
                "instances cast twice whose request was never parked:"
                + evidence(repeated_unparked))
            assert not stray_casts, f"casts of instances never requested: {stray_casts}"
            assert fleet.unnamed == 0, f"{fleet.unnamed} casts without an instance uuid"
            assert not no_claim, ("placed instances without exactly one claim:"
                                  + evidence(no_claim))
            assert not bad_claim, ("allocations of instances not placed there "
                                   "(ERROR, no host, another node, or several):"
                                   + evidence(bad_claim))
            assert not drift, f"node totals differ from their allocations: {drift}"
            assert not over, f"nodes claimed past their limits: {over}"
            not_nvh = {u: m for u, m in fault_texts.items()
                       if not m.startswith("No valid host")}
            assert not not_nvh, ("instances in ERROR without a NoValidHost fault "
                                 f"({len(not_nvh)}):" + evidence(list(not_nvh)))
            assert not errors, ("capacity is ample, yet instances went to ERROR: "
                                f"{dict(reasons)}" + evidence(errors))
            assert parked_lines, "no request was parked: the outage was not seen"
            assert not stale_hosts, ("compute hosts whose reports were not stored "
                                     f"again after the outage: {stale_hosts}")
            assert final_ok, ("the request after the outage was not placed: "
                              f"{final_row}, casts {final_casts}\n"
                              + cloud.log_tails(list(DAEMONS), 40))
            assert all(alive.values()), (f"daemons died: {alive}\n"
                                         + cloud.log_tails(list(DAEMONS), 60))
        finally:
            # Let the daemons reach their database to shut down cleanly.
            if not proxy.running:
                try:
                    proxy.start()
                except OSError as err:
                    print(f"could not restart the proxy: {err}", flush=True)
            try:
                if fleet is not None:
                    fleet.close()
            finally:
                codes = cloud.close()
                proxy.stop()
                print(f"daemon logs: {cloud.workdir}", flush=True)
    bad = {name: code for name, code in codes.items() if code != 0}
    assert not bad, f"daemons that did not exit 0 on SIGTERM: {bad}"
