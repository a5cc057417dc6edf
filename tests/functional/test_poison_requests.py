"""A poison request among good ones: given up, not circling between daemons.

Two scheduler daemons share a PostgreSQL database and the scheduler topic;
a supervisor restarts whichever exits, as systemd's ``Restart=always``
does. Among the requests of a burst is one whose handler kills the daemon
every time (the test's ``PoisonFilter`` plugin ends the process on the
scheduler hint ``poison``, as a crash in native code or the OOM killer
would). The broker hands the request back after each death; each
redelivered start is counted in the database and runs alone in its
daemon, and once the count passes ``[scheduler] poison_delivery_limit``
the request is put into ERROR with a fault saying why and acknowledged.

What must hold: the poison instance in ERROR with that fault and a failed
``schedule`` event, the daemons died exactly ``1 + limit`` times (its
first delivery, then one per counted start), every good request placed
once with its claim and its ``scheduled`` notification, the counts
forgotten, and the daemons serving afterwards.
"""

from __future__ import annotations

import time

import pytest

import cloudlib
import clusters
import scenario
from scenario import ComputeFleet, Daemons, idle_report, temporary_database

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LIMIT = 2            # [scheduler] poison_delivery_limit (its minimum)
GOOD = 40
HOSTS = [f"poison-h{i}" for i in range(6)]
DAEMONS = ("sched-a", "sched-b")
REQUEST_THREADS = 4


def test_a_poison_request_is_given_up_and_the_good_ones_placed(rabbitmq, workdir):
    with temporary_database("postgresql") as url:
        cloud = cloudlib.Cloud(workdir("poison"), "poison")
        fleet = collector = supervisor = None
        uuids: list[str] = []
        evidence = clusters.FailureEvidence(f"poison-{cloud.tag}")
        evidence.folder(cloud.workdir)
        evidence.probe("broker", lambda: scenario.broker_report(cloud))
        evidence.probe("requests", lambda: scenario.request_states(cloud, fleet, uuids))
        try:
            scenario.use_database(cloud, url)
            fleet = ComputeFleet(cloud.config_file, cloud.scheduler_topic,
                                 cloud.compute_topic,
                                 {h: idle_report(h, 16, 32768, 400) for h in HOSTS})
            enabled = ("RetryFilter, AvailabilityZoneFilter, RamFilter, CoreFilter, "
                       "DiskFilter, ComputeFilter, PoisonFilter")
            daemons = Daemons(cloud, DAEMONS, {
                "scheduler": {"poison_delivery_limit": LIMIT,
                              "request_threads": REQUEST_THREADS,
                              "periodic_task_interval": 2},
                "filter_scheduler": {
                    "available_filters":
                        "tests.functional.plugins.poison_filter.filters",
                    "enabled_filters": enabled}})
            daemons.start_all()
            fleet.register(cloud, HOSTS, 2.0, 2.5)
            collector = cloudlib.NotificationCollector(cloud.config_file)
            supervisor = scenario.Supervisor(daemons).start()

            flavor = cloudlib.named_flavor("m1.tiny")
            good = [cloudlib.havana_request(flavor) for _ in range(GOOD)]
            poison = cloudlib.havana_request(flavor, scheduler_hints={"poison": "1"})
            burst = good[:GOOD // 2] + [poison] + good[GOOD // 2:]
            burst_start = time.monotonic()
            for spec, fprops, _ in burst:
                cloud.client.run_instance(cloudlib.request_context(), spec, fprops)
            poison_uuid = poison[2][0]
            uuids += [u for _, _, (u,) in burst]

            rows, casts, took = scenario.wait_settled(cloud, fleet, uuids, 90)
            # A good request in hand when a daemon died is recast by the
            # survivor: to the same host (the documented window).
            cloudlib.wait_until(
                lambda: scenario.scheduled_instances(collector) >= {
                    u for u in uuids if u != poison_uuid and (rows.get(u) or {}).get("host")},
                15, 0.2, "the scheduled notifications")
            audit = scenario.Audit(cloud, fleet, uuids, rows, casts,
                                   scenario.scheduled_instances(collector),
                                   (burst_start, time.monotonic()))
            print("\n" + audit.line("poison") + f" deaths={len(supervisor.deaths)} "
                  f"settled_in={took:.1f}s", flush=True)

            assert rows[poison_uuid]["vm_state"] == "error"
            fault = audit.faults[poison_uuid]
            assert "given up" in fault and "poison_delivery_limit" in fault, fault
            assert poison_uuid not in casts
            events = [e for action in cloud.actions(poison_uuid)
                      for e in action["events"] if e["event"] == "schedule"]
            assert events and events[-1]["result"] == "Error", events
            assert len(supervisor.deaths) == 1 + LIMIT, (
                f"daemon deaths {supervisor.deaths}: the poison request should "
                f"kill a daemon on its first delivery and on each of its {LIMIT} "
                "counted starts, then be given up\n"
                + cloud.log_tails(list(DAEMONS), 40))
            assert {code for _, code, _ in supervisor.deaths} == {70}
            others = [u for u in uuids if u != poison_uuid]
            assert set(audit.placed) == set(others), (
                f"good requests not placed: {set(others) - set(audit.placed)}; "
                f"faults {[audit.faults.get(u) for u in others if u in audit.faults]}")
            problems = audit.problems(cast_twice_allowed=REQUEST_THREADS * LIMIT)
            assert not problems, problems
            supervisor.stop()
            assert cloud.query("SELECT * FROM request_deliveries") == [], \
                "counts of handled requests are forgotten"

            # The daemons go on serving.
            for name in DAEMONS:
                daemons.wait_ready(name)
            spec, fprops, (last,) = cloudlib.havana_request(flavor)
            cloud.client.run_instance(cloudlib.request_context(), spec, fprops)
            cloudlib.wait_until(lambda: scenario.settled(
                cloud.instances([last]), fleet.snapshot(), last), 15, 0.2,
                "a request after the poison one")
            assert cloud.instances([last])[last]["vm_state"] != "error"
        except Exception as exc:
            evidence.keep(exc)
            raise
        finally:
            if supervisor is not None:
                supervisor.stop()
            if collector is not None:
                collector.close()
            if fleet is not None:
                fleet.close()
            cloud.close()
            evidence.refresh()
