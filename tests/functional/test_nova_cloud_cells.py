"""The scheduler in a nova 34 cloud of two cells (issue 40 item 1).

One cloud for the module (``NovaCloud(cells=2)``, tests/functional/novacloud.py):
cell1 and cell2 each with its own database and RabbitMQ vhost; the cloud's
nova-conductor is the superconductor and cell1's conductor, cell2 has its
own (without the API database, as a split deployment has it); nova-api and
the scheduler are on the top level. Everything is checked through nova's
REST API and Placement's, and nova's own records of where a server lives
(the API database's instance_mappings, ``nova-manage cell_v2 list_hosts``).
Each test starts from an empty cloud and leaves it empty
(test_nova_cloud's Scenario).

The computes (Placement ratios 1.0, so counts are exact): cell1 has
``c1-small`` (SmallFakeDriver, 2 vCPU, 8 GB) and ``c1-medium``
(MediumFakeDriver, 10 vCPU, 8 GB); cell2 has ``c2-small``, ``c2-medium``
and ``c2-resched`` (FakeRescheduleDriver: every instance's first build
fails; 16 GB left usable, the most free RAM of the cloud, so that RAM
weighers choose it first). One scenario adds ``c2-late`` and retires it.

The scheduler: ``$NOVA_SCHED_CLOUD_SCHEDULER``, ``nova-sched`` (the default)
or ``nova-scheduler`` (nova's own, the reference every scenario passes
against). With nova-sched, cell2's cell mapping names its database through
a TCP proxy of the test process (``cell_db_proxy``), so that a scenario can
cut cell2's database from the mapping's readers (nova-sched, nova-api, the
superconductor) while cell2 itself keeps working.
"""

from __future__ import annotations

import re
import time

import pytest

import novacloud
from novacloud import ApiError, host_of
from test_nova_cloud import (NO_VALID_HOST, RESCHED_USABLE_MB, SCHEDULER, Scenario,
                             module_cloud, nova_sched_only, scenario_in, wait_health)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COMPUTES = {
    "c1-small": "fake.SmallFakeDriver",
    "c1-medium": "fake.MediumFakeDriver",
    "c2-small": {"driver": "fake.SmallFakeDriver", "cell": "cell2"},
    "c2-medium": {"driver": "fake.MediumFakeDriver", "cell": "cell2"},
    "c2-resched": {"driver": "fake.FakeRescheduleDriver", "cell": "cell2",
                   # FakeDriver's 800,000 MB less this: RESCHED_USABLE_MB left.
                   "reserved_host_memory_mb": 800000 - RESCHED_USABLE_MB},
}
CELL_OF = {host: (spec.get("cell", "cell1") if isinstance(spec, dict) else "cell1")
           for host, spec in COMPUTES.items()}
# nova-sched reads nova's databases every second (nova_sched_sections);
# nova-scheduler reads them at every request.
REFRESH_INTERVAL = 1.0


@pytest.fixture(scope="module")
def cells_cloud(rabbitmq, workdir, nova_venv):
    yield from module_cloud(
        lambda: novacloud.NovaCloud(workdir("nova_cells"), venv=nova_venv, cells=2,
                                    cell_db_proxy=SCHEDULER == "nova-sched"),
        SCHEDULER, lambda cloud: cloud.start(COMPUTES, scheduler=SCHEDULER))


@pytest.fixture(scope="module")
def tiny(cells_cloud):
    """1 vCPU, 256 MB, 1 GB."""
    return cells_cloud.api.create_flavor("tiny", vcpus=1, ram=256, disk=1)


class CellsScenario(Scenario):
    """test_nova_cloud's Scenario with nova's view of cells."""

    def boot_on(self, flavor_id: str, host: str) -> dict:
        """A server forced onto ``host`` as an admin does (zone ``nova:HOST``);
        its request spec keeps the default zone, so a move may go anywhere."""
        return self.boot(flavor_id, availability_zone=f"nova:{host}")

    def cell_of(self, server_id: str) -> str | None:
        """The server's cell as nova records it (the API database's
        instance_mappings)."""
        rows = self.cloud.dbs.query(
            "api", "SELECT c.name FROM instance_mappings m JOIN cell_mappings c "
            "ON m.cell_id = c.id WHERE m.instance_uuid = %s", server_id)
        return rows[0]["name"] if rows else None

    def host_cells(self) -> dict[str, str]:
        """host -> cell name, as ``nova-manage cell_v2 list_hosts`` prints them."""
        out = self.cloud.nova_manage("cell_v2", "list_hosts")
        rows = re.findall(r"^\|\s*(\S+)\s*\|\s*[0-9a-f-]{36}\s*\|\s*(\S+)\s*\|$",
                          out, re.MULTILINE)
        return {host: cell for cell, host in rows}

    def assert_in_cell(self, server: dict, cell: str) -> None:
        """ACTIVE on a host of ``cell``, nova's mapping saying the same."""
        assert server["status"] == "ACTIVE", self.why(server)
        assert self.cloud.compute_cells.get(host_of(server)) == cell, self.why(server)
        assert self.cell_of(server["id"]) == cell, self.why(server)

    def build_hosts(self, server_id: str) -> list[str]:
        """The hosts of the server's build attempts, the failed one first.

        nova stamps events to the second and a rescheduled attempt's event
        ends in Success too, so the order comes from the computes' logs:
        an attempt that failed logs "Instance failed to spawn".
        """
        builds = [e.get("host") for a in self.api.instance_actions(server_id)
                  for e in a.get("events", [])
                  if e["event"] == "compute__do_build_and_run_instance"]
        marker = f"[instance: {server_id}] Instance failed to spawn"
        return sorted(builds, key=lambda host: marker not in self.cloud.log_text(
            f"nova-compute-{host}"))

    def cell2_usage(self) -> dict[str, dict[str, int]]:
        return {h: u for h, u in self.cloud.usage_by_host().items()
                if self.cloud.compute_cells.get(h) == "cell2" and u}


@pytest.fixture
def scenario(cells_cloud, tiny):
    yield from scenario_in(cells_cloud, CellsScenario)


def flavor_usage(flavor: dict) -> dict[str, int]:
    return {"VCPU": flavor["vcpus"], "MEMORY_MB": flavor["ram"], "DISK_GB": flavor["disk"]}


# -- 1 ------------------------------------------------------------------------
def test_boots_fill_a_zone_across_both_cells(scenario, tiny):
    """Four 1-vCPU servers in a zone of one 2-vCPU host per cell: both cells
    are needed; each server's allocation is on its host, and nova's records
    (instance_mappings, list_hosts) put it in that host's cell."""
    hosts = ["c1-small", "c2-small"]
    zone = scenario.zone("az-both", hosts)
    fits = {host: scenario.capacity(host)["VCPU"] for host in hosts}

    servers = scenario.boot_many(tiny["id"], sum(fits.values()), availability_zone=zone)

    for server in servers:
        assert server["status"] == "ACTIVE", scenario.why(server)
        scenario.assert_allocated_as_flavor(server, tiny["id"])
        scenario.assert_in_cell(server, CELL_OF[host_of(server)])
    placed = {host: sum(1 for s in servers if host_of(s) == host) for host in hosts}
    assert placed == fits, scenario.why()
    assert scenario.host_cells() == CELL_OF


# -- 2 ------------------------------------------------------------------------
def test_a_reschedule_in_cell2_goes_to_an_alternate_of_cell2(scenario, tiny):
    """c2-resched (the most free RAM) is chosen and fails the build; cell2's
    conductor builds on an alternate the scheduler gave with it, which is
    of cell2 though c1-medium is in the zone (and outweighs c2-small on
    vCPUs): a cell's conductor can reach its own computes only."""
    zone = scenario.zone("az-resched", ["c2-resched", "c2-small", "c1-medium"])
    assert scenario.capacity("c2-resched")["MEMORY_MB"] > max(
        scenario.capacity(h)["MEMORY_MB"] for h in ("c2-small", "c1-medium"))

    server = scenario.boot(tiny["id"], availability_zone=zone)

    assert server["status"] == "ACTIVE", scenario.why(server)
    hosts = scenario.build_hosts(server["id"])
    assert hosts == ["c2-resched", "c2-small"], \
        f"build attempts on {hosts}, expected c2-resched then c2-small\n" \
        f"{scenario.why(server)}"
    scenario.assert_in_cell(server, "cell2")
    scenario.assert_allocated_as_flavor(server, tiny["id"])
    assert scenario.usage("c2-resched")["VCPU"] == 0
    assert scenario.usage("c1-medium")["VCPU"] == 0


# -- 3 ------------------------------------------------------------------------
def test_a_cold_migration_stays_in_its_cell_or_fails_with_nothing_claimed(scenario):
    """nova sets requested_destination.cell to the server's cell (cross-cell
    moves are off by default policy): a cell1 server moves to the other
    cell1 host though cell2's c2-resched has the most free RAM, and once
    cell1 has no room the move fails with NoValidHost, nothing claimed,
    while cell2's hosts were empty."""
    big = scenario.api.get(f"/flavors/{scenario.flavor(vcpus=1, ram=6000)}")["flavor"]
    assert all(scenario.capacity(h)["MEMORY_MB"] < 2 * big["ram"] for h in CELL_OF
               if h != "c2-resched")
    first = scenario.boot_on(big["id"], "c1-small")
    assert first["status"] == "ACTIVE", scenario.why(first)

    scenario.api.migrate(first["id"])
    first = scenario.api.wait_status(first["id"], ["VERIFY_RESIZE"])

    assert first["status"] == "VERIFY_RESIZE", scenario.why(first)
    assert host_of(first) == "c1-medium", scenario.why(first)
    (moved,) = scenario.api.migrations(first["id"])
    scenario.api.confirm_resize(first["id"])
    first = scenario.api.wait_status(first["id"], ["ACTIVE"])
    scenario.assert_in_cell(first, "cell1")
    scenario.assert_allocated_as_flavor(first, big["id"])
    # The source compute releases c1-small after the server is ACTIVE; the
    # scheduler sees the release at its next read.
    novacloud.wait_until(lambda: scenario.allocations(moved["uuid"]) == {},
                         30, what="c1-small's allocation released")
    scenario.cloud.settle()

    # c1-medium holds the first; the second, on c1-small, has no room left
    # in cell1, where cell2's three hosts all have room.
    second = scenario.boot_on(big["id"], "c1-small")
    assert second["status"] == "ACTIVE", scenario.why(second)
    before = scenario.allocations(second["id"])

    scenario.api.migrate(second["id"])
    second = scenario.api.wait_status(second["id"], ["ACTIVE"])

    assert second["status"] == "ACTIVE" and host_of(second) == "c1-small", \
        scenario.why(second)
    (migration,) = scenario.api.migrations(second["id"])
    assert migration["status"] == "error", migration
    (action,) = [a for a in scenario.api.instance_actions(second["id"])
                 if a["action"] == "migrate"]
    said = " ".join(f"{e.get('details') or ''} {e.get('traceback') or ''}"
                    for e in action.get("events", []))
    assert NO_VALID_HOST in said, f"{action}\n{scenario.why(second)}"
    assert scenario.allocations(second["id"]) == before == \
        {"c1-small": flavor_usage(big)}
    assert scenario.allocations(migration["uuid"]) == {}
    assert scenario.cell2_usage() == {}, scenario.why(second)


# -- 4 ------------------------------------------------------------------------
def test_a_cold_migration_to_an_unknown_host_or_another_cells_is_refused(scenario, tiny):
    """nova-api itself answers 400 (ComputeHostNotFound: it looks the host
    up in the server's own cell), before any migration or claim."""
    server = scenario.boot_on(tiny["id"], "c1-small")
    assert server["status"] == "ACTIVE", scenario.why(server)
    before = scenario.allocations(server["id"])

    for target in ("no-such-host", "c2-small"):
        with pytest.raises(ApiError) as refused:
            scenario.api.migrate(server["id"], host=target)
        assert refused.value.status == 400, refused.value
        assert "could not be found" in refused.value.body, refused.value
        after = scenario.api.server(server["id"])
        assert after["status"] == "ACTIVE" and host_of(after) == "c1-small"
        assert not after.get("OS-EXT-STS:task_state"), after
        assert scenario.allocations(server["id"]) == before
        assert scenario.api.migrations(server["id"]) == []
        assert scenario.cell2_usage() == {}


# -- 5 ------------------------------------------------------------------------
def test_a_compute_of_cell2_is_a_candidate_once_discovered(scenario):
    """c2-late, started mid-test, is the only host with more than 16 GB of
    RAM: a flavor of 32 GB lands there right after discover_hosts maps it
    (within the scheduler's refresh interval and a margin)."""
    flavor = scenario.flavor(vcpus=1, ram=2 * RESCHED_USABLE_MB)
    assert all(scenario.capacity(h)["MEMORY_MB"] < 2 * RESCHED_USABLE_MB
               for h in COMPUTES)
    cloud = scenario.cloud
    try:
        cloud.start_compute("c2-late", driver="fake.FakeDriver", cell="cell2")
        cloud.discover_hosts(["c2-late"])
        mapped_at = time.monotonic()
        deadline = mapped_at + REFRESH_INTERVAL + 5
        attempts = []
        while True:
            server = scenario.boot(flavor)
            attempts.append(round(time.monotonic() - mapped_at, 1))
            if server["status"] == "ACTIVE" or time.monotonic() > deadline:
                break
            cloud.api.delete_server(server["id"])
            cloud.api.wait_gone([server["id"]])
        print(f"boots after the mapping, seconds: {attempts}")

        assert host_of(server) == "c2-late", scenario.why(server)
        scenario.assert_in_cell(server, "cell2")
        scenario.assert_allocated_as_flavor(server, flavor)
    finally:
        cloud.reset()
        if "c2-late" in cloud.computes:
            cloud.remove_compute("c2-late")
    cloud.settle()


# -- 6: nova-sched's own promise --------------------------------------------------
def wait_cell_unreachable(cloud: novacloud.NovaCloud, cell: str, timeout: float = 20
                          ) -> str:
    """Until nova-sched's /healthz is 503 naming the cell (its name or uuid)
    as unreachable; returns the body."""
    seen: list[tuple[int, str]] = []
    names = (cell, cloud.cell_uuids[cell])

    def _answer():
        status, body = cloud.healthz()
        if not seen or seen[-1] != (status, body):
            seen.append((status, body))
        named = any(n in body for n in names) and "unreachable" in body.lower()
        return status == 503 and named and body
    try:
        return novacloud.wait_until(_answer, timeout, 0.25, "nova-sched /healthz")
    except TimeoutError as err:
        raise AssertionError(f"{err}: wanted 503 naming {names} unreachable, "
                             f"answers seen {seen}") from None


@nova_sched_only
def test_cell2s_database_unreachable_leaves_cell1_served(scenario, tiny):
    """With cell2's database cut from every reader of its mapping, /healthz
    names cell2 and a boot is served in cell1; once the database is back,
    /healthz is 200 and cell2 is served again."""
    cloud = scenario.cloud
    proxy = cloud.cell_db_proxies["cell2"]
    zone2 = scenario.zone("az-cell2", ["c2-small", "c2-medium"])
    wait_health(cloud, True)
    proxy.stop()
    try:
        reason = wait_cell_unreachable(cloud, "cell2")
        print(f"/healthz with cell2's database cut: {reason}")

        # A choice in cell2 would leave the server in BUILD for good (the
        # superconductor cannot create it there): a minute is plenty.
        server = scenario.api.wait_final(scenario.api.boot(tiny["id"])["id"], 60)

        scenario.assert_in_cell(server, "cell1")
        scenario.assert_allocated_as_flavor(server, tiny["id"])
        assert cloud.healthz()[0] == 503, "healthy again with cell2 still cut"
    finally:
        proxy.start()
    wait_health(cloud, True, timeout=30)

    server = scenario.boot(tiny["id"], availability_zone=zone2)

    scenario.assert_in_cell(server, "cell2")
    scenario.assert_allocated_as_flavor(server, tiny["id"])
