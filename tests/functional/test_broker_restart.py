"""The broker restarted in the middle of a burst: durable queues lose nothing.

One scheduler daemon on a throw-away PostgreSQL database and a private
vhost, with ``[oslo_messaging_rabbit] amqp_durable_queues = true`` (so are
all the test's own transports: queue and exchange declarations must agree).
The test plays the compute fleet itself: it casts every host's
``compute_node_update`` report every 2 s, and one in-process RPC server on
``Target(topic=compute, server='*')`` records each ``run_instance`` cast.

About 300 requests are cast as fast as possible, and while most of them are
still waiting in the broker's ``scheduler`` queue the RabbitMQ application
is stopped (``rabbitmqctl stop_app``) and started again (``start_app``,
always, in a ``finally``). Persistent messages in durable queues survive
that; the daemon, the test's listener and its report client must reconnect
by themselves (the daemon is never restarted).

What must hold once every instance is in a definite state:
- none lost: each request is in ERROR, or placed and its cast received;
  a cast the daemon sent while the broker went down and that never reached
  the listener is counted apart ("cast lost in the restart");
- no instance is cast to two different hosts;
- the daemon is alive and a request cast after the restart is placed.
"""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

import cloudlib
import scenario
from scenario import temporary_database, ComputeFleet, Daemons, idle_report


pytestmark = [pytest.mark.integration, pytest.mark.slow]

RECONNECTED_LINE = "Reconnected to AMQP server"
REPORT_INTERVAL = 2.0        # seconds between two reports of every host
PERIODIC_INTERVAL = 2        # [scheduler] periodic_task_interval
REQUESTS = 300
HOSTS = [f"restart-h{i:02d}" for i in range(10)]
HOST_SHAPE = (64, 262144, 4000)   # vcpus, memory_mb, local_gb: ample room
FLAVOR = "m1.tiny"
DAEMON = "sched-a"
BROKER_DOWN = 3.0            # seconds between stop_app and start_app
SETTLE_TIMEOUT = 45
CONFIG = {
    "oslo_messaging_rabbit": {"amqp_durable_queues": "true"},
    # One request thread: the daemon places slower than the test casts, so
    # most of the burst is still in the broker when it stops.
    "scheduler": {"periodic_task_interval": PERIODIC_INTERVAL,
                  "request_threads": 1},
}


def _ctl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["rabbitmqctl", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _ready_count(vhost: str, name: str) -> int | None:
    """messages_ready of a queue, per rabbitmqctl."""
    listed = _ctl("-q", "-p", vhost, "list_queues", "name", "messages_ready",
                  timeout=30)
    if listed.returncode != 0:
        return None
    for line in listed.stdout.splitlines():
        fields = line.split("\t")
        if len(fields) == 2 and fields[0] == name:
            return int(fields[1])
    return None


def _broker_up(vhost: str) -> bool:
    try:
        return _ctl("-q", "-p", vhost, "list_queues", timeout=30).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _start_broker_app(vhost: str | None) -> None:
    """start_app, then wait until the node answers again (later tests need it)."""
    started = _ctl("start_app", timeout=120)
    if started.returncode != 0:
        print(f"rabbitmqctl start_app: {started.returncode} {started.stderr}",
              flush=True)
    try:
        _ctl("await_startup", timeout=120)
    except subprocess.TimeoutExpired:
        pass
    cloudlib.wait_until(lambda: _broker_up(vhost or "/"), 120, 0.5,
                        "the broker answering after start_app")


def _cast_lost(rows: dict, casts: dict, uuid: str) -> bool:
    """Placed and marked cast by the daemon, but the cast never reached a compute."""
    row = rows.get(uuid)
    return bool(row and row["vm_state"] != "error" and row["host"]
                and row["cast_at"] and uuid not in casts)


def test_durable_queues_survive_a_broker_restart(rabbitmq, workdir):
    if not shutil.which("rabbitmqctl"):
        pytest.skip("rabbitmqctl is needed to restart the broker")
    import oslo_messaging as messaging

    from nova_sched.conf import CONF

    # oslo.messaging's rabbit driver registers its options (amqp_durable_queues
    # among them) on CONF when a transport is made; making one does not
    # connect, and the test may run first.
    messaging.get_rpc_transport(CONF, url="rabbit://").cleanup()
    CONF.set_override("amqp_durable_queues", True, group="oslo_messaging_rabbit")
    started = time.monotonic()
    try:
        with temporary_database("postgresql") as url:
            cloud = cloudlib.Cloud(workdir("broker-restart"), "brestart")
            fleet = None
            try:
                if cloud.broker.vhost is None:
                    pytest.skip("no private vhost (rabbitmqctl refused)")
                vhost = cloud.broker.vhost
                scenario.use_database(cloud, url, CONFIG)
                fleet = ComputeFleet(cloud.config_file, cloud.scheduler_topic,
                                     cloud.compute_topic,
                                     {h: idle_report(h, *HOST_SHAPE) for h in HOSTS})
                daemons = Daemons(cloud, (DAEMON,), CONFIG)
                daemons.start_all()

                fleet.register(cloud, HOSTS, REPORT_INTERVAL, PERIODIC_INTERVAL + 0.5)

                # The burst, cast as fast as possible.
                itype = cloudlib.named_flavor(FLAVOR)
                requests = [cloudlib.havana_request(itype) for _ in range(REQUESTS)]
                uuids = [r[2][0] for r in requests]
                client = cloud.client
                t0 = time.monotonic()
                for spec, fprops, _ in requests:
                    client.run_instance(cloudlib.request_context(), spec, fprops)
                cast_s = time.monotonic() - t0
                queued = _ready_count(vhost, cloud.scheduler_topic)
                reconnects_before = cloud.log_text(DAEMON).count(RECONNECTED_LINE)

                # The restart: start_app always runs.
                down_at = time.monotonic()
                stopped = None
                try:
                    stopped = _ctl("stop_app", timeout=120)
                    stopped_at = time.monotonic()
                    # Requests the daemon had not taken up when the broker stopped.
                    at_stop = cloud.instances(uuids)
                    unrecorded_at_stop = REQUESTS - len(at_stop)
                    time.sleep(BROKER_DOWN)
                finally:
                    _start_broker_app(vhost)
                up_at = time.monotonic()
                down_s = up_at - down_at
                assert stopped is not None and stopped.returncode == 0, \
                    f"rabbitmqctl stop_app failed: {stopped}"

                # Every instance in a definite state.
                rows, casts, settle_s = scenario.wait_settled(
                    cloud, fleet, uuids, SETTLE_TIMEOUT, grace=1.0,
                    done=lambda rows, casts, u: (scenario.settled(rows, casts, u)
                                                 or _cast_lost(rows, casts, u)))

                # The daemon keeps serving: a request after the restart.
                daemon_alive = cloud.procs[DAEMON].poll() is None
                spec, fprops, (final,) = cloudlib.havana_request(itype)
                for _ in range(20):
                    try:
                        client.run_instance(cloudlib.request_context(), spec, fprops)
                        break
                    except Exception as err:  # the client still reconnecting
                        print(f"final cast failed (retried): {err!r}"[:200], flush=True)
                        time.sleep(0.5)
                try:
                    cloudlib.wait_until(
                        lambda: scenario.settled(cloud.instances([final]), fleet.snapshot(),
                                         final), 20, 0.2, "the final request")
                except TimeoutError:
                    pass
                final_row = cloud.instances([final]).get(final)
                final_casts = fleet.snapshot().get(final, [])
                final_ok = bool(final_row and final_row["host"]
                                and final_row["vm_state"] != "error" and final_casts
                                and {c[0] for c in final_casts} == {final_row["host"]})
                reconnected = (cloud.log_text(DAEMON).count(RECONNECTED_LINE)
                               > reconnects_before)

                errors = [u for u in uuids if (rows.get(u) or {}).get("vm_state")
                          == "error"]
                placed = [u for u in uuids if scenario.settled(rows, casts, u)
                          and u not in errors]
                cast_lost = [u for u in uuids if _cast_lost(rows, casts, u)]
                lost = [u for u in uuids if not scenario.settled(rows, casts, u)
                        and u not in cast_lost]
                two_hosts = [u for u, c in casts.items() if len({x[0] for x in c}) > 1]
                elsewhere = [u for u in placed if
                             {c[0] for c in casts[u]} != {rows[u]["host"]}]
                repeated = [u for u, c in casts.items() if len(c) > 1]
                elapsed = time.monotonic() - started
                print(f"\nbroker-restart: sent={REQUESTS} (cast in {cast_s:.2f}s) "
                      f"queued_before_restart={queued} not_recorded_at_stop="
                      f"{unrecorded_at_stop} placed={len(placed)} "
                      f"error={len(errors)} lost={len(lost)} "
                      f"casts_lost_in_restart={len(cast_lost)} "
                      f"repeated_casts={len(repeated)} "
                      f"broker_down={down_s:.1f}s (stop_app took "
                      f"{stopped_at - down_at:.1f}s) daemon_reconnected="
                      f"{'yes' if reconnected else 'no'} daemon_alive="
                      f"{'yes' if daemon_alive else 'no'} final_request="
                      f"{'placed' if final_ok else 'NOT placed'} "
                      f"report_failures={fleet.report_failures} "
                      f"settled_in={settle_s:.1f}s elapsed={elapsed:.0f}s",
                      flush=True)

                def evidence(bad):
                    return "\n" + scenario.evidence(cloud, (DAEMON,), rows, casts, {}, bad)

                assert not lost, (f"{len(lost)} requests lost (no row, or neither "
                                  f"ERROR nor placed) across the broker restart:"
                                  + evidence(lost) + "\n"
                                  + cloud.log_tails([DAEMON], 40))
                assert not two_hosts, ("instances cast to two different hosts:"
                                       + evidence(two_hosts))
                assert not elsewhere, ("instances cast to another host than their "
                                       "row names:" + evidence(elsewhere))
                assert fleet.unnamed == 0, f"{fleet.unnamed} casts without a uuid"
                assert daemon_alive, ("the daemon died in the broker restart\n"
                                      + cloud.log_tails([DAEMON], 60))
                assert final_ok, ("the request after the restart was not placed: "
                                  f"{final_row}, casts {final_casts}\n"
                                  + cloud.log_tails([DAEMON], 40))
            finally:
                if fleet is not None:
                    try:
                        fleet.close()
                    except Exception as err:
                        print(f"fleet close: {err!r}", flush=True)
                codes = cloud.close()
        bad = {name: code for name, code in codes.items() if code != 0}
        assert not bad, f"daemons that did not exit 0 on SIGTERM: {bad}"
    finally:
        CONF.clear_override("amqp_durable_queues", group="oslo_messaging_rabbit")
