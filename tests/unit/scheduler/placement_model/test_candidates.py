"""Placement's candidate rules in memory (placement_model.candidates).

Each test is a rule of GET /allocation_candidates at 1.36 that an operator
relies on (a trait required, a PCPU host, a vGPU child, a sharing disk, an
aggregate), on a model small enough to read; the differential test
(tests/functional/test_placement_differential.py) checks the same rules
against Placement 16 itself on generated clouds.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from nova_sched.scheduler.placement_model import candidates
from nova_sched.scheduler.placement_model.providers import (
    MISC_SHARES_VIA_AGGREGATE, Inventory, Provider, ProviderModel)
from nova_sched.scheduler.placement_model.resource_request import ResourceRequest
from nova_sched.scheduler.placement_model.search_context import index_of

TRAITS = {"CUSTOM_SSD", "HW_CPU_X86_AVX2", "COMPUTE_STATUS_DISABLED", "OWNER_NOVA",
          "CUSTOM_GPU_FAST", MISC_SHARES_VIA_AGGREGATE}
CLASSES = {"VCPU", "PCPU", "MEMORY_MB", "DISK_GB", "VGPU", "SRIOV_NET_VF"}


def model_of(*providers: Provider) -> ProviderModel:
    model = ProviderModel()
    model.apply(providers, traits=TRAITS, classes=CLASSES)
    return model


def compute(uuid: str, vcpu=8, mem=4096, used=None, traits=(), aggs=(), **inv) -> Provider:
    inventories = {"VCPU": Inventory(vcpu, **inv), "MEMORY_MB": Inventory(mem)}
    return Provider(uuid=uuid, inventories=inventories, usages=dict(used or {}),
                    traits=frozenset(traits), aggregates=frozenset(aggs))


def child(uuid: str, parent: str, root: str | None = None, traits=(), aggs=(),
          used=None, **inventories: Inventory) -> Provider:
    return Provider(uuid=uuid, parent_uuid=parent, root_uuid=root or parent,
                    inventories=inventories, usages=dict(used or {}),
                    traits=frozenset(traits), aggregates=frozenset(aggs))


def ask(resources=None, **groups) -> ResourceRequest:
    """``ask({"VCPU": 2}, _1={"VGPU": 1})``: the unnumbered group, then
    granular groups named by their suffix after the underscore."""
    request = ResourceRequest()
    if resources:
        request.unnumbered.resources = dict(resources)
    for name, amounts in groups.items():
        request.group(name[1:]).resources = dict(amounts)
    return request


def keys(found) -> set:
    return {(frozenset((rp, rc, n) for rp, a in c.allocations.items() for rc, n in a.items()),
             frozenset((s, tuple(r)) for s, r in c.mappings.items())) for c in found}


# -- capacity ---------------------------------------------------------------------
def test_capacity_is_total_minus_reserved_times_ratio_less_used():
    model = model_of(
        compute("fits", vcpu=4, reserved=1, allocation_ratio=2.0, used={"VCPU": 2}),  # 6 - 2 = 4
        compute("full", vcpu=4, reserved=1, allocation_ratio=2.0, used={"VCPU": 3}),  # 3 left
        compute("over", vcpu=4, used={"VCPU": 9}))
    assert candidates.search(model, [ask({"VCPU": 4})]).hosts() == {"fits"}


def test_min_unit_max_unit_and_step_size():
    model = model_of(compute("any"), compute("min4", min_unit=4), compute("max2", max_unit=2),
                     compute("step4", step_size=4))
    assert candidates.search(model, [ask({"VCPU": 3})]).hosts() == {"any"}
    assert candidates.search(model, [ask({"VCPU": 4})]).hosts() == {"any", "min4", "step4"}
    assert candidates.search(model, [ask({"VCPU": 2})]).hosts() == {"any", "max2"}


def test_groups_merged_on_one_provider_must_fit_together():
    model = model_of(compute("small", vcpu=3), compute("big", vcpu=4))
    request = ask({"VCPU": 2}, _1={"VCPU": 2})
    request.group_policy = "none"
    assert candidates.search(model, [request]).hosts() == {"big"}


def test_mysql_single_precision_ratio():
    # MySQL's FLOAT keeps 0.9 as 0.899999976: Placement's SQL lets 8 of 10
    # in where SQLite's double lets 9; the merged check sees 0.9 (9) on both.
    single = float(np.float32(0.9))
    mysql = model_of(compute("n", vcpu=10, allocation_ratio=single))
    sqlite = model_of(compute("n", vcpu=10, allocation_ratio=0.9))
    assert candidates.search(mysql, [ask({"VCPU": 9})]).hosts() == set()
    assert candidates.search(sqlite, [ask({"VCPU": 9})]).hosts() == {"n"}
    both = ask({"VCPU": 5}, _1={"VCPU": 4})
    both.group_policy = "none"
    assert candidates.search(mysql, [both]).hosts() == {"n"}


# -- traits and trees ----------------------------------------------------------------
def test_required_trait_on_a_contributing_child_serves_the_tree():
    model = model_of(
        Provider(uuid="cn", inventories={"MEMORY_MB": Inventory(4096)}),
        child("numa", "cn", traits={"CUSTOM_SSD"}, VCPU=Inventory(8)),
        compute("plain"))
    request = ask({"VCPU": 2, "MEMORY_MB": 512})
    request.unnumbered.required_traits = {"CUSTOM_SSD"}
    search = candidates.search(model, [request])
    assert search.hosts() == {"cn"}
    [cand] = search.candidates_of("cn")
    assert cand.allocation_request() == {
        "allocations": {"cn": {"resources": {"MEMORY_MB": 512}},
                        "numa": {"resources": {"VCPU": 2}}},
        "mappings": {"": ["cn", "numa"]}}


def test_a_required_trait_on_a_root_serving_only_a_granular_group_does_not_count():
    # The unnumbered group's traits are judged on its own contributors: the
    # root holds CUSTOM_SSD but gives only the granular group's VCPU.
    model = model_of(
        Provider(uuid="cn", traits=frozenset({"CUSTOM_SSD"}),
                 inventories={"VCPU": Inventory(8)}),
        child("numa", "cn", MEMORY_MB=Inventory(4096)))
    request = ask({"MEMORY_MB": 512}, _1={"VCPU": 1})
    request.unnumbered.required_traits = {"CUSTOM_SSD"}
    search = candidates.search(model, [request])
    assert search.hosts() == set() and search.all_candidates() == []
    # With the root also serving the unnumbered group, it is a host.
    model = model_of(
        Provider(uuid="cn", traits=frozenset({"CUSTOM_SSD"}),
                 inventories={"VCPU": Inventory(8), "DISK_GB": Inventory(10)}),
        child("numa", "cn", MEMORY_MB=Inventory(4096)))
    request = ask({"MEMORY_MB": 512, "DISK_GB": 1}, _1={"VCPU": 1})
    request.unnumbered.required_traits = {"CUSTOM_SSD"}
    assert candidates.search(model, [request]).hosts() == {"cn"}


def test_forbidden_trait_on_a_root_that_contributes_nothing_is_ignored():
    model = model_of(Provider(uuid="cn", traits=frozenset({"CUSTOM_SSD"})),
                     child("numa", "cn", VCPU=Inventory(8)))
    request = ask({"VCPU": 2})
    request.unnumbered.forbidden_traits = {"CUSTOM_SSD"}
    search = candidates.search(model, [request])
    assert [c.allocations for c in search.all_candidates()] == [{"numa": {"VCPU": 2}}]
    # nova sees a host only through a candidate that allocates from it.
    assert search.hosts() == set()


def test_granular_group_needs_one_provider_with_its_traits():
    model = model_of(
        compute("cn"),
        child("gpu1", "cn", VGPU=Inventory(2)),
        child("gpu2", "cn", traits={"CUSTOM_GPU_FAST"}, VGPU=Inventory(2)))
    request = ask({"VCPU": 1}, _1={"VGPU": 1})
    request.group("1").required_traits = {"CUSTOM_GPU_FAST"}
    [cand] = candidates.search(model, [request]).candidates_of("cn")
    assert cand.mappings == {"": ("cn",), "1": ("gpu2",)}


def test_group_policy_isolate_and_none():
    model = model_of(compute("cn"), child("pf1", "cn", SRIOV_NET_VF=Inventory(2)),
                     child("pf2", "cn", SRIOV_NET_VF=Inventory(2)))
    request = ask({"VCPU": 1}, _1={"SRIOV_NET_VF": 1}, _2={"SRIOV_NET_VF": 1})
    request.group_policy = "isolate"
    isolated = candidates.search(model, [request]).candidates_of("cn")
    assert sorted((c.mappings["1"], c.mappings["2"]) for c in isolated) == [
        (("pf1",), ("pf2",)), (("pf2",), ("pf1",))]
    request.group_policy = "none"
    assert len(candidates.search(model, [request]).candidates_of("cn")) == 4


def test_same_subtree_keeps_a_vf_under_its_numa_node():
    model = model_of(
        Provider(uuid="cn", inventories={"MEMORY_MB": Inventory(4096)}),
        child("numa0", "cn", VCPU=Inventory(4)),
        child("numa1", "cn", VCPU=Inventory(4)),
        child("vf0", "numa0", "cn", SRIOV_NET_VF=Inventory(4)))
    request = ask({"MEMORY_MB": 256}, _CPU={"VCPU": 1}, _NET={"SRIOV_NET_VF": 1})
    request.group_policy = "none"
    request.same_subtree = [frozenset({"CPU", "NET"})]
    found = candidates.search(model, [request]).candidates_of("cn")
    assert [c.mappings["CPU"] for c in found] == [("numa0",)]


def test_same_allocation_with_other_mappings_is_another_candidate():
    model = model_of(compute("cn", vcpu=8))
    request = ask({"VCPU": 1}, _1={"VCPU": 1})
    request.group_policy = "none"
    [cand] = candidates.search(model, [request]).candidates_of("cn")
    assert cand.allocations == {"cn": {"VCPU": 2}}
    assert cand.mappings == {"": ("cn",), "1": ("cn",)}


# -- aggregates, sharing, in_tree, root traits ------------------------------------------
def test_member_of_on_the_root_spans_the_tree_for_the_unnumbered_group_only():
    model = model_of(Provider(uuid="cn", aggregates=frozenset({"agg"}),
                              inventories={"MEMORY_MB": Inventory(1024)}),
                     child("gpu", "cn", VGPU=Inventory(1)))
    unnumbered = ask({"MEMORY_MB": 1, "VGPU": 1})
    unnumbered.unnumbered.member_of = [frozenset({"agg"})]
    assert candidates.search(model, [unnumbered]).hosts() == {"cn"}
    granular = ask({"MEMORY_MB": 1}, _1={"VGPU": 1})
    granular.group("1").member_of = [frozenset({"agg"})]
    assert candidates.search(model, [granular]).hosts() == set()


def test_sharing_disk_serves_the_roots_of_its_aggregate():
    model = model_of(
        Provider(uuid="nfs", inventories={"DISK_GB": Inventory(1000)},
                 traits=frozenset({MISC_SHARES_VIA_AGGREGATE}), aggregates=frozenset({"a"})),
        compute("in", aggs={"a"}), compute("out"))
    search = candidates.search(model, [ask({"VCPU": 1, "DISK_GB": 10})])
    assert search.hosts() == {"in"}
    [cand] = search.candidates_of("in")
    assert cand.allocations == {"in": {"VCPU": 1}, "nfs": {"DISK_GB": 10}}
    assert search.removed() == [("have no DISK_GB inventory", 1)]


def test_in_tree_and_root_traits():
    model = model_of(compute("a", traits={"OWNER_NOVA"}),
                     compute("b", traits={"OWNER_NOVA", "COMPUTE_STATUS_DISABLED"}),
                     compute("c"))
    request = ask({"VCPU": 1})
    request.root_required = {"OWNER_NOVA"}
    request.root_forbidden = {"COMPUTE_STATUS_DISABLED"}
    assert candidates.search(model, [request]).hosts() == {"a"}
    request = ask({"VCPU": 1})
    request.unnumbered.in_tree = "c"
    assert candidates.search(model, [request]).hosts() == {"c"}


def test_roots_asked_and_pcpu_fallback_merged():
    model = model_of(compute("vm1"), compute("vm2"),
                     Provider(uuid="pinned", inventories={"PCPU": Inventory(8),
                                                          "MEMORY_MB": Inventory(4096)}))
    pcpu, vcpu = ask({"PCPU": 2, "MEMORY_MB": 1}), ask({"VCPU": 2, "MEMORY_MB": 1})
    assert candidates.search(model, [pcpu, vcpu]).hosts() == {"vm1", "vm2", "pinned"}
    assert candidates.search(model, [pcpu, vcpu], roots=["vm1", "pinned"]).hosts() == {
        "vm1", "pinned"}
    # The live nodes change between requests (the index keeps the last list).
    assert candidates.search(model, [pcpu, vcpu], roots=["vm2", "gone"]).hosts() == {"vm2"}


# -- refusals and reasons -------------------------------------------------------------
@pytest.mark.parametrize("change, words", [
    (lambda r: r.unnumbered.required_traits.add("CUSTOM_NOPE"), "No such trait"),
    (lambda r: r.unnumbered.resources.update(CUSTOM_NOPE=1), "Invalid resource class"),
    (lambda r: (r.group("1").resources.update(VGPU=1), r.group("2").resources.update(VGPU=1)),
     "group_policy"),
])
def test_requests_placement_refuses(change, words):
    request = ask({"VCPU": 1})
    change(request)
    search = candidates.search(model_of(compute("a")), [request])
    assert words in search.refused and search.hosts() == set()


def test_removed_names_each_constraint_in_order():
    model = model_of(
        compute("ok", traits={"CUSTOM_SSD", "OWNER_NOVA"}),
        compute("disabled", traits={"CUSTOM_SSD", "OWNER_NOVA", "COMPUTE_STATUS_DISABLED"}),
        compute("no_ssd", traits={"OWNER_NOVA"}),
        compute("no_ssd2", traits={"OWNER_NOVA"}),
        compute("busy", traits={"CUSTOM_SSD", "OWNER_NOVA"}, used={"VCPU": 7}),
        # Lacks the trait too, but its missing PCPU comes first.
        Provider(uuid="vm_only", inventories={"MEMORY_MB": Inventory(10)},
                 traits=frozenset({"OWNER_NOVA"})))
    request = ask({"VCPU": 2})
    request.unnumbered.required_traits = {"CUSTOM_SSD"}
    request.root_forbidden = {"COMPUTE_STATUS_DISABLED"}
    search = candidates.search(model, [request])
    assert search.hosts() == {"ok"}
    assert search.removed() == [("have trait COMPUTE_STATUS_DISABLED", 1),
                                ("have no VCPU inventory", 1),
                                ("have no VCPU capacity for 2", 1),
                                ("lack trait CUSTOM_SSD", 2)]


# -- the fast path and the index ------------------------------------------------------
def test_flat_fast_path_agrees_with_building_candidates():
    rnd = random.Random(7)
    providers = []
    for i in range(300):
        providers.append(compute(
            f"n{i}", vcpu=rnd.choice([2, 4, 8]), used={"VCPU": rnd.randint(0, 8)},
            allocation_ratio=rnd.choice([0.9, 1.0, 1.5]), step_size=rnd.choice([1, 2]),
            traits=set(rnd.sample(sorted(TRAITS - {MISC_SHARES_VIA_AGGREGATE}), 2)),
            aggs=set(rnd.sample(["a", "b", "c"], rnd.randint(0, 2)))))
    model = model_of(*providers)
    for _ in range(30):
        request = ask({"VCPU": rnd.randint(1, 4), "MEMORY_MB": 1})
        if rnd.random() < 0.5:
            request.unnumbered.required_traits = {rnd.choice(["CUSTOM_SSD", "OWNER_NOVA"])}
        if rnd.random() < 0.5:
            request.unnumbered.member_of = [frozenset(rnd.sample(["a", "b", "c"], 1))]
        if rnd.random() < 0.3:
            request.group("1").resources = {"VCPU": 1}
        search = candidates.search(model, [request])
        built = {c.root for c in search.all_candidates()}
        assert search.hosts() == built


def test_index_follows_usages_and_new_providers():
    model = model_of(compute("a", vcpu=4))
    assert candidates.search(model, [ask({"VCPU": 4})]).hosts() == {"a"}
    index = index_of(model)
    model.add_usage({"a": {"VCPU": 1}})
    assert candidates.search(model, [ask({"VCPU": 4})]).hosts() == set()
    assert index_of(model) is index and index.version == model.version  # patched in place
    model.apply([compute("b", vcpu=4)])
    assert candidates.search(model, [ask({"VCPU": 4})]).hosts() == {"b"}
    model.add_usage({"a": {"VCPU": 1}}, sign=-1)
    assert candidates.search(model, [ask({"VCPU": 4})]).hosts() == {"a", "b"}


def test_tree_shortcut_agrees_with_building_candidates():
    # Trees (a root, NUMA children, a GPU) and sharing disks: hosts() takes
    # a shortcut (masks) where groups cannot interfere, also for roots that
    # hold the unnumbered group's required traits and serve one of its
    # classes; it must name the roots the per-tree search finds.
    rnd = random.Random(11)
    providers = [Provider(uuid=f"nfs{i}", inventories={"DISK_GB": Inventory(100)},
                          usages={"DISK_GB": rnd.randint(0, 100)},
                          traits=frozenset({MISC_SHARES_VIA_AGGREGATE}),
                          aggregates=frozenset({f"agg{i}"})) for i in range(2)]
    for i in range(80):
        root = f"cn{i}"
        providers.append(Provider(
            uuid=root, inventories={"MEMORY_MB": Inventory(1024)} if rnd.random() < 0.7 else {},
            usages={"MEMORY_MB": rnd.randint(0, 1024)},
            traits=frozenset(rnd.sample(["CUSTOM_SSD", "OWNER_NOVA"], rnd.randint(0, 2))),
            aggregates=frozenset(rnd.sample(["agg0", "agg1", "x"], rnd.randint(0, 2)))))
        for n in range(rnd.randint(0, 3)):
            providers.append(child(
                f"{root}-{n}", root, used={"VCPU": rnd.randint(0, 8)},
                traits=set(rnd.sample(["CUSTOM_SSD", "HW_CPU_X86_AVX2"], rnd.randint(0, 1))),
                aggs=set(rnd.sample(["agg0", "x"], rnd.randint(0, 1))),
                VCPU=Inventory(4, step_size=rnd.choice([1, 2]))))
    model = model_of(*providers)
    sharing = {"nfs0", "nfs1"}
    for _ in range(400):
        request = ask(dict(rnd.sample([("VCPU", rnd.randint(1, 4)), ("MEMORY_MB", 100),
                                       ("DISK_GB", rnd.randint(1, 60))], rnd.randint(1, 3))))
        if rnd.random() < 0.3:
            request.unnumbered.forbidden_traits = {rnd.choice(["CUSTOM_SSD", "HW_CPU_X86_AVX2"])}
        elif rnd.random() < 0.4:
            # Judged on the union of contributors: roots holding them that
            # serve a class are settled by masks, the others searched.
            request.unnumbered.required_traits = set(rnd.sample(
                ["CUSTOM_SSD", "HW_CPU_X86_AVX2"], rnd.randint(1, 2)))
        if rnd.random() < 0.3:
            request.unnumbered.member_of = [frozenset(rnd.sample(["agg0", "agg1", "x"], 1))]
        if rnd.random() < 0.2:
            request.unnumbered.forbidden_aggs = {rnd.choice(["agg0", "x"])}
        if rnd.random() < 0.3:
            request.root_required = {"OWNER_NOVA"}
        if rnd.random() < 0.5:
            # A granular group: alone in its class (the shortcut), or sharing
            # one with the unnumbered group or another group (the search).
            request.group("1").resources = {rnd.choice(["VCPU", "DISK_GB"]): 1}
            request.group("1").forbidden_traits = set(rnd.sample(["CUSTOM_SSD"], rnd.randint(0, 1)))
            if rnd.random() < 0.3:
                request.group("2").resources = {"VCPU": 1}
                request.group_policy = rnd.choice(["none", "isolate"])
        search = candidates.search(model, [request])
        built = {c.root for c in search.all_candidates() if c.root in c.allocations}
        assert search.hosts() == built - sharing, request


def test_tree_search_follows_claims():
    model = model_of(compute("cn"), child("gpu", "cn", VGPU=Inventory(2)))
    request = ask({"VCPU": 1}, _1={"VGPU": 2})
    assert candidates.search(model, [request]).hosts() == {"cn"}
    model.add_usage({"gpu": {"VGPU": 1}})
    assert candidates.search(model, [request]).hosts() == set()
    model.add_usage({"gpu": {"VGPU": 1}}, sign=-1)
    assert candidates.search(model, [request]).hosts() == {"cn"}


def test_merged_check_follows_claims():
    # Each group alone fits after the claim; only the merged check (the
    # provider summary) sees that both no longer do.
    model = model_of(compute("cn"), child("gpu", "cn", VGPU=Inventory(2)))
    request = ask({"VCPU": 1, "VGPU": 1}, _1={"VGPU": 1})
    request.group_policy = "none"
    assert candidates.search(model, [request]).hosts() == {"cn"}
    model.add_usage({"gpu": {"VGPU": 1}})
    assert candidates.search(model, [request]).hosts() == set()


def test_changed_since_names_what_moved_after_many_claims():
    model = model_of(compute("a"), compute("b"))
    for _ in range(3000):  # past the change log's compaction
        model.add_usage({"a": {"VCPU": 1}})
    at = model.version
    assert model.changed_since(at) == set()
    model.add_usage({"b": {"VCPU": 1}})
    assert model.changed_since(at) == {"b"}
    assert model.changed_since(at - 1) == {"a", "b"}
    assert model.changed_since(-1) == {"a", "b"}
