"""AllHostsFilter keeps every host."""

from __future__ import annotations

from nova_sched.scheduler.filters.all_hosts_filter import AllHostsFilter
from tests.unit.scheduler import fakes


def test_every_host_passes():
    table = fakes.make_table([dict(host="a", disabled=True), dict(host="b", memory_mb=0)])
    spec = fakes.make_spec(memory_mb=10**6)
    assert fakes.passes(AllHostsFilter(), table, spec) == [("a", "a"), ("b", "b")]
