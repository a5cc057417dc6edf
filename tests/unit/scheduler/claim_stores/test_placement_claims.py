"""Claims in Placement as nova's report client makes them (in-memory Placement)."""

from __future__ import annotations

import pytest

from nova_sched import exception
from nova_sched.scheduler.claim_stores.base import Claim
from nova_sched.scheduler.claim_stores.placement import PlacementClaims
from tests.unit.scheduler.fake_placement import FakePlacement

SRC, DST, OTHER = "rp-src", "rp-dst", "rp-other"
HOSTS = {SRC: ("src", 1), DST: ("dst", 2), OTHER: ("other", 3)}


@pytest.fixture
def placement():
    fake = FakePlacement()
    for rp in HOSTS:
        fake.add_provider(rp, vcpus=4, memory_mb=4096, disk_gb=40)
    return fake


@pytest.fixture
def store(placement):
    return PlacementClaims(placement, HOSTS.get)


def _claim(node_uuid, uuid="inst-1", vcpus=1, keep=()):
    return Claim(instance_uuid=uuid, node_id=HOSTS[node_uuid][1], memory_mb=512,
                 vcpus=vcpus, disk_mb=1024, node_uuid=node_uuid, project_id="p",
                 user_id="u", keep_on_hosts=frozenset(keep))


def test_new_consumer_is_claimed_with_a_null_generation(store, placement):
    store.claim(_claim(DST))
    (consumer, payload), = placement.puts
    assert consumer == "inst-1" and payload["consumer_generation"] is None
    assert payload["allocations"] == {DST: {"resources": {
        "VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}}}


def test_a_node_without_room_is_a_lost_claim(store, placement):
    with pytest.raises(exception.ClaimFailed, match="exceed the capacity"):
        store.claim(_claim(DST, vcpus=5))
    assert placement.consumers == {}


def test_evacuate_keeps_the_source_allocation(store, placement):
    """The instance holds its source node (ignored by the request): the
    claim doubles up, as nova's claim_resources does for a move."""
    store.claim(_claim(SRC))
    store.claim(_claim(DST, keep={"src"}))
    assert set(placement.consumers["inst-1"]["allocations"]) == {SRC, DST}
    # Giving the claim back restores the source allocation only.
    store.release(["inst-1"])
    assert set(placement.consumers["inst-1"]["allocations"]) == {SRC}


def test_a_request_delivered_again_replaces_its_earlier_claim(store, placement):
    store.claim(_claim(OTHER))
    store.claim(_claim(DST))
    assert set(placement.consumers["inst-1"]["allocations"]) == {DST}
    assert placement.used(OTHER, "VCPU") == 0


def test_a_consumer_changed_between_read_and_write_is_read_again(store, placement):
    real_get = placement.allocations_of
    calls = []

    def racing_get(consumer):
        result = real_get(consumer)
        if not calls:  # someone else writes the consumer right after our read
            placement.consumers[consumer] = {
                "allocations": {OTHER: {"resources": {"VCPU": 1}}}, "generation": 7}
        calls.append(consumer)
        return result

    placement.allocations_of = racing_get
    store.claim(_claim(DST))
    assert len(calls) == 2
    # Read again, the other writer's allocation is not a move's source: replaced.
    assert set(placement.consumers["inst-1"]["allocations"]) == {DST}
    assert placement.consumers["inst-1"]["generation"] == 8


def test_release_deletes_a_new_consumer_and_forget_leaves_placement_alone(store, placement):
    store.claim(_claim(DST, uuid="a"))
    store.claim(_claim(DST, uuid="b"))
    assert store.release(["a"]) == [2]
    assert "a" not in placement.consumers
    # nova's compute owns "b" now: a delete nova announces does not touch it.
    assert store.forget(["b"]) == []
    assert "b" in placement.consumers
    assert store.held_on_host("dst") == {}


def test_placement_down_is_not_a_lost_claim(store, placement):
    placement.down = True
    with pytest.raises(exception.PlacementUnavailable):
        store.claim(_claim(DST))
