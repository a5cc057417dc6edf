"""ImagePropertiesFilter: nova's image properties against supported_instances."""

from __future__ import annotations

import pytest
from oslo_utils import versionutils

from nova_sched import exception
from nova_sched.scheduler import filters
from nova_sched.scheduler.filters import image_props_filter
from nova_sched.scheduler.filters.image_props_filter import ImagePropertiesFilter
from tests.unit.scheduler import fakes

V600 = 6000000  # oslo's convert_version_to_int('6.0.0')
KVM_X86 = [["x86_64", "kvm", "hvm"]]


def _passes(image_props, supported=KVM_X86, hypervisor_version=V600, **host):
    table = fakes.make_table([dict(host="host1", memory_mb=1024, vcpus=2,
                                   local_gb=10, supported_instances=supported,
                                   hypervisor_version=hypervisor_version, **host)])
    spec = fakes.make_spec(image_props=image_props)
    flt = ImagePropertiesFilter()
    one = flt.host_passes(fakes.state(table, "host1"), spec)
    all_ = fakes.passes(flt, table, spec) == [("host1", "host1")]
    assert one == all_
    return one


def test_is_discovered():
    assert ImagePropertiesFilter in filters.all_filters()


def test_same_props_and_version_pass():
    assert _passes({"hw_architecture": "x86_64", "img_hv_type": "kvm",
                    "hw_vm_mode": "hvm", "img_hv_requested_version": ">=6.0,<6.2"})


def test_different_props_fail():
    assert not _passes({"hw_architecture": "armv7l", "img_hv_type": "qemu",
                        "hw_vm_mode": "hvm"})


def test_different_hypervisor_version_fails():
    assert not _passes({"hw_architecture": "x86_64", "img_hv_type": "kvm",
                        "hw_vm_mode": "hvm", "img_hv_requested_version": ">=6.2"})


def test_partial_props_pass():
    assert _passes({"hw_architecture": "x86_64", "hw_vm_mode": "hvm"})


def test_partial_props_fail():
    assert not _passes({"hw_architecture": "x86_64", "hw_vm_mode": "hvm"},
                       supported=[["x86_64", "xen", "xen"]])


def test_no_image_props_pass_everywhere():
    assert _passes({})
    assert _passes({}, supported=[])
    assert _passes({"os_distro": "ubuntu", "hw_disk_bus": "virtio"}, supported=[])


def test_host_without_supported_instances_fails():
    assert not _passes({"hw_architecture": "x86_64", "img_hv_type": "kvm",
                        "hw_vm_mode": "hvm"}, supported=[])
    assert not _passes({"img_hv_type": "kvm"}, supported=None)


def test_host_without_hypervisor_version_passes_version_check():
    assert _passes({"hw_architecture": "x86_64", "img_hv_type": "kvm",
                    "hw_vm_mode": "hvm", "img_hv_requested_version": ">=6.0"},
                   hypervisor_version=None)


def test_unsupported_hypervisor_version_fails():
    assert not _passes({"hw_architecture": "x86_64", "img_hv_type": "kvm",
                        "hw_vm_mode": "hvm", "img_hv_requested_version": ">=6.0"},
                       hypervisor_version=5000)


def test_version_alone_is_not_checked():
    # nova: with no arch, hypervisor type or vm mode asked for, the image
    # passes before the version is looked at.
    assert _passes({"img_hv_requested_version": ">=9.0"})


@pytest.mark.parametrize("mode, host_mode", [("pv", "xen"), ("hv", "hvm"),
                                             ("baremetal", "hvm"), ("HVM", "hvm")])
def test_vm_mode_compat_names(mode, host_mode):
    assert _passes({"hw_vm_mode": mode}, supported=[["x86_64", "xen", host_mode]])


@pytest.mark.parametrize("arch, host_arch", [("x86_32", "i686"), ("x86_32p", "i686"),
                                             ("i386", "i686"), ("i586", "i686"),
                                             ("amd64", "x86_64"), ("X86_64", "x86_64")])
def test_arch_compat_names(arch, host_arch):
    assert _passes({"hw_architecture": arch}, supported=[[host_arch, "kvm", "hvm"]])


def test_xapi_is_xen():
    assert _passes({"img_hv_type": "xapi"}, supported=[["i686", "xen", "hvm"]])


def test_qemu_is_not_kvm():
    # nova's HVType keeps qemu and kvm apart.
    assert not _passes({"img_hv_type": "qemu"}, supported=KVM_X86)
    assert _passes({"img_hv_type": "qemu"}, supported=[["x86_64", "qemu", "hvm"]])


def test_host_entries_are_canonicalised_too():
    assert _passes({"hw_architecture": "x86_64", "hw_vm_mode": "hvm"},
                   supported=[["AMD64", "KVM", "HV"]])


def test_any_one_entry_suffices():
    supported = [["i686", "qemu", "hvm"], ["x86_64", "kvm", "hvm"]]
    assert _passes({"hw_architecture": "x86_64", "img_hv_type": "kvm"},
                   supported=supported)
    # ...but all asked-for values must be in the same entry.
    assert not _passes({"hw_architecture": "i686", "img_hv_type": "kvm"},
                       supported=supported)


def test_legacy_names():
    assert _passes({"architecture": "x86_64", "hypervisor_type": "kvm",
                    "vm_mode": "hvm"})
    assert not _passes({"architecture": "aarch64"})
    assert not _passes({"hypervisor_type": "xen"})
    assert not _passes({"hypervisor_type": "kvm",
                        "hypervisor_version_requires": ">=7.0"})


def test_current_name_wins_over_legacy():
    assert _passes({"hw_architecture": "x86_64", "architecture": "aarch64"})
    assert not _passes({"hw_architecture": "aarch64", "architecture": "x86_64"})
    assert _passes({"img_hv_type": "kvm", "img_hv_requested_version": ">=6.0",
                    "hypervisor_version_requires": ">=7.0"})


@pytest.mark.parametrize("predicate, passes", [
    (">=6.0", True), (">6.0", False), ("==6.0.0", True), ("==6", True),
    ("!=6.0", False), ("<6.0.1", True), ("<=5.9", False),
    (">=5.0, <7.0", True), (" >= 6.0 ,< 6.0.1 ", True), (">=5.0,<6.0", False),
])
def test_version_predicates(predicate, passes):
    assert _passes({"img_hv_type": "kvm", "img_hv_requested_version": predicate}) is passes


@pytest.mark.parametrize("predicate", ["6.0", ">=", "=>6.0", ">=six", "~=6.0", ">=6.0,"])
def test_malformed_version_predicate_fails_the_request(predicate):
    # nova raises building ImageMetaProps; here the request fails naming it.
    with pytest.raises(exception.InvalidRequestSpec) as err:
        fakes.make_spec(image_props={"img_hv_type": "kvm",
                                     "img_hv_requested_version": predicate})
    assert "img_hv_requested_version" in err.value.message


def test_pre_release_predicate_compares_as_nova_does():
    # nova's VersionPredicate compares PEP 440 versions: 6.0a1 < 6.0.
    assert _passes({"img_hv_type": "kvm", "img_hv_requested_version": ">=6.0a1"})
    assert not _passes({"img_hv_type": "kvm", "img_hv_requested_version": ">=6.0.1a1"})


def test_version_satisfies_reads_nova_integer_and_text_versions():
    predicate = versionutils.VersionPredicate(">1.2.3")
    assert image_props_filter.version_satisfies(1002003004, predicate)
    assert not image_props_filter.version_satisfies(1002003, predicate)
    assert image_props_filter.version_satisfies("6.1", versionutils.VersionPredicate(">=6.0"))
    assert not image_props_filter.version_satisfies("six", predicate)


def test_filter_all_over_many_hosts():
    nodes = []
    for i in range(10):
        supported = [] if i == 0 else [["x86_64", "kvm" if i % 2 else "qemu", "hvm"]]
        nodes.append(dict(host=f"h{i}", memory_mb=1024, vcpus=2, local_gb=10,
                          supported_instances=supported,
                          hypervisor_version=(i % 4) * 1000000 or None))
    table = fakes.make_table(nodes)
    spec = fakes.make_spec(image_props={"img_hv_type": "kvm",
                                        "img_hv_requested_version": ">=2.0"})
    flt = ImagePropertiesFilter()
    kept = [h for h, _ in fakes.passes(flt, table, spec)]
    # kvm on the odd hosts; of those, only h3 and h7 run version 3.0 >= 2.0.
    assert kept == ["h3", "h7"]
    for row in table.active_rows():
        st = table.states[row]
        assert flt.host_passes(st, spec) == (st.host in kept)


def test_each_kind_of_host_is_judged_once(monkeypatch):
    # A kind is what the filter reads of a report: the supported_instances
    # and the hypervisor version; the host table keeps each node's kind.
    nodes = [dict(host=f"h{i}", supported_instances=[["x86_64", "kvm", "hvm"]]
                  if i % 2 else [["aarch64", "kvm", "hvm"]],
                  hypervisor_version=6000000 if i < 6 else 7000000)
             for i in range(12)]
    table = fakes.make_table(nodes)
    flt = ImagePropertiesFilter()
    judged = []
    real = flt._supported
    monkeypatch.setattr(flt, "_supported",
                        lambda kind, req: judged.append(kind) or real(kind, req))
    spec = fakes.make_spec(image_props={"hw_architecture": "x86_64",
                                        "img_hv_requested_version": ">=6.5"})
    kept = [h for h, _ in fakes.passes(flt, table, spec)]
    assert kept == ["h7", "h9", "h11"]
    assert len(judged) == 4
    # A node's new report with another kind is judged by its new kind.
    fakes.add_node(table, host="h1", supported_instances=[["x86_64", "kvm", "hvm"]],
                   hypervisor_version=8000000)
    assert [h for h, _ in fakes.passes(flt, table, spec)] == ["h1", "h7", "h9", "h11"]


def test_default_architecture_applies_to_images_naming_none():
    from nova_sched.conf import CONF
    from nova_sched.scheduler.filters.image_props_filter import ImagePropertiesFilter

    table = fakes.make_table([
        dict(host="x86", supported_instances=[["x86_64", "kvm", "hvm"]]),
        dict(host="arm", supported_instances=[["aarch64", "kvm", "hvm"]]),
    ])
    plain = fakes.make_spec()
    assert [h for h, _ in fakes.passes(ImagePropertiesFilter(), table, plain)] == [
        "x86", "arm"]
    CONF.set_override("image_properties_default_architecture", "aarch64",
                      group="filter_scheduler")
    assert [h for h, _ in fakes.passes(ImagePropertiesFilter(), table,
                                       fakes.make_spec())] == ["arm"]
    named = fakes.make_spec(image_props={"hw_architecture": "x86_64"})
    assert [h for h, _ in fakes.passes(ImagePropertiesFilter(), table, named)] == ["x86"]
