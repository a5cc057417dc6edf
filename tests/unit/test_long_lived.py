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
    table = _Table(10)
    keeper.freeze(table)
    assert gc.get_freeze_count() > 0
    gc.collect()
    assert alive() is not None, "a frozen cycle is not walked by a collection"
    keeper.settle(table)
    assert alive() is None, "settling lets the collector see every object once"
    assert gc.get_freeze_count() > 0, "and freezes the survivors again"


class _Table:
    def __init__(self, hosts: int):
        self.index = dict.fromkeys(range(hosts))


def test_settling_is_due_after_a_rebuild_when_many_hosts_joined_or_after_a_while():
    clock = _Clock()
    keeper = LongLived(clock=clock)
    table = _Table(0)
    assert keeper.due(table), "never settled"
    keeper.freeze(table)
    table.index.update(dict.fromkeys(range(999)))
    assert not keeper.due(table), "a few hosts joining are not worth a full pass"
    table.index.update(dict.fromkeys(range(10_000)))
    assert keeper.settle_if_due(table)
    table.index.update(dict.fromkeys(range(12_000)))
    assert not keeper.due(table), "a fifth more is not a quarter"
    table.index.update(dict.fromkeys(range(12_500)))
    assert keeper.due(table)
    keeper.settle(table)
    # A full resync builds a new table: every host's state is new.
    rebuilt = _Table(12_500)
    assert keeper.due(rebuilt)
    keeper.settle(rebuilt)
    clock.now += long_lived._RESETTLE_SECONDS - 1
    assert not keeper.settle_if_due(rebuilt)
    clock.now += 1
    assert keeper.settle_if_due(rebuilt), "cyclic garbage is collected at least this often"
