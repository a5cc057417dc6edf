"""Crash safety: daemons SIGKILLed in the middle of a burst lose nothing.

Two scheduler daemons (separate processes, one configuration, their own
``[DEFAULT] host`` each) share a PostgreSQL database and the scheduler topic
of a private vhost. The test plays the compute fleet itself: it casts every
host's ``compute_node_update`` report, and one in-process RPC server on
``Target(topic=compute, server='*')`` stands for every compute node and
records each ``run_instance`` cast the daemons send, per instance.

The burst is cast in waves; while the daemons are handling a wave, one of
them (alternately A and B, the other always running) is SIGKILLed after a
seeded random delay and started again. The broker gives the killed daemon's
unacknowledged requests to the other daemon at once, and a request delivered
again must be idempotent (CONTRACT section 1: "competing consumers ... must
stay correct together"; ``SchedulingCycle.standing``/``_recast``).

What must hold once every instance is settled:
- none lost: each instance is in ERROR, or placed (host set) and cast;
- an instance is cast to one host only, the one its row names; a cast sent
  twice (the daemon died between the cast and the commit of its record,
  the one documented window, see ``SchedulingCycle._cast``; while requests
  wait the record rides the next claim's transaction, ``CastRecords``)
  goes to the same host. Each of the killed daemon's ``request_threads``
  handlers can be inside that window when the kill lands (a handler's
  cast is recorded by its next claim at the latest, so it has at most one
  unrecorded), so a kill may cause up to ``request_threads`` repeated
  casts (not just one): that is the bound;
- no instance in ERROR was cast to a compute node;
- claims: every allocation belongs to a placed instance, on the node its row
  names, every placed instance holds exactly one, each node's running
  totals equal the sum of its allocations and never pass its limit
  (``total x ratio - reserved``);
- the daemons keep serving: a request cast after the burst is placed.

Knobs (environment): NOVA_SCHED_CRASH_SEED (the random delays and flavors),
NOVA_SCHED_TEST_DIR (keep the daemons' logs, see conftest).
"""

from __future__ import annotations

import collections
import os
import random
import time

import pytest

import cloudlib
import scenario
from scenario import temporary_database, ComputeFleet, Daemons, idle_report, node_limit


pytestmark = [pytest.mark.integration, pytest.mark.slow]

SEED = int(os.environ.get("NOVA_SCHED_CRASH_SEED", "20131017"))
REQUESTS = 200
KILLS = 6                    # one per wave of the burst
SCHEDULING_TIMEOUT = 20      # [scheduler] scheduling_timeout of the daemons
PERIODIC_INTERVAL = 2        # [scheduler] periodic_task_interval
REPORT_INTERVAL = 2.0        # seconds between two reports of every host
REQUEST_THREADS = 8          # [scheduler] request_threads of the daemons
SETTLE_TIMEOUT = 40          # after the last wave; budget of the whole test ~90 s
# (vcpus, memory_mb, local_gb, reserved_host_memory_mb), cycled over the hosts:
# unequal sizes, a reserve on the big ones; RAM is what runs out.
HOST_SHAPES = [(2, 2048, 60, 0), (4, 4096, 100, 0), (4, 4096, 100, 0),
               (8, 8192, 200, 512)]
HOSTS = [f"crash-h{i:02d}" for i in range(20)]
FINAL_HOST = "crash-final"
FLAVOR_MIX = {"m1.tiny": 30, "m1.small": 30, "m1.medium": 25, "m1.large": 15}
DAEMONS = ("sched-a", "sched-b")


def _cast_wave(client: cloudlib.ContractClient, items: list[tuple]) -> None:
    for spec, fprops, _ in items:
        client.run_instance(cloudlib.request_context(), spec, fprops,
                            admin_password="crash-safety")


def test_sigkilled_daemons_lose_nothing_and_claim_nothing_twice(rabbitmq, workdir):
    started = time.monotonic()
    rng = random.Random(SEED)
    with temporary_database("postgresql") as url:
        cloud = cloudlib.Cloud(workdir("crash"), "crash")
        fleet = None
        try:
            scenario.use_database(cloud, url)
            shapes = {h: HOST_SHAPES[i % len(HOST_SHAPES)] for i, h in enumerate(HOSTS)}
            fleet = ComputeFleet(cloud.config_file, cloud.scheduler_topic,
                                 cloud.compute_topic,
                                 {h: idle_report(h, *s) for h, s in shapes.items()})
            daemons = Daemons(cloud, DAEMONS, {
                "scheduler": {"scheduling_timeout": SCHEDULING_TIMEOUT,
                              "periodic_task_interval": PERIODIC_INTERVAL,
                              "request_threads": REQUEST_THREADS}})
            daemons.start_all()

            # Register the fleet (a report cast before a queue exists is
            # dropped: repeat until every node is stored), keep it up.
            fleet.register(cloud, HOSTS, REPORT_INTERVAL, PERIODIC_INTERVAL + 0.5)

            # The burst: one instance per request, flavors of a seeded mix.
            names = [n for n, w in FLAVOR_MIX.items() for _ in range(w)]
            requests = [cloudlib.havana_request(cloudlib.named_flavor(rng.choice(names)))
                        for _ in range(REQUESTS)]
            uuids = [r[2][0] for r in requests]
            flavor_of = {r[2][0]: r[1]["instance_type"]["name"] for r in requests}
            per_wave = -(-REQUESTS // KILLS)
            burst_start = time.monotonic()
            wave_log = []
            for k in range(KILLS):
                victim, other = DAEMONS[k % 2], DAEMONS[(k + 1) % 2]
                daemons.wait_ready(other)
                daemons.wait_ready(victim)
                wave = requests[k * per_wave:(k + 1) * per_wave]
                cast_at = time.monotonic()
                _cast_wave(cloud.client, wave)
                cast_s = time.monotonic() - cast_at
                # A wave takes the two daemons a few tenths of a second.
                delay = rng.uniform(0.0, 0.25)
                time.sleep(delay)
                sent = min(REQUESTS, (k + 1) * per_wave)
                rows = cloud.instances(uuids[:sent])
                daemons.kill_and_restart(victim)
                done = sum(1 for r in rows.values()
                              if r["vm_state"] == "error" or r["cast_at"])
                claimed = sum(1 for r in rows.values() if r["vm_state"] != "error"
                              and r["host"] and not r["cast_at"])
                waiting = sum(1 for r in rows.values() if r["vm_state"] == "building"
                              and not r["host"])
                wave_log.append(
                    f"wave {k}: {len(wave)} cast in {cast_s:.2f}s, {victim} killed "
                    f"{delay:.2f}s later; just before: {done} settled, {claimed} "
                    f"claimed not marked cast, {waiting} recorded without a host, "
                    f"{sent - len(rows)} not recorded yet (of {sent} cast)")
            for line in wave_log:
                print(line, flush=True)

            # Every instance settled: ERROR, or host set and cast received.
            rows, casts, settle_s = scenario.wait_settled(cloud, fleet, uuids,
                                                          SETTLE_TIMEOUT)

            # The daemons keep serving: a new host and a request after the burst.
            for name in DAEMONS:
                daemons.wait_ready(name)
            fleet.add(FINAL_HOST, idle_report(FINAL_HOST, 8, 8192, 200))
            cloudlib.wait_until(
                lambda: fleet.report_all() or cloud.query(
                    "SELECT id FROM compute_nodes WHERE host = :h", h=FINAL_HOST),
                10, 0.5, "the final host's report stored")
            spec, fprops, (final,) = cloudlib.havana_request(
                cloudlib.named_flavor("m1.small"))
            cloud.client.run_instance(cloudlib.request_context(), spec, fprops)
            try:
                cloudlib.wait_until(
                    lambda: scenario.settled(cloud.instances([final]),
                                             fleet.snapshot(), final),
                    15, 0.2, "the final request")
            except TimeoutError:
                pass
            final_row = cloud.instances([final]).get(final)
            final_casts = fleet.snapshot().get(final, [])

            # -- the figures ----------------------------------------------------
            allocs = {a["instance_uuid"]: a for a in cloud.query(
                "SELECT a.*, n.host AS node_host, n.hypervisor_hostname AS node_name "
                "FROM allocations a JOIN compute_nodes n ON n.id = a.compute_node_id")}
            nodes = cloud.query("SELECT * FROM compute_nodes")
            sums = scenario.claim_sums(list(allocs.values()))

            errors = [u for u in uuids if (rows.get(u) or {}).get("vm_state") == "error"]
            placed = [u for u in uuids if u not in errors
                      and (rows.get(u) or {}).get("host")]
            lost = [u for u in uuids if not scenario.settled(rows, casts, u)]
            duplicated = [u for u in uuids if len(casts.get(u, [])) > 1]
            # Each repeated cast is a survivor's recast after a kill: count
            # them against the latest kill before they arrived.
            kill_times = [t for _, t in daemons.kills]
            per_kill = [0] * len(kill_times)
            early = []
            for u in duplicated:
                for _, _, arrived in sorted(casts[u], key=lambda c: c[2])[1:]:
                    before = [i for i, t in enumerate(kill_times) if t <= arrived]
                    if before:
                        per_kill[before[-1]] += 1
                    else:
                        early.append(u)
            elsewhere = [u for u in placed if u in casts and
                         {c[0] for c in casts[u]} != {rows[u]["host"]}]
            error_cast = [u for u in errors if u in casts]
            stray_casts = [u for u in casts if u not in rows and u != final]
            no_claim = [u for u in placed if u not in allocs]
            bad_claim = [u for u, a in allocs.items() if u != final and (
                u not in rows or rows[u]["vm_state"] == "error"
                or rows[u]["host"] is None
                or (a["node_host"], a["node_name"]) != (rows[u]["host"], rows[u]["node"]))]
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
                    lim = node_limit(n, res)
                    worst = max(worst, value / lim)
                    if value > lim:
                        over.append((n["host"], res, value, lim))
            reasons = collections.Counter()
            for u in errors:
                faults = cloud.faults(u)
                msg = faults[-1]["message"] if faults else "(no fault)"
                reasons["NoValidHost" if msg.startswith("No valid host")
                        else msg[:60]] += 1
            kills = len(daemons.kills)
            final_ok = bool(final_row and final_row["host"] and final_row["vm_state"]
                            != "error" and final_casts
                            and {c[0] for c in final_casts} == {final_row["host"]})
            elapsed = time.monotonic() - started
            print(f"\ncrash-safety seed={SEED}: requests={REQUESTS} placed={len(placed)} "
                  f"error={len(errors)} lost={len(lost)} duplicated_casts="
                  f"{len(duplicated)} (repeated casts per kill {per_kill}, to another "
                  f"host: {sum(1 for u in duplicated if u in elsewhere)}) "
                  f"max_claim_ratio={worst:.3f} kills={kills} restarts={daemons.restarts} "
                  f"settled_in={settle_s:.1f}s final_request="
                  f"{'placed' if final_ok else 'NOT placed'} elapsed={elapsed:.0f}s",
                  flush=True)
            print(f"kills at {[(n, round(t - burst_start, 2)) for n, t in daemons.kills]}"
                  f" s into the burst; "
                  f"error reasons {dict(reasons)}; flavors of the lost "
                  f"{collections.Counter(flavor_of[u] for u in lost)}", flush=True)

            # -- the checks -----------------------------------------------------
            def evidence(bad):
                return "\n" + scenario.evidence(cloud, DAEMONS, rows, casts, allocs,
                                                bad)

            assert not lost, (f"{len(lost)} instances lost (neither ERROR nor placed "
                              f"and cast):" + evidence(lost))
            assert not elsewhere, ("instances cast to another host than their row "
                                   "names:" + evidence(elsewhere))
            assert not error_cast, ("instances in ERROR that were cast to a compute "
                                    "node:" + evidence(error_cast))
            assert not stray_casts, f"casts of instances never requested: {stray_casts}"
            assert fleet.unnamed == 0, f"{fleet.unnamed} casts without an instance uuid"
            assert not early, ("instances cast twice before any daemon was "
                               "killed:" + evidence(early))
            assert max(per_kill, default=0) <= REQUEST_THREADS, (
                f"repeated casts per kill {per_kill}: more than the killed "
                f"daemon's {REQUEST_THREADS} request threads can have in hand:"
                + evidence(duplicated))
            assert not no_claim, "placed instances without a claim:" + evidence(no_claim)
            assert not bad_claim, ("allocations of instances not placed there "
                                   "(ERROR, no host or another node):"
                                   + evidence(bad_claim))
            assert not drift, f"node totals differ from their allocations: {drift}"
            assert not over, f"nodes claimed past their limits: {over}"
            assert reasons.get("(no fault)", 0) == 0, "instances in ERROR without a fault"
            assert worst >= 0.9, "the burst should have filled some node"
            assert final_ok, ("the request after the burst was not placed: "
                              f"{final_row}, casts {final_casts}\n"
                              + cloud.log_tails(list(DAEMONS), 40))
            assert all(daemons.alive().values()), daemons.alive()
        finally:
            if fleet is not None:
                fleet.close()
            codes = cloud.close()
    bad = {name: code for name, code in codes.items() if code != 0}
    assert not bad, f"daemons that did not exit 0 on SIGTERM: {bad}"
