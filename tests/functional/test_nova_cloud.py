"""nova-sched in place of nova-scheduler, in a real cloud of nova 34 + Placement 16.

One cloud for the module (tests/functional/novacloud.py): Placement,
nova-api, nova-conductor, four nova-compute processes with nova's fake
drivers, and the scheduler under test; everything is checked through
nova's REST API and Placement's, as an operator would see it. Each test
starts from an empty cloud (no server, no usage in Placement) and leaves
it empty again: its servers, groups and aggregates deleted, services
enabled.

The computes (Placement ratios 1.0, no reserved memory, so counts are
exact): ``small`` (SmallFakeDriver, 2 vCPU, 8 GB), ``medium``
(MediumFakeDriver, 10 vCPU, 8 GB), ``big`` (FakeDriver, 1000 vCPU,
800 GB) and ``resched`` (FakeRescheduleDriver: the first build of every
instance fails and conductor reschedules it; 16 GB left usable by
reserving the rest, so that only ``big`` takes the largest flavors).

The scheduler: ``$NOVA_SCHED_CLOUD_SCHEDULER``, ``nova-sched`` (this
project's daemon, the default) or ``nova-scheduler`` (nova's own, the
reference the scenarios were first validated against; the scenarios of
nova-sched's own promises, its ``/healthz`` and several daemons, are
skipped with it). nova-sched reaches nova's API database through a TCP
proxy of the test process, so that a scenario can cut that database from
nova-sched alone. Needs the machine's
RabbitMQ and MariaDB (root without a password on 127.0.0.1:3306) and the
nova venv made by tools/nova_venv.sh (run_tests.sh makes it). Set
``NOVA_SCHED_TEST_DIR`` to keep the processes' logs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

import cloudlib
import novacloud
from novacloud import fault_of, host_of

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCHEDULER = os.environ.get("NOVA_SCHED_CLOUD_SCHEDULER", "nova-sched")
RESCHED_USABLE_MB = 16384
COMPUTES = {
    "small": "fake.SmallFakeDriver",
    "medium": "fake.MediumFakeDriver",
    "big": "fake.FakeDriver",
    "resched": {"driver": "fake.FakeRescheduleDriver",
                # FakeDriver's 800,000 MB less this: RESCHED_USABLE_MB left.
                "reserved_host_memory_mb": 800000 - RESCHED_USABLE_MB},
}
NO_VALID_HOST = "No valid host was found"
# nova-sched's reason names the filters (CONTRACT section 3), and with
# Placement's model each of Placement's constraints ("Placement: 4 have no
# MEMORY_MB capacity for 801024").
PER_FILTER_REASON = re.compile(
    r"\d+/\d+ hosts available: .*(\w+ removed \d+|Placement: \d+ \w+)")


def module_cloud(make_cloud, scheduler: str, start):
    """A module fixture's cloud: ``make_cloud()``, started by ``start(cloud)``
    and settled, yielded to the module's tests, closed after them. The
    module fails at once when MariaDB or the cloud's start does (its tests
    could only fail one by one, slowly)."""
    if not novacloud.mysql_reachable():
        pytest.fail("MariaDB is not answering on 127.0.0.1:3306: run "
                    "tools/ensure_databases.sh (run_tests.sh does)", pytrace=False)
    cloud = make_cloud()
    try:
        start(cloud)
        # The last computes to register (and what else the start made in
        # Placement) may not be read by the scheduler yet (seen once in
        # CI: the first test's boot found 1 host of 4).
        cloud.settle()
        print(f"cloud of {scheduler} started in {cloud.timings['start']:.0f}s "
              f"({cloud.workdir})")
        yield cloud
    except novacloud.CloudError as err:
        pytest.fail(f"the cloud did not start with {scheduler}: {err}", pytrace=False)
    finally:
        cloud.close()


@pytest.fixture(scope="module")
def nova_cloud(rabbitmq, workdir, nova_venv):
    yield from module_cloud(
        lambda: novacloud.NovaCloud(workdir("nova_cloud"), venv=nova_venv,
                                    api_db_proxy=SCHEDULER == "nova-sched"),
        SCHEDULER, lambda cloud: cloud.start(COMPUTES, scheduler=SCHEDULER))


@pytest.fixture(scope="module")
def tiny(nova_cloud):
    """1 vCPU, 256 MB, 1 GB."""
    return nova_cloud.api.create_flavor("tiny", vcpus=1, ram=256, disk=1)


class Scenario:
    """What one test made, undone at its end (servers, groups, aggregates, services)."""

    def __init__(self, cloud: novacloud.NovaCloud):
        self.cloud = cloud
        self.api = cloud.api
        self.placement = cloud.placement
        self.aggregates: list[int] = []
        self.groups: list[str] = []
        self.disabled: list[str] = []
        self.flavors: list[str] = []

    # -- building blocks ------------------------------------------------------
    def zone(self, name: str, hosts: list[str]) -> str:
        agg = self.api.create_aggregate(f"agg-{name}", availability_zone=name,
                                        hosts=hosts)
        self.aggregates.append(agg["id"])
        self.cloud.settle()
        return name

    def group(self, policy: str) -> str:
        group = self.api.create_server_group(f"{policy}-{uuid.uuid4().hex[:4]}", policy)
        self.groups.append(group["id"])
        return group["id"]

    def disable(self, host: str) -> None:
        self.api.set_service_enabled(host, False)
        self.disabled.append(host)
        self.cloud.settle()

    def flavor(self, vcpus: int, ram: int, disk: int = 1) -> str:
        flavor = self.api.create_flavor(f"f-{uuid.uuid4().hex[:6]}", vcpus=vcpus,
                                        ram=ram, disk=disk)
        self.flavors.append(flavor["id"])
        return flavor["id"]

    def boot(self, flavor_id: str, **kwargs) -> dict:
        """One server, waited for until ACTIVE or ERROR."""
        server = self.api.boot(flavor_id, **kwargs)
        return self.api.wait_final(server["id"])

    def boot_many(self, flavor_id: str, n: int, **kwargs) -> list[dict]:
        """``n`` separate requests sent at once, each waited for."""
        ids = [self.api.boot(flavor_id, **kwargs)["id"] for _ in range(n)]
        return [self.api.wait_final(sid) for sid in ids]

    # -- Placement's view ------------------------------------------------------
    def rp(self, host: str) -> str:
        return self.placement.provider_uuid(host)

    def capacity(self, host: str) -> dict[str, int]:
        return self.placement.capacity(self.rp(host))

    def usage(self, host: str) -> dict[str, int]:
        return self.placement.usages(self.rp(host))

    def allocations(self, server_id: str) -> dict[str, dict[str, int]]:
        """A server's allocations: host name -> resources."""
        names = {rp: name for name, rp in self.placement.providers().items()}
        return {names.get(rp, rp): res
                for rp, res in self.placement.allocations(server_id).items()}

    def assert_allocated_as_flavor(self, server: dict, flavor_id: str) -> None:
        flavor = self.api.get(f"/flavors/{flavor_id}")["flavor"]
        want = {"VCPU": flavor["vcpus"], "MEMORY_MB": flavor["ram"],
                "DISK_GB": flavor["disk"]}
        assert self.allocations(server["id"]) == {host_of(server): want}, \
            self.why(server)

    def why(self, server: dict | None = None) -> str:
        """Context for a failed assertion: the server and the scheduler's log."""
        lines = []
        if server is not None:
            lines.append(f"server {server.get('id')}: {server.get('status')} on "
                         f"{host_of(server)} fault {fault_of(server)!r}")
        lines.append(f"usage: {self.cloud.usage_by_host()}")
        if SCHEDULER == "nova-sched":
            try:
                lines.append("--- nova-sched-manage host list ---")
                lines.append(self.cloud.nova_sched_manage("host", "list"))
            except novacloud.CloudError as err:
                lines.append(str(err))
        noise = ("oslo_concurrency.lockutils", "keystoneauth", "RESP BODY", "REQ: curl",
                 "GET call to placement", "RESP: [")
        log = [ln for ln in self.cloud.scheduler_log().splitlines()
               if not any(n in ln for n in noise)]
        interesting = [ln for ln in log if " ERROR " in ln or " WARNING " in ln
                       or "Traceback" in ln]
        lines.append(f"--- {SCHEDULER} log, warnings and errors (last 15) ---")
        lines.extend(interesting[-15:])
        lines.append(f"--- {SCHEDULER} log, last 25 lines (no lock or HTTP chatter) ---")
        lines.extend(log[-25:])
        return "\n".join(lines)

    def assert_no_valid_host(self, server: dict) -> None:
        assert server["status"] == "ERROR", self.why(server)
        message = fault_of(server)
        assert NO_VALID_HOST in message, self.why(server)
        if SCHEDULER == "nova-sched":
            assert PER_FILTER_REASON.search(message), self.why(server)
        assert self.allocations(server["id"]) == {}, self.why(server)

    # -- the end ------------------------------------------------------------
    def undo(self) -> None:
        self.cloud.reset()
        for group in self.groups:
            self.api.delete_server_group(group)
        for agg in self.aggregates:
            self.api.delete_aggregate(agg)
        for host in self.disabled:
            self.api.set_service_enabled(host, True)
        for flavor in self.flavors:
            self.api.delete_flavor(flavor)
        if self.aggregates or self.disabled:
            self.cloud.settle()


def scenario_in(cloud, make_scenario):
    """A test's scenario, ``make_scenario(cloud)``: an empty cloud before
    the test, and again after it."""
    cloud.assert_running()
    assert cloud.api.servers() == []
    cloud.wait_usage_zero()
    sc = make_scenario(cloud)
    yield sc
    sc.undo()
    cloud.assert_running()


@pytest.fixture
def scenario(nova_cloud, tiny):
    yield from scenario_in(nova_cloud, Scenario)


# -- 1 ------------------------------------------------------------------------
def test_a_flavor_only_one_compute_can_take_lands_there(scenario):
    caps = {host: scenario.capacity(host)["MEMORY_MB"] for host in COMPUTES}
    ordered = sorted(caps.values(), reverse=True)
    assert ordered[0] > ordered[1], f"no compute is alone at the top: {caps}"
    (only,) = [h for h, c in caps.items() if c == ordered[0]]
    flavor = scenario.flavor(vcpus=1, ram=ordered[1] + 1024)

    server = scenario.boot(flavor)

    assert server["status"] == "ACTIVE", scenario.why(server)
    assert host_of(server) == only, scenario.why(server)
    scenario.assert_allocated_as_flavor(server, flavor)


# -- 2 ------------------------------------------------------------------------
def test_an_impossible_flavor_fails_with_the_reason_and_no_allocation(scenario):
    most = max(scenario.capacity(host)["MEMORY_MB"] for host in COMPUTES)
    flavor = scenario.flavor(vcpus=1, ram=most + 1024)

    server = scenario.boot(flavor)

    scenario.assert_no_valid_host(server)
    assert not any(scenario.cloud.usage_by_host().values())


def assert_filled_exactly(scenario, servers, fits: dict[str, int], flavor_id) -> None:
    """Every server ACTIVE with its flavor's allocation, and as many on each
    host as it has vCPUs, Placement's usage saying the same."""
    assert [s["status"] for s in servers] == ["ACTIVE"] * len(servers), \
        scenario.why(next(s for s in servers if s["status"] != "ACTIVE"))
    for server in servers:
        scenario.assert_allocated_as_flavor(server, flavor_id)
    placed = {host: sum(1 for s in servers if host_of(s) == host) for host in fits}
    assert placed == fits, scenario.why()
    assert {h: scenario.usage(h)["VCPU"] for h in fits} == fits, scenario.why()


# -- 3 ------------------------------------------------------------------------
def test_one_vcpu_servers_fill_two_computes_exactly(scenario, tiny):
    zone = scenario.zone("az-fill", ["small", "medium"])
    fits = {host: scenario.capacity(host)["VCPU"] for host in ("small", "medium")}
    n = sum(fits.values())

    servers = scenario.boot_many(tiny["id"], n, availability_zone=zone)

    assert_filled_exactly(scenario, servers, fits, tiny["id"])

    one_more = scenario.boot(tiny["id"], availability_zone=zone)

    scenario.assert_no_valid_host(one_more)
    assert {h: scenario.usage(h)["VCPU"] for h in fits} == fits


# -- 4 ------------------------------------------------------------------------
def test_a_multi_create_request_for_more_than_fit_is_all_or_nothing(scenario, tiny):
    zone = scenario.zone("az-multi", ["small", "medium"])
    n = sum(scenario.capacity(host)["VCPU"] for host in ("small", "medium")) + 1

    answer = scenario.api.boot(tiny["id"], count=n, availability_zone=zone)
    servers = scenario.api.servers_of(answer["reservation_id"], count=n)
    servers = [scenario.api.wait_final(s["id"]) for s in servers]

    assert len(servers) == n
    for server in servers:
        assert server["status"] == "ERROR", scenario.why(server)
        assert NO_VALID_HOST in fault_of(server), scenario.why(server)
        assert scenario.allocations(server["id"]) == {}
    assert not any(scenario.cloud.usage_by_host().values()), scenario.why()

    # The same request for as many as fit is placed whole.
    answer = scenario.api.boot(tiny["id"], count=n - 1, availability_zone=zone)
    servers = scenario.api.servers_of(answer["reservation_id"], count=n - 1)
    servers = [scenario.api.wait_final(s["id"]) for s in servers]
    assert [s["status"] for s in servers] == ["ACTIVE"] * (n - 1), \
        scenario.why(next(s for s in servers if s["status"] != "ACTIVE"))


# -- 5 ------------------------------------------------------------------------
def test_anti_affinity_spreads(scenario, tiny):
    zone = scenario.zone("az-anti", ["small", "medium"])
    group = scenario.group("anti-affinity")
    hints = {"group": group}

    first = scenario.boot(tiny["id"], availability_zone=zone, hints=hints)
    second = scenario.boot(tiny["id"], availability_zone=zone, hints=hints)

    assert first["status"] == second["status"] == "ACTIVE", scenario.why(second)
    assert {host_of(first), host_of(second)} == {"small", "medium"}
    # Both hosts of the zone hold a member: a third has nowhere to go,
    # though either host has room.
    third = scenario.boot(tiny["id"], availability_zone=zone, hints=hints)
    assert third["status"] == "ERROR", scenario.why(third)
    assert NO_VALID_HOST in fault_of(third), scenario.why(third)
    assert scenario.allocations(third["id"]) == {}


def test_affinity_stacks_and_a_member_that_cannot_follow_fails(scenario, tiny):
    zone = scenario.zone("az-aff", ["small", "medium"])
    group = scenario.group("affinity")
    hints = {"group": group}

    members = [scenario.boot(tiny["id"], availability_zone=zone, hints=hints)
               for _ in range(2)]

    assert [m["status"] for m in members] == ["ACTIVE"] * 2, scenario.why(members[-1])
    (home,) = {host_of(m) for m in members}
    # One vCPU more than the group's host has left: another compute takes
    # it alone, the group's next member cannot follow the group with it.
    free = scenario.capacity(home)["VCPU"] - scenario.usage(home)["VCPU"]
    too_big = scenario.flavor(vcpus=free + 1, ram=256)
    assert any(scenario.capacity(h)["VCPU"] - scenario.usage(h)["VCPU"] > free
               for h in COMPUTES if h != home)

    stray = scenario.boot(too_big, availability_zone=zone, hints=hints)

    assert stray["status"] == "ERROR", scenario.why(stray)
    assert NO_VALID_HOST in fault_of(stray), scenario.why(stray)
    assert scenario.allocations(stray["id"]) == {}
    alone = scenario.boot(too_big)
    assert alone["status"] == "ACTIVE", scenario.why(alone)
    assert host_of(alone) != home


# -- 6 ------------------------------------------------------------------------
def test_a_disabled_compute_service_is_skipped(scenario, tiny):
    zone = scenario.zone("az-disable", ["small", "medium"])
    probe = scenario.boot(tiny["id"], availability_zone=zone)
    assert probe["status"] == "ACTIVE", scenario.why(probe)
    chosen = host_of(probe)
    other = ({"small", "medium"} - {chosen}).pop()
    scenario.api.delete_server(probe["id"])
    scenario.api.wait_gone([probe["id"]])

    scenario.disable(chosen)
    servers = scenario.boot_many(tiny["id"], scenario.capacity(other)["VCPU"],
                                 availability_zone=zone)

    assert [host_of(s) for s in servers] == [other] * len(servers), \
        scenario.why(servers[0])
    # The zone's only enabled host is full now; the disabled one has room.
    refused = scenario.boot(tiny["id"], availability_zone=zone)
    assert refused["status"] == "ERROR", scenario.why(refused)
    assert scenario.usage(chosen)["VCPU"] == 0


# -- 7 ------------------------------------------------------------------------
def test_a_failed_build_is_rescheduled_to_an_alternate(scenario, tiny):
    """conductor claims the alternate itself, from the Selection's
    allocation_request; the failed host's claim is released."""
    zone = scenario.zone("az-resched", ["resched", "small"])
    # resched has the most free RAM of the zone: the first choice of
    # RAM-spreading weighers (nova's default and nova-sched's).
    assert scenario.capacity("resched")["MEMORY_MB"] > \
        scenario.capacity("small")["MEMORY_MB"]

    server = scenario.boot(tiny["id"], availability_zone=zone)

    assert server["status"] == "ACTIVE", scenario.why(server)
    # One build attempt on each host; the one on small succeeded, so the
    # one on resched came first and failed.
    builds = [e for a in scenario.api.instance_actions(server["id"])
              for e in a.get("events", [])
              if e["event"] == "compute__do_build_and_run_instance"]
    hosts = sorted(e.get("host") for e in builds)
    assert hosts == ["resched", "small"], \
        f"build attempts on {hosts}, expected resched and small\n{scenario.why(server)}"
    assert host_of(server) == "small"
    scenario.assert_allocated_as_flavor(server, tiny["id"])
    assert scenario.usage("resched")["VCPU"] == 0


# -- 8 ------------------------------------------------------------------------
def test_a_cold_migration_moves_the_server_and_its_allocation(scenario, tiny):
    # In a zone of two plain fake computes: the server's zone holds its
    # migration there too (FakeRescheduleDriver would fail the move: the
    # fake finish_migration spawns).
    zone = scenario.zone("az-migrate", ["small", "medium"])
    server = scenario.boot(tiny["id"], availability_zone=zone)
    assert server["status"] == "ACTIVE", scenario.why(server)
    source = host_of(server)

    scenario.api.migrate(server["id"])
    server = scenario.api.wait_status(server["id"], ["VERIFY_RESIZE"])

    assert server["status"] == "VERIFY_RESIZE", scenario.why(server)
    dest = host_of(server)
    assert dest != source
    scenario.assert_allocated_as_flavor(server, tiny["id"])
    (migration,) = scenario.api.migrations(server["id"])
    # While unconfirmed, the migration holds the source's resources.
    assert list(scenario.allocations(migration["uuid"])) == [source]

    scenario.api.confirm_resize(server["id"])
    server = scenario.api.wait_status(server["id"], ["ACTIVE"])

    assert server["status"] == "ACTIVE" and host_of(server) == dest
    assert server["OS-EXT-AZ:availability_zone"] == zone
    scenario.assert_allocated_as_flavor(server, tiny["id"])
    novacloud.wait_until(lambda: scenario.allocations(migration["uuid"]) == {},
                         30, what="the source's allocation released")
    assert scenario.usage(source)["VCPU"] == 0


# -- 9 ------------------------------------------------------------------------
def test_an_availability_zone_made_with_novas_aggregate_api_is_honoured(scenario, tiny):
    # The compute with the least room, which weighers spreading load avoid.
    least = min(COMPUTES, key=lambda h: scenario.capacity(h)["MEMORY_MB"]
                * 10**6 + scenario.capacity(h)["VCPU"])
    zone = scenario.zone("az-one", [least])
    assert scenario.api.availability_zones().get(zone) == [least]

    servers = scenario.boot_many(tiny["id"], 2, availability_zone=zone)

    for server in servers:
        assert server["status"] == "ACTIVE", scenario.why(server)
        assert host_of(server) == least
        assert server["OS-EXT-AZ:availability_zone"] == zone


# -- nova-sched's own promises (CONTRACT section 6 and /healthz) ----------------
nova_sched_only = pytest.mark.skipif(
    SCHEDULER != "nova-sched", reason="checks nova-sched's /healthz and daemons")
HEALTHY = (200, "ok")


def wait_health(cloud: novacloud.NovaCloud, healthy: bool, reason: str = "",
                timeout: float = 15, name: str = "nova-sched") -> str:
    """Until the daemon's /healthz is 200 ``ok`` (``healthy``), or 503 with
    a reason containing ``reason``; returns the body."""
    seen: list[tuple[int, str]] = []

    def _answer():
        status, body = cloud.healthz(name)
        if not seen or seen[-1] != (status, body):
            seen.append((status, body))
        if healthy:
            return (status, body) == HEALTHY and body
        return status == 503 and reason in body and body
    try:
        return novacloud.wait_until(_answer, timeout, 0.25, f"{name} /healthz")
    except TimeoutError as err:
        want = "200 ok" if healthy else f"503 with {reason!r}"
        raise AssertionError(f"{err}: wanted {want}, answers seen {seen}") from None


def create_request_id(api: novacloud.ComputeClient, server_id: str) -> str:
    (create,) = [a for a in api.instance_actions(server_id) if a["action"] == "create"]
    return create["request_id"]


def assert_within_capacity(scenario: "Scenario") -> None:
    """No provider holds more than its inventories allow."""
    for name, rp in scenario.placement.providers().items():
        capacity = scenario.placement.capacity(rp)
        for rc, used in scenario.placement.usages(rp).items():
            assert used <= capacity.get(rc, 0), \
                f"{name} over capacity: {rc} {used} > {capacity.get(rc)}\n{scenario.why()}"


# -- 10 -----------------------------------------------------------------------
@nova_sched_only
def test_a_boot_while_placement_is_down_is_claimed_once_placement_is_back(scenario, tiny):
    """nova-sched's claim waits for Placement (up to 45 s, below conductor's
    60 s call monitor) and /healthz says why meanwhile."""
    cloud = scenario.cloud
    wait_health(cloud, True)
    cloud.stop_placement()
    down_at = time.monotonic()
    try:
        server = scenario.api.boot(tiny["id"])
        reason = wait_health(cloud, False, "placement unreachable", 10)
        # Keep Placement away a while: the request waits, nothing is built.
        time.sleep(max(0.0, 8 - (time.monotonic() - down_at)))
        waiting = scenario.api.server(server["id"])
        assert waiting["status"] == "BUILD" and host_of(waiting) is None, \
            scenario.why(waiting) if waiting["status"] == "ERROR" else waiting
    finally:
        if "placement" not in cloud.procs:
            cloud.start_placement()
    back_after = time.monotonic() - down_at
    print(f"Placement down {back_after:.1f}s; /healthz meanwhile: {reason}")
    assert back_after < 30, f"Placement took {back_after:.0f}s to come back"

    server = scenario.api.wait_final(server["id"])

    assert server["status"] == "ACTIVE", scenario.why(server)
    scenario.assert_allocated_as_flavor(server, tiny["id"])
    # Claimed once: the host holds the flavor and nothing else holds anything.
    flavor = {"VCPU": tiny["vcpus"], "MEMORY_MB": tiny["ram"], "DISK_GB": tiny["disk"]}
    assert {h: u for h, u in cloud.usage_by_host().items() if u} == \
        {host_of(server): flavor}, scenario.why(server)
    builds = [e for a in scenario.api.instance_actions(server["id"])
              for e in a.get("events", [])
              if e["event"] == "compute__do_build_and_run_instance"]
    assert len(builds) == 1, f"build attempts {builds}\n{scenario.why(server)}"
    wait_health(cloud, True, timeout=20)


# -- 11 -----------------------------------------------------------------------
@nova_sched_only
def test_a_boot_is_served_while_novas_api_database_is_unreachable(scenario, tiny):
    """Decisions go on from the host table as last read; Placement judges
    the claim; /healthz says the database is unreachable meanwhile."""
    cloud = scenario.cloud
    proxy = cloud.api_db_proxy
    assert proxy is not None and proxy.up
    wait_health(cloud, True)
    proxy.stop()
    try:
        reason = wait_health(cloud, False, "nova database unreachable", 15)
        print(f"/healthz with nova's API database cut: {reason}")

        server = scenario.boot(tiny["id"])

        assert server["status"] == "ACTIVE", scenario.why(server)
        scenario.assert_allocated_as_flavor(server, tiny["id"])
        assert cloud.healthz()[0] == 503, "healthy again with the database still cut"
    finally:
        proxy.start()
    wait_health(cloud, True, timeout=20)


# -- 12 -----------------------------------------------------------------------
SECOND = "nova-sched-2"


@nova_sched_only
def test_two_nova_sched_daemons_fill_two_computes_exactly(scenario, tiny):
    """Two daemons consume the scheduler topic; concurrent boots fill the
    zone exactly, each claimed once, none over capacity, the next refused."""
    cloud = scenario.cloud
    zone = scenario.zone("az-pair", ["small", "medium"])
    fits = {host: scenario.capacity(host)["VCPU"] for host in ("small", "medium")}
    n = sum(fits.values())
    cloud.start_nova_sched(name=SECOND)
    try:
        wait_health(cloud, True, timeout=60, name=SECOND)
        wait_health(cloud, True)

        def _post(_):
            return novacloud.ComputeClient(cloud.api_url).boot(
                tiny["id"], availability_zone=zone)["id"]
        with ThreadPoolExecutor(n) as pool:
            ids = list(pool.map(_post, range(n)))
        servers = [scenario.api.wait_final(sid) for sid in ids]

        assert_filled_exactly(scenario, servers, fits, tiny["id"])
        assert_within_capacity(scenario)

        # Which daemon served which request (conductor passes the boot's
        # request id on to the scheduler, whose log lines carry it).
        logs = {name: cloud.log_text(name) for name in ("nova-sched", SECOND)}
        served = {name: [] for name in logs}
        for sid in ids:
            rid = create_request_id(scenario.api, sid)
            by = [name for name, text in logs.items() if rid in text]
            assert len(by) == 1, f"request {rid} of {sid} in the logs of {by}"
            served[by[0]].append(sid)
        print("requests served: " + ", ".join(f"{k} {len(v)}" for k, v in served.items()))
        assert all(served.values()), f"one daemon served every request: {served}"

        one_more = scenario.boot(tiny["id"], availability_zone=zone)

        scenario.assert_no_valid_host(one_more)
        assert {h: scenario.usage(h)["VCPU"] for h in fits} == fits
        assert_within_capacity(scenario)
    finally:
        code = cloud.stop_nova_sched(SECOND)
    assert code == 0, f"{SECOND} exited {code} on SIGTERM\n{cloud.log_tails([SECOND])}"


# -- 13: read your writes (issue 38, item 1 in a nova cloud) -------------------
# The cloud's [nova_cells] refresh_interval (novacloud.nova_sched_sections).
REFRESH_INTERVAL = 1.0
# Beyond refresh_interval: the read itself, the host table's refresh (every
# 0.5 s), an explain's round trip, on two busy cores.
SEEN_MARGIN = 2.5
ROUNDS = 5


class ExplainWatch:
    """The daemon's view asked every 50 ms (explain_watch.py, a process of
    its own); ``seen`` times how long a change takes to show in it."""

    def __init__(self, cloud: novacloud.NovaCloud, *options: str):
        script = os.path.join(os.path.dirname(__file__), "explain_watch.py")
        self.answers: list[dict] = []
        self.proc = subprocess.Popen(
            [sys.executable, script, str(cloud.sched_conf), "--flavor", "256,1,1",
             *options], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, env=cloudlib.subprocess_env())
        ready = threading.Event()

        def _read():
            for line in self.proc.stdout:
                if line.startswith("ready"):
                    ready.set()
                elif line.startswith("{"):
                    self.answers.append(json.loads(line))
        threading.Thread(target=_read, daemon=True).start()
        assert ready.wait(60), "explain_watch.py got no answer from nova-sched"

    def seen(self, since: float, check, what: str, timeout: float) -> float:
        """Seconds from ``since`` to the first answer asked after it that
        passes ``check``; every answer asked later passes it too."""
        deadline = time.monotonic() + timeout
        first = None
        while first is None and time.monotonic() < deadline:
            first = next((a for a in list(self.answers)
                          if a["sent"] >= since and check(a)), None)
            time.sleep(0.05)
        assert first is not None, (
            f"{what}: not seen within {timeout} s; last answer "
            f"{self.answers[-1] if self.answers else None}")
        time.sleep(0.5)
        later = [a for a in list(self.answers) if a["sent"] > first["sent"]]
        assert later and all(check(a) for a in later), \
            f"{what}: seen, then not: {[a for a in later if not check(a)][:1]}"
        return first["sent"] - since

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def removed_as_disabled(answer: dict) -> set:
    """Hosts an explain answer removed for a disabled service. Two reads see
    nova's disable: the services row (ComputeFilter) and the
    COMPUTE_STATUS_DISABLED trait nova-compute then sets in Placement. The
    trait can land first; Placement's step runs before the filters, so from
    then on it, not ComputeFilter, names the host."""
    removed = answer["removed"]
    return (set(removed.get("ComputeFilter", ()))
            | set(removed.get("Placement: have trait COMPUTE_STATUS_DISABLED", ())))


@nova_sched_only
def test_changes_through_novas_api_are_seen_by_every_decision_after_the_next_read(
        scenario, tiny):
    """A service disabled and enabled, a zone made, a host added to and
    removed from it, each through nova's REST API: every explain asked
    after refresh_interval (plus the read) sees the change."""
    api = scenario.api
    limit = REFRESH_INTERVAL + SEEN_MARGIN
    delays = {}
    everywhere = ExplainWatch(scenario.cloud)
    zoned = ExplainWatch(scenario.cloud, "--az", "az-rw")
    try:
        # Several times: where the change falls in the poller's period varies.
        for _ in range(ROUNDS):
            api.set_service_enabled("small", False)
            scenario.disabled.append("small")
            delays.setdefault("service disabled", []).append(everywhere.seen(
                time.monotonic(),
                lambda a: "small" in removed_as_disabled(a),
                "small disabled", limit))
            api.set_service_enabled("small", True)
            scenario.disabled.remove("small")
            delays.setdefault("service enabled", []).append(everywhere.seen(
                time.monotonic(), lambda a: "small" in a["hosts"], "small enabled", limit))

        for round_ in range(ROUNDS):
            agg = api.create_aggregate(f"agg-rw-{round_}", availability_zone="az-rw")
            scenario.aggregates.append(agg["id"])
            api.aggregate_add_host(agg["id"], "medium")
            delays.setdefault("zone made with a host", []).append(zoned.seen(
                time.monotonic(), lambda a: a["hosts"] == ["medium"], "zone az-rw",
                limit))
            api.aggregate_add_host(agg["id"], "small")
            delays.setdefault("host added to the zone", []).append(zoned.seen(
                time.monotonic(), lambda a: a["hosts"] == ["medium", "small"],
                "small in az-rw", limit))
            api.aggregate_remove_host(agg["id"], "medium")
            delays.setdefault("host removed from the zone", []).append(zoned.seen(
                time.monotonic(), lambda a: a["hosts"] == ["small"],
                "medium out of az-rw", limit))
            api.delete_aggregate(agg["id"])
            scenario.aggregates.remove(agg["id"])
            delays.setdefault("zone deleted", []).append(zoned.seen(
                time.monotonic(), lambda a: a["hosts"] == [], "az-rw gone", limit))
    finally:
        everywhere.close()
        zoned.close()
    print("seen after (s, each round): " + "; ".join(
        f"{k} {' '.join(f'{v:.2f}' for v in values)}" for k, values in delays.items()))
