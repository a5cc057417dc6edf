"""AllHostsFilter keeps every host."""

from __future__ import annotations

from nova_sched.scheduler.filters.all_hosts_filter import AllHostsFilter
from tests.unit.scheduler import fakes


def test_every_host_passes():
    table = fakes.make_table([dict(host="a", disabled=True), dict(host="b", memory_mb=0)])
    spec = fakes.make_spec(memory_mb=10**6)
    flt = AllHostsFilter()
    assert fakes.passes(flt, table, spec) == [("a", "a"), ("b", "b")]
    assert all(flt.host_passes(st, spec) for st in table.states)
    assert flt.run_filter_once_per_request is True
