"""Every move of a nova cloud through nova's REST API, with nova-sched in
place of nova-scheduler (issue 40, items 2-4).

One cloud of nova 34 + Placement 16 for the module
(tests/functional/novacloud.py), two cells, the scheduler chosen by
``$NOVA_SCHED_CLOUD_SCHEDULER`` as in test_nova_cloud (``nova-sched`` by
default, ``nova-scheduler`` the reference every scenario passes against).
Each move is checked against Placement as nova leaves it: the instance's
consumer and the migration's (``GET /allocations/{migration uuid}``), on
the source and the destination.

The computes (Placement ratios 1.0, exact counts), every VM host with
tests/functional/plugins/move_drivers.py's drivers, whose live migration
pre-check refuses an instance on the hosts its metadata
``refuse_live_migration_on`` names:

- cell1: ``a1``, ``a2`` (10 vCPU, 8 GB each), ``a3`` (2 vCPU, 8 GB) and
  ``ironic`` (provider_tree_drivers.BaremetalDriver: one service, three
  bare metal nodes ``ironic-gold-0``, ``ironic-gold-1``, ``ironic-silver-0``);
- cell2: ``b1``, ``b2`` (10 vCPU, 4 GB usable: the rest reserved, so that
  RAM-spreading weighers always prefer cell1's hosts and a move that left
  its cell would be seen).

nova.conf sets ``allow_resize_to_same_host`` (a resize may stay on its
host; a cold migration still may not: nova's fake drivers do not report
COMPUTE_SAME_HOST_COLD_MIGRATE), ``shelved_offload_time = 0`` (a shelved
server is offloaded at once) and ``migrate_max_retries = 1`` (a live
migration tries two destinations). Each test starts from an empty cloud
and leaves it empty: servers deleted, usage zero, computes running,
services enabled and not forced down.

Set ``NOVA_SCHED_TEST_DIR`` to keep the processes' logs.
"""

from __future__ import annotations

import time
import uuid

import pytest

import novacloud
import novacloud_stubs
from novacloud import fault_of, host_of
from test_nova_cloud import (NO_VALID_HOST, SCHEDULER, Scenario, module_cloud,
                             scenario_in)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MOVE = "move_drivers."
# Usable RAM of cell2's hosts (MediumFakeDriver's 8 GB less the reserve).
CELL2_USABLE_MB = 4096
CELL1_VM_HOSTS = ("a1", "a2", "a3")
CELL2_VM_HOSTS = ("b1", "b2")
COMPUTES = {
    "a1": {"driver": MOVE + "MediumMoveDriver"},
    "a2": {"driver": MOVE + "MediumMoveDriver"},
    "a3": {"driver": MOVE + "SmallMoveDriver"},
    **{host: {"driver": MOVE + "MediumMoveDriver", "cell": "cell2",
              "reserved_host_memory_mb": 8192 - CELL2_USABLE_MB,
              # A cell without the API database (novacloud's cell2, as a
              # split deployment) cannot make the late group check's upcall
              # (InstanceGroup.get_by_instance_uuid), which every live
              # migration's destination pre-check makes: nova's cells
              # documentation says to disable it there.
              "groups": {"workarounds": {"disable_group_policy_check_upcall": True}}}
       for host in CELL2_VM_HOSTS},
}
IRONIC = "ironic"
IRONIC_NODES = {"ironic-gold-0": "CUSTOM_BAREMETAL_GOLD",
                "ironic-gold-1": "CUSTOM_BAREMETAL_GOLD",
                "ironic-silver-0": "CUSTOM_BAREMETAL_SILVER"}
MIGRATE_MAX_RETRIES = 1
NOVA_OVERRIDES = {"DEFAULT": {"allow_resize_to_same_host": True,
                              "shelved_offload_time": 0,
                              "migrate_max_retries": MIGRATE_MAX_RETRIES}}
REFUSE_KEY = "refuse_live_migration_on"     # move_drivers.REFUSE_KEY
XEN_IMAGE = next(image for image, props in novacloud_stubs.IMAGE_PROPERTIES.items()
                 if props.get("hypervisor_type") == "xen")
PRECHECK_EVENT = "compute_check_can_live_migrate_destination"
# A migration that is over, one way or the other.
MIGRATION_OVER = ("completed", "done", "error", "failed", "confirmed", "reverted",
                  "finished")


# -- nova's REST calls this module needs besides ComputeClient's ----------------
def live_migrate(api: novacloud.ComputeClient, server_id: str,
                 host: str | None = None) -> None:
    """``os-migrateLive`` (2.90: asynchronous, never forced; a host is a
    request that the scheduler still judges)."""
    api.action(server_id, "os-migrateLive", {"host": host, "block_migration": "auto"})


def evacuate(api: novacloud.ComputeClient, server_id: str,
             host: str | None = None) -> None:
    api.action(server_id, "evacuate", {"host": host} if host else {})


def resize(api: novacloud.ComputeClient, server_id: str, flavor_id: str) -> None:
    api.action(server_id, "resize", {"flavorRef": flavor_id})


def rebuild(api: novacloud.ComputeClient, server_id: str, image_id: str) -> None:
    api.action(server_id, "rebuild", {"imageRef": image_id})


def set_forced_down(api: novacloud.ComputeClient, host: str, forced: bool) -> None:
    """``PUT /os-services/{id}`` with ``forced_down`` (2.53 and later)."""
    service = api.compute_services()[host]
    api.put(f"/os-services/{service['id']}", {"forced_down": forced})


def set_metadata(api: novacloud.ComputeClient, server_id: str, metadata: dict) -> None:
    api.post(f"/servers/{server_id}/metadata", {"metadata": metadata})


def api_error(call, *args) -> novacloud.ApiError:
    """The error nova's API answers ``call(*args)`` with (it must refuse)."""
    with pytest.raises(novacloud.ApiError) as caught:
        call(*args)
    return caught.value


# -- the cloud ------------------------------------------------------------------
def start_cloud(cloud: novacloud.NovaCloud, scheduler: str) -> None:
    """``start`` with the VM hosts, then the bare metal host: its providers
    are named after its nodes, not after the host that ``discover_hosts``
    waits for."""
    cloud.start(COMPUTES, scheduler=scheduler)
    started = cloud.timings["start"]
    t0 = time.monotonic()
    cloud.start_compute(IRONIC, "provider_tree_drivers.BaremetalDriver")

    def _nodes():
        cloud.assert_running()
        names = cloud.placement.providers()
        return (set(IRONIC_NODES) <= set(names)
                and all(cloud.placement.inventories(names[n]) for n in IRONIC_NODES))
    try:
        novacloud.wait_until(_nodes, 120, 0.5, f"providers {sorted(IRONIC_NODES)}")
        cloud.nova_manage("cell_v2", "discover_hosts")
        novacloud.wait_until(
            lambda: cloud.api.compute_services().get(IRONIC, {}).get("state") == "up",
            120, 0.5, "the ironic compute service up")
    except TimeoutError as err:
        raise novacloud.CloudError(f"{err}\n{cloud.log_tails()}") from None
    cloud.timings["start"] = started + time.monotonic() - t0


@pytest.fixture(scope="module")
def moves_cloud(rabbitmq, workdir, nova_venv):
    def _make():
        return novacloud.NovaCloud(workdir("moves_cloud"), venv=nova_venv,
                                   nova_overrides=NOVA_OVERRIDES, cells=2)
    yield from module_cloud(_make, SCHEDULER, lambda cloud: start_cloud(cloud, SCHEDULER))


@pytest.fixture(scope="module")
def tiny(moves_cloud):
    """1 vCPU, 256 MB, 1 GB."""
    return moves_cloud.api.create_flavor("tiny", vcpus=1, ram=256, disk=1)


class MoveScenario(Scenario):
    """test_nova_cloud's Scenario with moves: computes stopped and forced
    down are started again and un-forced at the end, before the servers go."""

    def __init__(self, cloud: novacloud.NovaCloud):
        super().__init__(cloud)
        self.stopped: list[str] = []
        self.forced_down: list[str] = []

    # -- building blocks ------------------------------------------------------
    def flavor_of(self, vcpus: int, ram: int = 256, disk: int = 1,
                  extra_specs: dict | None = None) -> dict:
        flavor = self.api.create_flavor(f"f-{uuid.uuid4().hex[:6]}",
                                        vcpus=vcpus, ram=ram, disk=disk,
                                        extra_specs=extra_specs)
        self.flavors.append(flavor["id"])
        return flavor

    def boot_on(self, flavor: dict, host: str, node: str | None = None,
                **kwargs) -> dict:
        """A server forced onto ``host`` (and ``node``) as an admin does,
        ACTIVE there."""
        zone = f"nova:{host}" + (f":{node}" if node else "")
        server = self.boot(flavor["id"], availability_zone=zone, **kwargs)
        assert server["status"] == "ACTIVE" and host_of(server) == host, \
            self.why(server)
        return server

    def down(self, host: str) -> None:
        """The compute stopped and forced down, as an operator does before
        evacuating it."""
        self.cloud.stop(f"nova-compute-{host}", timeout=30)
        self.stopped.append(host)
        set_forced_down(self.api, host, True)
        self.forced_down.append(host)
        self.wait_service(host, "down", 30)

    def restart(self, host: str) -> None:
        """The stopped compute started again (still forced down)."""
        self.cloud.restart_compute(host)
        self.stopped.remove(host)

    def unforce(self, host: str) -> None:
        set_forced_down(self.api, host, False)
        self.forced_down.remove(host)
        self.wait_service(host, "up", 60)

    def wait_service(self, host: str, state: str, timeout: float) -> None:
        """Until nova's API says ``host``'s compute service is ``state``,
        then until the scheduler has read it."""
        novacloud.wait_until(
            lambda: self.api.compute_services()[host]["state"] == state, timeout, 0.5,
            f"{host} {state}")
        self.cloud.settle()

    # -- what nova and Placement say --------------------------------------------
    def flavor_resources(self, flavor: dict) -> dict[str, int]:
        return {"VCPU": flavor["vcpus"], "MEMORY_MB": flavor["ram"],
                "DISK_GB": flavor["disk"]}

    def migration(self, server_id: str) -> dict | None:
        """The server's latest migration (any kind), or None."""
        listed = self.api.migrations(server_id)
        return max(listed, key=lambda m: m["id"]) if listed else None

    def moves(self, server_id: str) -> int:
        """The id of the server's latest migration (0: none yet), to wait
        for the next one after it."""
        migration = self.migration(server_id)
        return migration["id"] if migration else 0

    def wait_migration(self, server_id: str, statuses=MIGRATION_OVER,
                       timeout: float = 60, after: int = 0) -> dict:
        """Until the server's latest migration, newer than the migration
        ``after`` (conductor makes it after the API has answered), has one
        of ``statuses``."""
        def _over():
            migration = self.migration(server_id)
            if migration and migration["id"] > after and migration["status"] in statuses:
                return migration
            return None
        try:
            return novacloud.wait_until(_over, timeout, 0.5,
                                        f"migration of {server_id} in {statuses}")
        except TimeoutError as err:
            raise AssertionError(f"{err}: last {self.migration(server_id)}\n"
                                 f"{self.why()}") from None

    def wait_allocations(self, consumer: str, want: dict, what: str,
                         timeout: float = 30) -> None:
        """Until ``consumer``'s allocations (host name -> resources) are ``want``."""
        try:
            novacloud.wait_until(lambda: self.allocations(consumer) == want, timeout,
                                 0.5, what)
        except TimeoutError as err:
            raise AssertionError(f"{err}: {self.allocations(consumer)} instead of "
                                 f"{want}\n{self.why()}") from None

    def wait_released(self, migration: dict) -> None:
        """Until a completed live migration's consumer (the source's
        allocation) is gone: nova's source compute saves the migration
        'completed' and only then deletes that consumer."""
        self.wait_allocations(migration["uuid"], {},
                              "the migration's consumer (the source) released")

    def precheck_hosts(self, server_id: str) -> list[str]:
        """The hosts where a destination pre-check of the server's live
        migrations ran, sorted. Only the hosts: nova finishes an event by
        its action and name, so a second pre-check in one migration writes
        its result into the first one's row (seen: the refusing host's
        event 'Success', the accepting one's never finished)."""
        return sorted(e.get("host") for a in self.api.instance_actions(server_id)
                      for e in a.get("events", []) if e["event"] == PRECHECK_EVENT)

    def assert_unmoved(self, server: dict, host: str, flavor: dict) -> dict:
        """ACTIVE on ``host`` with no task, its allocation there only; returns it."""
        server = self.api.wait_status(server["id"], ["ACTIVE"])
        assert server["status"] == "ACTIVE" and host_of(server) == host, self.why(server)
        assert self.allocations(server["id"]) == {host: self.flavor_resources(flavor)}, \
            self.why(server)
        return server

    def assert_failed_live_migration(self, server: dict, host: str, flavor: dict,
                                     after: int = 0) -> None:
        """The live migration (the one after migration ``after``) ended in
        error, the server ACTIVE on ``host`` as before it, nothing held by
        the migration."""
        # Conductor saves "failed" when the retries run out, then "error"
        # as it handles the MaxRetriesExceeded: wait for the last.
        migration = self.wait_migration(server["id"], ("error",), after=after)
        assert migration["migration_type"] == "live-migration", migration
        self.assert_unmoved(server, host, flavor)
        assert self.allocations(migration["uuid"]) == {}, self.why(server)

    # -- the end ------------------------------------------------------------
    def undo(self) -> None:
        """Computes started again and un-forced, then test_nova_cloud's undo."""
        for host in list(self.stopped):
            self.restart(host)
        for host in list(self.forced_down):
            # nova refuses to un-force a compute until, started again, it has
            # completed its evacuations.
            novacloud.wait_until(lambda: _unforced(self.api, host), 120, 1,
                                 f"{host} no longer forced down")
            self.forced_down.remove(host)
            self.wait_service(host, "up", 60)
        super().undo()
        services = self.api.compute_services()
        assert all(s["state"] == "up" and s["status"] == "enabled"
                   and not s.get("forced_down") for s in services.values()), services


def _unforced(api: novacloud.ComputeClient, host: str) -> bool:
    """Whether nova took ``forced_down: false`` for the host."""
    try:
        set_forced_down(api, host, False)
    except novacloud.ApiError as err:
        if err.status != 400:
            raise
        return False
    return True


@pytest.fixture
def scenario(moves_cloud, tiny):
    yield from scenario_in(moves_cloud, MoveScenario)


def cell_of(cloud: novacloud.NovaCloud, host: str) -> str:
    return getattr(cloud, "compute_cells", {}).get(host, "cell1")


# -- 1. live migration -----------------------------------------------------------
def test_a_live_migration_without_a_host_goes_to_another_host_of_its_cell(
        scenario, tiny):
    """The scheduler picks; never the source; the instance's consumer on the
    destination only once it is over, the migration's consumer gone."""
    # cell1's hosts have twice the free RAM: only the cell keeps b1's in cell2.
    servers = [scenario.boot_on(tiny, "a1"), scenario.boot_on(tiny, "b1")]
    flavor = scenario.flavor_resources(tiny)

    for server in servers:
        source = host_of(server)
        live_migrate(scenario.api, server["id"])
        moved = scenario.api.wait_status(server["id"], ["ACTIVE"])
        migration = scenario.wait_migration(server["id"])

        assert migration["status"] == "completed", f"{migration}\n{scenario.why(moved)}"
        dest = host_of(moved)
        assert dest != source, scenario.why(moved)
        cell = cell_of(scenario.cloud, source)
        assert cell_of(scenario.cloud, dest) == cell, \
            f"moved from {source} ({cell}) to {dest}\n{scenario.why(moved)}"
        assert migration["source_compute"] == source and migration["dest_compute"] == dest
        scenario.wait_allocations(server["id"], {dest: flavor}, "instance on dest only")
        scenario.wait_released(migration)
        assert scenario.usage(source)["VCPU"] == 0


def test_a_refused_live_migration_precheck_is_retried_elsewhere_up_to_max_retries(
        scenario, tiny):
    """conductor removes the claim on a host whose pre-check refuses and asks
    again (ignoring it), ``migrate_max_retries`` times at most; a refusal
    leaves nothing on the refusing host."""
    # a3 holds a filler: a2 has the most free RAM of the cell and RAM
    # spreading takes it first.
    filler = scenario.flavor_of(vcpus=1, ram=2048)
    scenario.boot_on(filler, "a3")
    flavor = scenario.flavor_resources(tiny)
    filled = {"a3": scenario.usage("a3")}

    server = scenario.boot_on(tiny, "a1")
    set_metadata(scenario.api, server["id"], {REFUSE_KEY: "a2"})
    live_migrate(scenario.api, server["id"])
    moved = scenario.api.wait_status(server["id"], ["ACTIVE"])
    migration = scenario.wait_migration(server["id"])

    assert migration["status"] == "completed", f"{migration}\n{scenario.why(moved)}"
    assert host_of(moved) == "a3", scenario.why(moved)
    # a2 refused (its metadata says so) and a3 took it: conductor retried.
    prechecks = scenario.precheck_hosts(server["id"])
    assert prechecks == ["a2", "a3"], f"pre-checks on {prechecks}\n{scenario.why(moved)}"
    scenario.wait_allocations(server["id"], {"a3": flavor}, "instance on a3 only")
    scenario.wait_released(migration)
    assert scenario.usage("a2")["VCPU"] == 0
    scenario.api.delete_server(server["id"])
    scenario.api.wait_gone([server["id"]])

    # Both other hosts refuse: two tries (migrate_max_retries = 1), then
    # MaxRetriesExceeded (a NoValidHost), the server where it was.
    server = scenario.boot_on(tiny, "a1")
    set_metadata(scenario.api, server["id"], {REFUSE_KEY: "a2,a3"})
    live_migrate(scenario.api, server["id"])

    scenario.assert_failed_live_migration(server, "a1", tiny)
    prechecks = scenario.precheck_hosts(server["id"])
    assert prechecks == ["a2", "a3"], f"pre-checks on {prechecks}\n{scenario.why(server)}"
    assert len(prechecks) == MIGRATE_MAX_RETRIES + 1
    assert scenario.usage("a2")["VCPU"] == 0
    assert scenario.usage("a3") == filled["a3"], scenario.why(server)


def test_a_live_migration_to_a_named_host_is_judged_by_the_filters_and_the_claim(
        scenario, tiny):
    """Not forced (2.68 and later): the named host is a requested destination
    the scheduler still filters and claims on; one that cannot take the
    server fails the migration (NoValidHost) and nothing changes."""
    flavor = scenario.flavor_resources(tiny)
    server = scenario.boot_on(tiny, "a1")

    live_migrate(scenario.api, server["id"], "a3")
    moved = scenario.api.wait_status(server["id"], ["ACTIVE"])
    migration = scenario.wait_migration(server["id"])

    assert migration["status"] == "completed", f"{migration}\n{scenario.why(moved)}"
    assert host_of(moved) == "a3", scenario.why(moved)
    scenario.wait_allocations(server["id"], {"a3": flavor}, "instance on a3 only")
    scenario.wait_released(migration)

    # a2 with all but 128 MB taken cannot hold the server's 256 MB.
    filler = scenario.flavor_of(vcpus=1, ram=8192 - 128)
    scenario.boot_on(filler, "a2")
    used = scenario.usage("a2")
    before = scenario.moves(server["id"])

    live_migrate(scenario.api, server["id"], "a2")

    scenario.assert_failed_live_migration(server, "a3", tiny, after=before)
    assert scenario.usage("a2") == used
    assert scenario.precheck_hosts(server["id"]) == ["a3"], \
        "a pre-check on a host the scheduler refused"


def test_a_live_migration_to_a_host_of_another_cell_is_refused(scenario, tiny):
    """nova looks the named host up in the instance's cell: 400, nothing moves."""
    server = scenario.boot_on(tiny, "a1")

    error = api_error(live_migrate, scenario.api, server["id"], "b1")

    assert error.status == 400, error
    scenario.assert_unmoved(server, "a1", tiny)
    assert scenario.migration(server["id"]) is None


# -- 2. evacuation -------------------------------------------------------------------
def test_evacuation_of_a_forced_down_compute_and_the_source_cleanup(scenario, tiny):
    """The instance's consumer holds the source and the new host while the
    source is down (evacuation has no migration consumer); the source's
    compute, started again, removes its part and completes the migration;
    nova refuses to un-force it before that."""
    flavor = scenario.flavor_resources(tiny)
    anywhere = scenario.boot_on(tiny, "a1")
    named = scenario.boot_on(tiny, "a1")

    scenario.down("a1")
    evacuate(scenario.api, anywhere["id"])
    evacuate(scenario.api, named["id"], "a3")
    anywhere = scenario.api.wait_status(anywhere["id"], ["ACTIVE"])
    named = scenario.api.wait_status(named["id"], ["ACTIVE"])

    assert anywhere["status"] == "ACTIVE", scenario.why(anywhere)
    assert named["status"] == "ACTIVE", scenario.why(named)
    assert host_of(anywhere) in ("a2", "a3"), scenario.why(anywhere)
    assert host_of(named) == "a3", scenario.why(named)
    migrations = {}
    for server in (anywhere, named):
        migration = scenario.wait_migration(server["id"], ("done",))
        assert migration["migration_type"] == "evacuation", migration
        assert migration["dest_compute"] == host_of(server), migration
        migrations[server["id"]] = migration
        assert scenario.allocations(server["id"]) == {
            "a1": flavor, host_of(server): flavor}, scenario.why(server)
        assert scenario.allocations(migration["uuid"]) == {}
    assert scenario.usage("a1")["VCPU"] == 2

    # nova keeps the source forced down until its compute has cleaned up.
    error = api_error(set_forced_down, scenario.api, "a1", False)
    assert error.status == 400, error

    scenario.restart("a1")
    for server in (anywhere, named):
        scenario.wait_allocations(server["id"], {host_of(server): flavor},
                                  "the source's part removed by its compute", 120)
        migration = scenario.wait_migration(server["id"], ("completed",))
        assert migration["id"] == migrations[server["id"]]["id"]
    assert scenario.usage("a1")["VCPU"] == 0
    scenario.unforce("a1")


# -- 3. resize -------------------------------------------------------------------------
def test_a_resize_to_a_larger_flavor_confirmed_then_another_reverted(scenario, tiny):
    """While unconfirmed, the instance's consumer holds the new flavor on
    the destination and the migration's the old one on the source; confirm
    frees the source, revert goes back to the old flavor on the source."""
    old = scenario.flavor_resources(tiny)
    server = scenario.boot_on(tiny, "a3")
    # 4 vCPU: more than a3 has, so another host of cell1 (a1 or a2).
    bigger = scenario.flavor_of(vcpus=4)

    resize(scenario.api, server["id"], bigger["id"])
    server = scenario.api.wait_status(server["id"], ["VERIFY_RESIZE"])

    assert server["status"] == "VERIFY_RESIZE", scenario.why(server)
    dest = host_of(server)
    assert dest in ("a1", "a2"), scenario.why(server)
    migration = scenario.migration(server["id"])
    assert migration["migration_type"] == "resize", migration
    assert scenario.allocations(server["id"]) == {
        dest: scenario.flavor_resources(bigger)}, scenario.why(server)
    assert scenario.allocations(migration["uuid"]) == {"a3": old}, scenario.why(server)

    scenario.api.confirm_resize(server["id"])
    server = scenario.api.wait_status(server["id"], ["ACTIVE"])

    assert host_of(server) == dest and server["flavor"]["vcpus"] == 4, scenario.why(server)
    scenario.wait_allocations(migration["uuid"], {}, "the source released")
    assert scenario.allocations(server["id"]) == {dest: scenario.flavor_resources(bigger)}
    assert scenario.usage("a3")["VCPU"] == 0

    # 8 vCPU: neither the same host (4 + 8 > 10) nor a3: the other 10-vCPU host.
    biggest = scenario.flavor_of(vcpus=8)
    other = ({"a1", "a2"} - {dest}).pop()
    resize(scenario.api, server["id"], biggest["id"])
    server = scenario.api.wait_status(server["id"], ["VERIFY_RESIZE"])

    assert host_of(server) == other, scenario.why(server)
    migration = scenario.migration(server["id"])
    assert scenario.allocations(server["id"]) == {
        other: scenario.flavor_resources(biggest)}, scenario.why(server)
    assert scenario.allocations(migration["uuid"]) == {
        dest: scenario.flavor_resources(bigger)}, scenario.why(server)

    scenario.api.action(server["id"], "revertResize")
    server = scenario.api.wait_status(server["id"], ["ACTIVE"])

    assert host_of(server) == dest and server["flavor"]["vcpus"] == 4, scenario.why(server)
    scenario.wait_allocations(server["id"], {dest: scenario.flavor_resources(bigger)},
                              "the old flavor back on the source")
    scenario.wait_allocations(migration["uuid"], {}, "the migration's consumer gone")
    assert scenario.usage(other)["VCPU"] == 0


def test_a_resize_to_the_same_host_when_allowed(scenario, tiny):
    """``allow_resize_to_same_host``: in a zone of one host the resize stays;
    the host then holds both consumers until the confirmation."""
    zone = scenario.zone("az-same", ["a3"])
    server = scenario.boot(tiny["id"], availability_zone=zone)
    assert server["status"] == "ACTIVE" and host_of(server) == "a3", scenario.why(server)
    # 1 vCPU more RAM: fits on a3 (2 vCPU) beside the old flavor.
    larger = scenario.flavor_of(vcpus=1, ram=512)

    resize(scenario.api, server["id"], larger["id"])
    server = scenario.api.wait_status(server["id"], ["VERIFY_RESIZE"])

    assert server["status"] == "VERIFY_RESIZE" and host_of(server) == "a3", \
        scenario.why(server)
    migration = scenario.migration(server["id"])
    assert migration["source_compute"] == migration["dest_compute"] == "a3", migration
    assert scenario.allocations(server["id"]) == {
        "a3": scenario.flavor_resources(larger)}, scenario.why(server)
    assert scenario.allocations(migration["uuid"]) == {
        "a3": scenario.flavor_resources(tiny)}, scenario.why(server)

    scenario.api.confirm_resize(server["id"])
    server = scenario.api.wait_status(server["id"], ["ACTIVE"])

    assert host_of(server) == "a3", scenario.why(server)
    scenario.wait_allocations(migration["uuid"], {}, "the old flavor released")
    assert scenario.usage("a3") == scenario.flavor_resources(larger)


# -- 4. unshelve -----------------------------------------------------------------------
def test_an_offloaded_server_holds_nothing_and_is_scheduled_again_on_unshelve(
        scenario, tiny):
    """``shelved_offload_time = 0``: shelved, then offloaded at once (no
    host, no allocation); unshelve asks the scheduler for a host of the
    server's cell and claims there."""
    flavor = scenario.flavor_resources(tiny)
    servers = [scenario.boot_on(tiny, "a1"), scenario.boot_on(tiny, "b1")]

    for server in servers:
        cell = cell_of(scenario.cloud, host_of(server))
        scenario.api.action(server["id"], "shelve")
        shelved = scenario.api.wait_status(server["id"], ["SHELVED_OFFLOADED"])

        assert shelved["status"] == "SHELVED_OFFLOADED", scenario.why(shelved)
        assert host_of(shelved) is None
        scenario.wait_allocations(server["id"], {}, "the offloaded server's allocation gone")

        scenario.api.action(server["id"], "unshelve")
        back = scenario.api.wait_status(server["id"], ["ACTIVE"])

        assert back["status"] == "ACTIVE", scenario.why(back)
        assert cell_of(scenario.cloud, host_of(back)) == cell, scenario.why(back)
        assert scenario.allocations(server["id"]) == {host_of(back): flavor}, \
            scenario.why(back)
    assert sum(scenario.usage(h)["VCPU"] for h in (*CELL1_VM_HOSTS, *CELL2_VM_HOSTS)) \
        == len(servers)


# -- 5. rebuild ------------------------------------------------------------------------
def test_a_rebuild_with_a_new_image_stays_claims_nothing_and_is_refused_by_the_filters(
        scenario, tiny):
    """A new image makes nova ask the scheduler (the host forced, the
    rebuild's filters only, no claim); the server stays with its allocation
    unchanged. An image the host cannot run (a Xen image on fake hosts:
    ImagePropertiesFilter) fails the rebuild with NoValidHost."""
    flavor = scenario.flavor_resources(tiny)
    server = scenario.boot_on(tiny, "a2")
    usages = scenario.cloud.usage_by_host()

    rebuild(scenario.api, server["id"], novacloud_stubs.REBUILD_IMAGE_ID)
    rebuilt = scenario.api.wait_status(server["id"], ["ACTIVE"])

    assert rebuilt["status"] == "ACTIVE" and host_of(rebuilt) == "a2", scenario.why(rebuilt)
    assert rebuilt["image"]["id"] == novacloud_stubs.REBUILD_IMAGE_ID
    assert scenario.allocations(server["id"]) == {"a2": flavor}, scenario.why(rebuilt)
    assert scenario.cloud.usage_by_host() == usages

    rebuild(scenario.api, server["id"], XEN_IMAGE)
    refused = scenario.api.wait_status(server["id"], ["ERROR"])

    assert refused["status"] == "ERROR", scenario.why(refused)
    assert NO_VALID_HOST in fault_of(refused), scenario.why(refused)
    assert host_of(refused) == "a2"
    # The rebuild's image is rolled back.
    assert refused["image"]["id"] == novacloud_stubs.REBUILD_IMAGE_ID
    assert scenario.allocations(server["id"]) == {"a2": flavor}, scenario.why(refused)
    assert scenario.cloud.usage_by_host() == usages


# -- 6. server groups --------------------------------------------------------------------
def test_an_anti_affinity_member_is_never_moved_onto_another_members_host(
        scenario, tiny):
    """Members on a1 and a2, a3 full: a live migration and an evacuation of
    the a1 member have only a2 left, which holds the other member:
    NoValidHost both, nothing claimed."""
    group = scenario.group("anti-affinity")
    hints = {"group": group}
    member = scenario.boot_on(tiny, "a1", hints=hints)
    scenario.boot_on(tiny, "a2", hints=hints)
    full = scenario.flavor_of(vcpus=2)
    scenario.boot_on(full, "a3")
    usages = scenario.cloud.usage_by_host()

    live_migrate(scenario.api, member["id"])

    scenario.assert_failed_live_migration(member, "a1", tiny)
    assert scenario.precheck_hosts(member["id"]) == []
    assert scenario.cloud.usage_by_host() == usages

    before = scenario.moves(member["id"])
    scenario.down("a1")
    evacuate(scenario.api, member["id"])
    migration = scenario.wait_migration(member["id"], ("error", "failed", "done"),
                                        after=before)
    stranded = scenario.api.wait_status(member["id"], ["ERROR"])

    assert migration["migration_type"] == "evacuation", migration
    assert migration["status"] == "error", f"{migration}\n{scenario.why(stranded)}"
    # conductor sets ERROR on an evacuation the scheduler refuses (a live
    # migration goes back to ACTIVE).
    assert stranded["status"] == "ERROR" and host_of(stranded) == "a1", \
        scenario.why(stranded)
    assert NO_VALID_HOST in fault_of(stranded), scenario.why(stranded)
    assert scenario.allocations(member["id"]) == {
        "a1": scenario.flavor_resources(tiny)}, scenario.why(stranded)
    assert scenario.cloud.usage_by_host() == usages


def test_an_affinity_member_cannot_be_live_migrated_away_from_its_group(scenario, tiny):
    """The group's only host is the source, which a move ignores: the
    scheduler finds no host (with none named, or naming an empty one), so no
    destination's late group check ever runs."""
    group = scenario.group("affinity")
    hints = {"group": group}
    member = scenario.boot_on(tiny, "a1", hints=hints)
    scenario.boot_on(tiny, "a1", hints=hints)
    usages = scenario.cloud.usage_by_host()

    for host in (None, "a2"):
        before = scenario.moves(member["id"])
        live_migrate(scenario.api, member["id"], host)

        scenario.assert_failed_live_migration(member, "a1", tiny, after=before)
        assert scenario.precheck_hosts(member["id"]) == [], \
            "a destination was chosen for an affinity member"
        assert scenario.cloud.usage_by_host() == usages


# -- 7. bare metal ------------------------------------------------------------------------
def test_a_bare_metal_node_forced_rebuilt_and_not_live_migrated(scenario):
    """``nova:ironic:<node>`` lands on that node; a rebuild stays on it;
    a live migration finds no other host (every node is the source's
    service's) and claims nothing."""
    flavor = scenario.flavor_of(vcpus=1, ram=1024, disk=10, extra_specs={
        "resources:CUSTOM_BAREMETAL_GOLD": "1", "resources:VCPU": "0",
        "resources:MEMORY_MB": "0", "resources:DISK_GB": "0"})
    gold = {"CUSTOM_BAREMETAL_GOLD": 1}

    server = scenario.boot_on(flavor, IRONIC, "ironic-gold-1")

    assert server["OS-EXT-SRV-ATTR:hypervisor_hostname"] == "ironic-gold-1"
    assert scenario.allocations(server["id"]) == {"ironic-gold-1": gold}
    usages = scenario.cloud.usage_by_host()

    rebuild(scenario.api, server["id"], novacloud_stubs.REBUILD_IMAGE_ID)
    rebuilt = scenario.api.wait_status(server["id"], ["ACTIVE"])

    assert rebuilt["status"] == "ACTIVE", scenario.why(rebuilt)
    assert rebuilt["OS-EXT-SRV-ATTR:hypervisor_hostname"] == "ironic-gold-1"
    assert scenario.allocations(server["id"]) == {"ironic-gold-1": gold}
    assert scenario.cloud.usage_by_host() == usages

    live_migrate(scenario.api, server["id"])

    migration = scenario.wait_migration(server["id"])
    assert migration["status"] == "error", f"{migration}\n{scenario.why(rebuilt)}"
    after = scenario.api.wait_status(server["id"], ["ACTIVE"])
    assert after["OS-EXT-SRV-ATTR:hypervisor_hostname"] == "ironic-gold-1"
    assert scenario.allocations(server["id"]) == {"ironic-gold-1": gold}
    assert scenario.allocations(migration["uuid"]) == {}
    assert scenario.cloud.usage_by_host() == usages


# -- 8. bad input -------------------------------------------------------------------------
def test_a_move_to_a_host_that_does_not_exist_is_refused_by_the_api(scenario, tiny):
    """400 for a live migration, 404 for an evacuation (its host is looked
    up before the source's state); nothing moves. The cold migration's 400
    is test_nova_cloud_cells'."""
    server = scenario.boot_on(tiny, "a1")

    answers = {
        "live": api_error(live_migrate, scenario.api, server["id"], "nowhere"),
        "evacuate": api_error(evacuate, scenario.api, server["id"], "nowhere"),
    }

    assert {k: e.status for k, e in answers.items()} == {"live": 400, "evacuate": 404}, \
        answers
    scenario.assert_unmoved(server, "a1", tiny)
    assert scenario.migration(server["id"]) is None


def test_a_move_of_a_server_whose_allocation_vanished(scenario, tiny):
    """The server's allocation deleted in Placement behind nova's back: a
    cold migration finds nothing to move to a migration consumer and the
    destination's claim is the only allocation; so is a live migration's.
    Never a doubled or leaked allocation."""
    flavor = scenario.flavor_resources(tiny)
    server = scenario.boot_on(tiny, "a1")
    scenario.placement.delete(f"/allocations/{server['id']}")
    assert scenario.allocations(server["id"]) == {}

    scenario.api.migrate(server["id"])
    migrated = scenario.api.wait_status(server["id"], ["VERIFY_RESIZE"])

    assert migrated["status"] == "VERIFY_RESIZE", scenario.why(migrated)
    dest = host_of(migrated)
    assert dest in ("a2", "a3"), scenario.why(migrated)
    migration = scenario.migration(server["id"])
    assert scenario.allocations(server["id"]) == {dest: flavor}, scenario.why(migrated)
    assert scenario.allocations(migration["uuid"]) == {}, scenario.why(migrated)

    scenario.api.confirm_resize(server["id"])
    migrated = scenario.api.wait_status(server["id"], ["ACTIVE"])
    assert scenario.allocations(server["id"]) == {dest: flavor}
    assert scenario.usage("a1")["VCPU"] == 0

    scenario.placement.delete(f"/allocations/{server['id']}")
    before = scenario.moves(server["id"])
    live_migrate(scenario.api, server["id"])
    moved = scenario.api.wait_status(server["id"], ["ACTIVE"])
    migration = scenario.wait_migration(server["id"], after=before)

    assert migration["migration_type"] == "live-migration", migration
    assert migration["status"] == "completed", f"{migration}\n{scenario.why(moved)}"
    assert host_of(moved) != dest
    scenario.wait_allocations(server["id"], {host_of(moved): flavor},
                              "the destination's claim only")
    scenario.wait_released(migration)
    assert sum(scenario.usage(h)["VCPU"] for h in CELL1_VM_HOSTS) == 1
