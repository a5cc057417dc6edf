"""PciPassthroughFilter: flavor PCI aliases against reported pci_stats pools."""

from __future__ import annotations

import json

import pytest

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.scheduler.filters.pci_passthrough_filter import (
    PciPassthroughFilter, pools_satisfy)
from tests.unit.scheduler import fakes

NIC = {"vendor_id": "8086", "product_id": "154d"}
GPU = {"vendor_id": "10de", "product_id": "1eb8"}


def _aliases(*entries):
    CONF.set_override("alias", [json.dumps(e) for e in entries], "pci")


@pytest.fixture(autouse=True)
def aliases():
    _aliases(dict(name="nic", **NIC), dict(name="gpu", **GPU),
             dict(name="any-intel", vendor_id="8086"),
             dict(name="vf", device_type="type-VF", **NIC),
             dict(name="pf", device_type="type-PF", **NIC),
             # Two entries of one name are alternatives.
             dict(name="accel", **GPU), dict(name="accel", vendor_id="1af4",
                                            product_id="1041"))


def _pool(count, **tags):
    return dict(count=count, **tags)


def _hosts(table, alias_spec):
    extra = {} if alias_spec is None else {"pci_passthrough:alias": alias_spec}
    spec = fakes.make_spec(extra_specs=extra)
    flt = PciPassthroughFilter()
    kept = [h for h, _ in fakes.passes(flt, table, spec)]
    for row in table.active_rows():
        state = table.states[row]
        assert flt.host_passes(state, spec) == (state.host in kept)
    return kept


def _table():
    return fakes.make_table([
        dict(host="none"),
        dict(host="nic1", pci_stats=[_pool(1, **NIC)]),
        dict(host="nic2-split", pci_stats=[_pool(1, numa_node=0, **NIC),
                                           _pool(1, numa_node=1, **NIC)]),
        dict(host="nic0", pci_stats=[_pool(0, **NIC)]),
        dict(host="gpu2", pci_stats=[_pool(2, **GPU)]),
        dict(host="both", pci_stats=[_pool(3, **NIC), _pool(1, **GPU)]),
    ])


@pytest.mark.parametrize("alias_spec", [None, "", "  "])
def test_no_pci_request_passes_every_host(alias_spec):
    assert len(_hosts(_table(), alias_spec)) == 6


def test_one_device():
    assert _hosts(_table(), "nic:1") == ["nic1", "nic2-split", "both"]


def test_devices_are_counted_across_pools():
    assert _hosts(_table(), "nic:2") == ["nic2-split", "both"]
    assert _hosts(_table(), "nic:3") == ["both"]
    assert _hosts(_table(), "nic:4") == []


def test_several_aliases_must_all_be_served():
    assert _hosts(_table(), "nic:1,gpu:1") == ["both"]
    assert _hosts(_table(), " nic : 2 , gpu:1 ") == ["both"]
    assert _hosts(_table(), "gpu:2") == ["gpu2"]


def test_a_device_is_not_counted_twice():
    # any-intel also matches the NIC pool: 3 NICs cannot serve 2 + 2.
    assert _hosts(_table(), "nic:2,any-intel:1") == ["both"]
    assert _hosts(_table(), "nic:2,any-intel:2") == []
    # Naming one alias twice asks for two separate sets of devices.
    assert _hosts(_table(), "nic:2,nic:2") == []


def test_assignment_is_exact_not_greedy():
    # A greedy pass giving any-intel the first pool would leave nothing for
    # nic; an exact assignment serves both.
    table = fakes.make_table([
        dict(host="h", pci_stats=[_pool(1, **NIC),
                                  _pool(1, vendor_id="8086", product_id="10fb")]),
    ])
    assert _hosts(table, "any-intel:1,nic:1") == ["h"]
    assert _hosts(table, "any-intel:2,nic:1") == []


def test_other_alias_keys_must_match_pool_tags():
    table = fakes.make_table([
        dict(host="vf", pci_stats=[_pool(4, dev_type="type-VF", **NIC)]),
        dict(host="pci", pci_stats=[_pool(4, dev_type="type-PCI", **NIC)]),
        dict(host="untyped", pci_stats=[_pool(4, **NIC)]),
    ])
    assert _hosts(table, "vf:1") == ["vf"]
    # An alias without a device_type does not care about the type.
    assert _hosts(table, "nic:1") == ["vf", "pci", "untyped"]


def test_physical_functions_serve_only_requests_for_them():
    # nova's _filter_pools_for_unrequested_pfs.
    table = fakes.make_table([
        dict(host="pf", pci_stats=[_pool(2, dev_type="type-PF", **NIC)]),
        dict(host="vf", pci_stats=[_pool(2, dev_type="type-VF", **NIC)]),
    ])
    assert _hosts(table, "nic:1") == ["vf"]
    assert _hosts(table, "pf:1") == ["pf"]


def test_same_name_aliases_are_alternatives():
    table = fakes.make_table([
        dict(host="gpu", pci_stats=[_pool(1, **GPU)]),
        dict(host="virtio", pci_stats=[_pool(1, vendor_id="1af4", product_id="1041")]),
        dict(host="mixed", pci_stats=[_pool(1, **GPU),
                                      _pool(1, vendor_id="1af4", product_id="1041")]),
    ])
    assert _hosts(table, "accel:1") == ["gpu", "virtio", "mixed"]
    assert _hosts(table, "accel:2") == ["mixed"]


def test_matching_ignores_case():
    _aliases(dict(name="nic", vendor_id="8086", product_id="154D"))
    table = fakes.make_table([dict(host="h", pci_stats=[_pool(1, vendor_id="8086",
                                                               product_id="154d")])])
    assert _hosts(table, "nic:1") == ["h"]


def test_aliases_are_read_when_the_decision_prepares():
    # No parsed aliases outlive a decision: a changed [pci] alias applies to
    # the next one.
    flt = PciPassthroughFilter()
    table = _table()
    assert _hosts(table, "nic:1") == ["nic1", "nic2-split", "both"]
    _aliases(dict(name="nic", **GPU))
    assert [h for h, _ in fakes.passes(flt, table, fakes.make_spec(
        extra_specs={"pci_passthrough:alias": "nic:1"}))] == ["gpu2", "both"]


def test_hosts_reporting_the_same_pools_are_judged_once(monkeypatch):
    from nova_sched.scheduler.filters import pci_passthrough_filter as pci

    table = fakes.make_table(
        [dict(host=f"n{i}", pci_stats=[_pool(1 + i % 2, **NIC)]) for i in range(10)]
        + [dict(host="junk", pci_stats=[{"count": 1, "tags": {1, 2}}])])
    calls = []
    real = pci.pools_satisfy
    monkeypatch.setattr(pci, "pools_satisfy",
                        lambda pools, requests: calls.append(1) or real(pools, requests))
    assert _hosts(table, "nic:2") == [f"n{i}" for i in range(1, 10, 2)]
    # Two kinds of pools, plus the host whose pools cannot be keyed; then
    # _hosts asks each host alone once more.
    assert len(calls) == 3 + len(table.active_rows())


def test_zero_devices_is_no_constraint():
    assert len(_hosts(_table(), "nic:0")) == 6


def test_junk_pools_count_for_nothing():
    assert not pools_satisfy([{"count": "3", **NIC}, "x", None, {"count": -1, **NIC}],
                             [("nic", 1, (NIC,))])
    assert not pools_satisfy(None, [("nic", 1, (NIC,))])


@pytest.mark.parametrize("alias_spec,problem", [
    ("nope:1", "PCI alias 'nope' is not defined in [pci] alias"),
    ("nic:1,nope:2", "'nope' is not defined"),
    ("nic", "'nic' is not name:count"),
    ("nic:x", "is not name:count"),
    ("nic:-1", "is not name:count"),
    (":2", "is not name:count"),
    ("nic:1,", "is not name:count"),
    (5, "must be text"),
])
def test_bad_request_fails_clearly(alias_spec, problem):
    spec = fakes.make_spec(extra_specs={"pci_passthrough:alias": alias_spec})
    with pytest.raises(exception.InvalidRequestSpec) as err:
        fakes.passes(PciPassthroughFilter(), _table(), spec)
    assert "pci_passthrough:alias" in err.value.message
    assert problem in err.value.message
    assert err.value.instance_uuids == spec.instance_uuids


@pytest.mark.parametrize("entry,problem", [
    ("not json", "not valid JSON"),
    ("[1]", "must be a JSON object"),
    ('{"vendor_id": "8086"}', "has no name"),
    ('{"name": "x", "vendor_id": ["8086"]}', "vendor_id must be a string"),
])
def test_bad_alias_configuration_is_a_configuration_error(entry, problem):
    CONF.set_override("alias", [entry], "pci")
    # At construction, i.e. when the daemon starts with the filter enabled.
    with pytest.raises(exception.ConfigurationError) as err:
        PciPassthroughFilter()
    assert "[pci] alias" in err.value.message and problem in err.value.message


def test_hosts_without_pci_stats_fail_a_pci_request_only():
    table = fakes.make_table([dict(host="plain")])
    assert _hosts(table, None) == ["plain"]
    assert _hosts(table, "nic:1") == []
