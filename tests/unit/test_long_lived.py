"""LongLived: the daemon's long-lived objects out of the collector's full
passes, and cyclic garbage among them still collected when it settles."""

from __future__ import annotations

import gc
import weakref

import pytest

from nova_sched import long_lived
from nova_sched.long_lived import LongLived


class _Node:
    pass


@pytest.fixture(autouse=True)
def _unfrozen():
    # No automatic collection meanwhile: the test's garbage stays until
    # the test collects it.
    gc.disable()
    yield
    gc.unfreeze()
    gc.enable()


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _cycle() -> weakref.ref:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_frozen_objects_are_out_of_full_collections_until_it_settles():
    alive = _cycle()  # garbage already, in a cycle only the collector frees
    keeper = LongLived()
    keeper.freeze(hosts=10)
    assert gc.get_freeze_count() > 0
    gc.collect()
    assert alive() is not None, "a frozen cycle is not walked by a collection"
    keeper.settle(hosts=10)
    assert alive() is None, "settling lets the collector see every object once"
    assert gc.get_freeze_count() > 0, "and freezes the survivors again"


def test_settling_is_due_when_many_hosts_joined_or_after_a_while():
    clock = _Clock()
    keeper = LongLived(clock=clock)
    assert keeper.due(0), "never settled"
    keeper.freeze(hosts=0)
    assert not keeper.due(999), "a few hosts joining are not worth a full pass"
    assert keeper.settle_if_due(10_000)
    assert not keeper.due(12_000), "a fifth more is not a quarter"
    assert keeper.due(12_500)
    keeper.settle(12_500)
    clock.now += long_lived._RESETTLE_SECONDS - 1
    assert not keeper.settle_if_due(12_500)
    clock.now += 1
    assert keeper.settle_if_due(12_500), "cyclic garbage is collected at least this often"
