"""ComputeCapabilitiesFilter: nova's extra-spec scopes and capability paths."""

from __future__ import annotations

import json

import pytest

from nova_sched.scheduler import filters
from nova_sched.scheduler.filters.compute_capabilities_filter import (
    ComputeCapabilitiesFilter,
)
from tests.unit.scheduler import fakes

CPU_INFO = json.dumps({
    "vendor": "Intel",
    "model": "core2duo",
    "arch": "i686",
    "features": ["lahf_lm", "rdtscp"],
    "topology": {"cores": 1, "threads": 1, "sockets": 1},
})


def _passes(especs, **host):
    node = dict(host="host1", memory_mb=2048, vcpus=4, local_gb=10,
                claimed_memory_mb=1024)
    node.update(host)
    table = fakes.make_table([node])
    spec = fakes.make_spec(extra_specs=especs)
    flt = ComputeCapabilitiesFilter()
    one = flt.host_passes(fakes.state(table, "host1"), spec)
    all_ = fakes.passes(flt, table, spec) == [("host1", "host1")]
    assert one == all_
    return one


def test_is_discovered():
    assert ComputeCapabilitiesFilter in filters.all_filters()


def test_passes_without_extra_specs():
    assert _passes({})


def test_cpu_info_json_without_the_key_fails():
    assert not _passes({"capabilities:cpu_info:vendor": "Intel"}, cpu_info=" { } ")


def test_cpu_info_json_string_is_parsed_for_nested_keys():
    assert _passes({"capabilities:cpu_info:vendor": "Intel"}, cpu_info=CPU_INFO)
    assert not _passes({"capabilities:cpu_info:vendor": "AMD"}, cpu_info=CPU_INFO)
    assert _passes({"capabilities:cpu_info:topology:cores": ">= 1"}, cpu_info=CPU_INFO)


def test_cpu_info_as_dict_works_too():
    info = json.loads(CPU_INFO)
    assert _passes({"capabilities:cpu_info:arch": "i686"}, cpu_info=info)


def test_cpu_info_features_with_all_in():
    assert _passes({"capabilities:cpu_info:features": "<all-in> lahf_lm rdtscp"},
                   cpu_info=CPU_INFO)
    assert not _passes({"capabilities:cpu_info:features": "<all-in> avx rdtscp"},
                       cpu_info=CPU_INFO)


def test_unscoped_cpu_info_compares_the_raw_string():
    assert _passes({"cpu_info": CPU_INFO}, cpu_info=CPU_INFO)
    assert not _passes({"cpu_info": ""}, cpu_info=CPU_INFO)


def test_cpu_info_that_is_not_json_fails_nested_lookups():
    assert not _passes({"capabilities:cpu_info:vendor": "Intel"}, cpu_info="cpu_info")


def test_missing_cpu_info_fails_scoped_lookup():
    assert not _passes({"capabilities:cpu_info:vendor": "Intel"})


def test_unscoped_keys_read_stats():
    assert _passes({"opt1": "1", "opt2": "2"}, stats={"opt1": 1, "opt2": 2})
    assert not _passes({"opt1": "1", "opt2": "222"}, stats={"opt1": 1, "opt2": 2})


def test_scoped_key_falls_back_to_stats():
    assert _passes({"capabilities:opt1": "1"}, stats={"opt1": 1, "opt2": 2})


def test_key_same_as_scope():
    assert _passes({"capabilities": "1"}, stats={"capabilities": 1})


def test_users_own_unscoped_keys_are_ignored():
    assert _passes({"XXYY": "1"}, stats={"opt1": 1})


@pytest.mark.parametrize("key", ["wrong_scope:opt1", "hw:cpu_policy",
                                 "aggregate_instance_extra_specs:ssd",
                                 "quota:cpu_quota"])
def test_other_scopes_are_ignored(key):
    assert _passes({key: "whatever"}, stats={"opt1": 1})


def test_multi_level_paths():
    stats = {"opt1": {"a": 1, "b": {"aa": 2}}, "opt2": 2}
    assert _passes({"opt1:a": "1", "capabilities:opt1:b:aa": "2"}, stats=stats)
    assert not _passes({"capabilities:opt1:b:aa": "3"}, stats=stats)
    assert _passes({"capabilities:stats:opt1:b:aa": "2"}, stats=stats)


def test_scoped_missing_capability_fails():
    assert not _passes({"capabilities:no_such_thing": "1"}, stats={"opt1": 1})
    assert not _passes({"capabilities:stats:nope": "1"}, stats={"opt1": 1})


def test_resource_attributes_with_backward_compatibility():
    # free_ram_mb is 2048 - 1024 claimed = 1024.
    assert _passes({"free_ram_mb": ">= 300"})
    assert not _passes({"free_ram_mb": "<= 300"})
    assert _passes({"vcpus_used": "<= 20"})
    assert not _passes({"vcpus_used": ">= 20"})
    assert _passes({"free_disk_mb": str(10 * 1024)})
    assert not _passes({"free_disk_mb": "1"})


def test_hypervisor_attributes():
    host = dict(hypervisor_type="QEMU", hypervisor_version=2011000)
    assert _passes({"capabilities:hypervisor_type": "s== QEMU"}, **host)
    assert _passes({"hypervisor_type": "QEMU"}, **host)
    assert not _passes({"capabilities:hypervisor_type": "<or> kvm <or> xen"}, **host)
    assert _passes({"capabilities:hypervisor_version": ">= 2000000"}, **host)
    assert not _passes({"capabilities:hypervisor_version": "< 2000000"}, **host)


def test_unscoped_attribute_that_is_none_fails():
    # nova: the host has the attribute, so the spec applies, and None fails.
    assert not _passes({"hypervisor_type": "QEMU"})


def test_attribute_none_falls_back_to_stats():
    assert _passes({"capabilities:hypervisor_type": "kvm"},
                   stats={"hypervisor_type": "kvm"})


def test_private_attributes_are_not_capabilities():
    assert _passes({"_row": "0"})
    assert not _passes({"capabilities:_table": "<in> HostTable"})


def test_methods_are_not_capabilities():
    assert _passes({"derived": "x"})
    assert not _passes({"capabilities:derived": "<in> bound method"})


def test_every_spec_must_hold():
    stats = {"a": "1", "b": "2"}
    assert _passes({"capabilities:a": "1", "capabilities:b": "2"}, stats=stats)
    assert not _passes({"capabilities:a": "1", "capabilities:b": "3"}, stats=stats)


def test_filter_all_over_many_hosts():
    nodes = [dict(host=f"h{i}", memory_mb=4096, vcpus=8, local_gb=100,
                  hypervisor_type="kvm" if i % 2 else "xen",
                  stats={"rack": str(i % 3)}, cpu_info=CPU_INFO)
             for i in range(12)]
    table = fakes.make_table(nodes)
    flt = ComputeCapabilitiesFilter()
    spec = fakes.make_spec(extra_specs={
        "capabilities:hypervisor_type": "kvm",
        "rack": "<or> 0 <or> 1",
        "capabilities:cpu_info:vendor": "Intel",
        "hw:mem_page_size": "large",
    })
    kept = [h for h, _ in fakes.passes(flt, table, spec)]
    assert kept == [f"h{i}" for i in range(12) if i % 2 and i % 3 in (0, 1)]
    for row in table.active_rows():
        st = table.states[row]
        assert flt.host_passes(st, spec) == (st.host in kept)


def test_parsed_specs_follow_the_request():
    table = fakes.make_table([dict(host="h1", stats={"x": "1"})])
    flt = ComputeCapabilitiesFilter()
    assert fakes.passes(flt, table, fakes.make_spec(extra_specs={"x": "1"}))
    assert not fakes.passes(flt, table, fakes.make_spec(extra_specs={"x": "2"}))
    spec = fakes.make_spec(extra_specs={"x": "1"})
    assert fakes.passes(flt, table, spec)
    spec.extra_specs = {"x": "2"}  # the next decision reads the request anew
    assert not fakes.passes(flt, table, spec)


def test_hosts_alike_in_what_the_specs_read_are_judged_once(monkeypatch):
    from nova_sched.scheduler.filters import compute_capabilities_filter as ccf

    nodes = [dict(host=f"h{i}", hypervisor_type="kvm" if i % 3 else "xen",
                  cpu_info=CPU_INFO, stats={"rack": str(i % 2)}) for i in range(12)]
    table = fakes.make_table(nodes)
    flt = ComputeCapabilitiesFilter()
    judged = []
    real = ccf._passes
    monkeypatch.setattr(ccf, "_passes",
                        lambda req, cap: judged.append(req.key) or real(req, cap))
    spec = fakes.make_spec(extra_specs={"capabilities:hypervisor_type": "kvm",
                                        "capabilities:cpu_info:vendor": "Intel",
                                        "rack": "1"})
    kept = [h for h, _ in fakes.passes(flt, table, spec)]
    assert kept == [f"h{i}" for i in range(12) if i % 3 and i % 2]
    # Each requirement once per kind of reading: kvm and xen, one vendor,
    # rack 0 and rack 1.
    assert sorted(judged) == sorted(["capabilities:hypervisor_type"] * 2
                                    + ["capabilities:cpu_info:vendor", "rack", "rack"])


def test_cpu_info_is_parsed_once_per_report(monkeypatch):
    from nova_sched.scheduler.filters import compute_capabilities_filter as ccf

    table = fakes.make_table([dict(host="h", cpu_info=CPU_INFO)])
    parsed = []
    real = ccf._parse_json
    monkeypatch.setattr(ccf, "_parse_json", lambda text: parsed.append(text) or real(text))
    flt = ComputeCapabilitiesFilter()
    spec = fakes.make_spec(extra_specs={"capabilities:cpu_info:vendor": "Intel",
                                        "capabilities:cpu_info:arch": "i686"})
    assert fakes.passes(flt, table, spec) and fakes.passes(flt, table, spec)
    assert len(parsed) == 1
    # A new report is a new HostState: its text is parsed again.
    fakes.add_node(table, host="h", cpu_info=CPU_INFO.replace("Intel", "AMD"))
    assert not fakes.passes(flt, table, spec)
    assert len(parsed) == 2
