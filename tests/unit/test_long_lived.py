"""LongLived: the daemon's long-lived objects out of the collector's full
passes, and cyclic garbage among them still collected when it settles."""

from __future__ import annotations

import gc
import logging
import re
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


def _cycle() -> tuple[_Node, weakref.ref]:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return a, weakref.ref(a)


class _Table:
    def __init__(self, hosts: int):
        self.index = dict.fromkeys(range(hosts))


def test_cyclic_garbage_among_frozen_objects_waits_for_the_settle(caplog):
    keeper = LongLived()
    table = _Table(10)
    held, alive = _cycle()
    keeper.freeze(table)
    assert gc.get_freeze_count() > 0
    del held  # garbage now, in a cycle only the collector frees
    gc.collect()
    assert alive() is not None, "a frozen cycle is not walked by a collection"
    with caplog.at_level(logging.INFO, logger="nova_sched.long_lived"):
        keeper.settle(table)
    assert alive() is None, "settling lets the collector see every object once"
    assert gc.get_freeze_count() > 0, "and freezes the survivors again"
    found = re.search(r"; (\d+) unreachable objects collected", caplog.text)
    assert found and int(found.group(1)) >= 2, "the log says what it found"


def test_freezing_again_collects_the_young_garbage_first():
    keeper = LongLived()
    held, alive = _cycle()
    del held
    keeper.freeze(_Table(10))
    assert alive() is None, "garbage made since the last freeze is not frozen"


def test_newcomers_are_frozen_when_many_hosts_joined_and_everything_settled_now_and_then():
    clock = _Clock()
    keeper = LongLived(clock=clock)
    table = _Table(0)
    assert keeper.due(table) == "freeze", "never frozen"
    keeper.freeze(table)
    table.index.update(dict.fromkeys(range(999)))
    assert keeper.due(table) is None, "a few hosts joining are not worth a freeze"
    table.index.update(dict.fromkeys(range(10_000)))
    assert keeper.settle_if_due(table) == "freeze"
    table.index.update(dict.fromkeys(range(12_000)))
    assert keeper.due(table) is None, "a fifth more is not a quarter"
    table.index.update(dict.fromkeys(range(12_500)))
    assert keeper.due(table) == "freeze"
    keeper.freeze(table)
    # A full resync builds a new table: every host's state is new.
    rebuilt = _Table(12_500)
    assert keeper.settle_if_due(rebuilt) == "freeze"
    clock.now += long_lived._RESETTLE_SECONDS - 1
    assert keeper.settle_if_due(rebuilt) is None
    clock.now += 1
    assert keeper.settle_if_due(rebuilt) == "settle", (
        "cyclic garbage is collected at least this often")
    assert keeper.due(rebuilt) is None
