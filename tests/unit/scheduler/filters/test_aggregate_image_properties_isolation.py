"""AggregateImagePropertiesIsolation: image properties against aggregate metadata."""

from __future__ import annotations

import pytest

from nova_sched.conf import CONF
from nova_sched.scheduler.filters.aggregate_image_properties_isolation import (
    AggregateImagePropertiesIsolation,
)
from tests.unit.scheduler import fakes


def _passes(image_props, metadata, hosts=("host1",)):
    """Whether host1, in one aggregate with ``metadata``, takes the image."""
    return _outcomes(image_props, [dict(hosts={"host1"}, metadata=metadata)], hosts)["host1"]


def _outcomes(image_props, aggregates, hosts=("host1", "host2")):
    table = fakes.make_table([dict(host=h) for h in hosts], aggregates=aggregates)
    spec = fakes.make_spec(image_props=image_props)
    flt = AggregateImagePropertiesIsolation()
    kept = {host for host, _ in fakes.passes(flt, table, spec)}
    return {table.states[r].host: table.states[r].host in kept
            for r in table.active_rows()}


def test_matching_property_passes():
    assert _passes({"hw_vm_mode": "hvm"}, {"hw_vm_mode": "hvm"})


def test_one_of_comma_separated_values_passes():
    # nova's ..._passes_comma.
    assert _passes({"hw_vm_mode": "hvm"}, {"hw_vm_mode": "hvm,xen"})
    assert _passes({"hw_vm_mode": "xen"}, {"hw_vm_mode": "hvm, xen"})


def test_property_with_a_comma_is_not_split():
    # nova's ..._props_bad_comma: 'windows,' is not among {windows, linux}.
    assert not _passes({"os_distro": "windows,"}, {"os_distro": "windows,linux"})


def test_different_property_fails():
    # nova's ..._props_not_match_fails and ..._not_match2_fails.
    assert not _passes({"hw_vm_mode": "xen"}, {"hw_vm_mode": "hvm"})
    assert not _passes({"hw_vm_mode": "hvm", "hw_cpu_cores": 2},
                       {"hw_vm_mode": "hvm", "hw_cpu_cores": "1"})


def test_non_string_property_is_compared_as_text():
    # nova's ..._multi_props_passes: hw_cpu_cores=2 matches "2".
    assert _passes({"hw_vm_mode": "hvm", "hw_cpu_cores": 2},
                   {"hw_vm_mode": "hvm", "hw_cpu_cores": "2"})
    assert _passes({"flag": True}, {"flag": "True"})
    assert not _passes({"flag": True}, {"flag": "true"})
    assert _passes({"hw_cpu_cores": 2.0}, {"hw_cpu_cores": "2"})  # int(2.0)


def test_image_without_the_property_passes():
    # nova's ..._props_with_meta_passes: hosts are not kept for images that
    # ask for them.
    assert _passes({}, {"hw_vm_mode": "hvm"})
    assert _passes({"os_type": "linux"}, {"os": "linux"})


@pytest.mark.parametrize("empty", ["", None, 0, False, []])
def test_empty_property_passes(empty):
    # A property nova's model does not know, as sent (the extension).
    assert _passes({"tier": empty}, {"tier": "gold"})


@pytest.mark.parametrize("prop, value", [
    ("hw_qemu_guest_agent", "no"), ("hw_qemu_guest_agent", "maybe"),
    ("hw_numa_nodes", "0"), ("hw_numa_nodes", 0)])
def test_property_false_or_zero_in_nova_model_passes(prop, value):
    # nova's `if prop and ...`: a flexible boolean read as False, or the
    # integer 0, asks for nothing.
    assert _passes({prop: value}, {prop: "anything"})


def test_list_valued_property_is_compared_as_the_text_of_the_list():
    # nova compares str(prop): a list matches no comma-separated value.
    assert not _passes({"tier": ["gold"]}, {"tier": "gold"})
    assert not _passes({"tier": ["gold", "silver"]}, {"tier": "gold,silver"})
    assert _passes({"tier": ["gold"]}, {"tier": "['gold']"})
    # traits_required (from trait:NAME=required) likewise.
    assert not _passes({"trait:CUSTOM_A": "required"}, {"traits_required": "CUSTOM_A"})
    assert _passes({"trait:CUSTOM_A": "required"}, {"traits_required": "['CUSTOM_A']"})


def test_legacy_name_is_compared_under_its_current_name():
    # The example: an image with architecture=x86_64 is kept off a
    # host whose aggregate wants hw_architecture=aarch64, as in nova.
    assert not _passes({"architecture": "x86_64"}, {"hw_architecture": "aarch64"})
    assert _passes({"architecture": "x86_64"}, {"hw_architecture": "x86_64"})
    assert not _passes({"vm_mode": "hvm"}, {"hw_vm_mode": "xen"})
    assert not _passes({"hypervisor_type": "kvm"}, {"img_hv_type": "qemu"})


def test_aggregate_key_with_a_legacy_name_isolates_nothing():
    # nova's model has no field 'architecture': the key never matches.
    assert _passes({"architecture": "x86_64"}, {"architecture": "aarch64"})
    assert _passes({"hw_architecture": "x86_64"}, {"architecture": "aarch64"})


def test_values_are_canonical_as_nova_has_them():
    assert _passes({"hw_architecture": "amd64"}, {"hw_architecture": "x86_64"})
    assert not _passes({"hw_architecture": "amd64"}, {"hw_architecture": "amd64"})
    assert _passes({"hypervisor_type": "xapi"}, {"img_hv_type": "xen"})
    assert _passes({"hw_vm_mode": "hv"}, {"hw_vm_mode": "hvm"})
    assert _passes({"os_type": "Linux"}, {"os_type": "linux"})


def test_flexible_boolean_compares_as_python_text():
    # nova: hw_qemu_guest_agent=yes is the boolean True, str() 'True'.
    assert _passes({"hw_qemu_guest_agent": "yes"}, {"hw_qemu_guest_agent": "True"})
    assert not _passes({"hw_qemu_guest_agent": "yes"}, {"hw_qemu_guest_agent": "yes"})
    assert _passes({"hw_qemu_guest_agent": "on"}, {"hw_qemu_guest_agent": "True,False"})


def test_integer_property_compares_as_its_number():
    # "02" is the integer 2 in nova's model.
    assert _passes({"hw_cpu_cores": "02"}, {"hw_cpu_cores": "2"})


def test_unknown_property_is_compared_as_sent():
    # nova-sched's extension: nova ignores properties its model lacks.
    assert not _passes({"custom_tier": "gold"}, {"custom_tier": "silver"})
    assert _passes({"custom_tier": "gold"}, {"custom_tier": "silver,gold"})
    assert not _passes({"custom_tier": "02"}, {"custom_tier": "2"})


def test_host_in_no_aggregate_takes_every_image():
    # nova's ..._props_imgprops_passes.
    assert _outcomes({"hw_vm_mode": "xen"}, []) == {"host1": True, "host2": True}


def test_matching_and_non_matching_keys():
    # nova's ..._iso_props_with_matching_meta_pass / _fail.
    assert _passes({"os_type": "linux"}, {"os_type": "linux"})
    assert not _passes({"os_type": "linux"}, {"os_type": "windows"})


def test_values_of_all_the_hosts_aggregates_are_allowed():
    aggs = [dict(hosts={"host1", "host2"}, metadata={"os_type": "windows"}),
            dict(hosts={"host1"}, metadata={"os_type": "linux"})]
    assert _outcomes({"os_type": "linux"}, aggs) == {"host1": True, "host2": False}


def test_namespace_restricts_the_keys_compared():
    # nova's ..._props_namespace: namespace 'hw', separator '_'.
    CONF.set_override("aggregate_image_properties_isolation_namespace", "hw",
                      "filter_scheduler")
    CONF.set_override("aggregate_image_properties_isolation_separator", "_",
                      "filter_scheduler")
    metadata = {"hw_vm_mode": "hvm", "img_owner_id": "foo"}
    assert _passes({"hw_vm_mode": "hvm", "img_owner_id": "wrong"}, metadata)
    assert not _passes({"hw_vm_mode": "xen", "img_owner_id": "foo"}, metadata)


def test_default_separator_is_a_dot():
    CONF.set_override("aggregate_image_properties_isolation_namespace", "ns",
                      "filter_scheduler")
    metadata = {"ns.os": "linux", "ns_os": "bsd", "os": "bsd"}
    assert _passes({"ns.os": "linux", "ns_os": "linux", "os": "linux"}, metadata)
    assert not _passes({"ns.os": "bsd"}, metadata)
