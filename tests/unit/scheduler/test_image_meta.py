"""Image properties read as nova's ImageMetaProps reads them.

The examples and nova's answers come from nova itself
(tools/capture_nova_image_meta.py, run with nova 34's python): for each
image property dict, what ``ImageMetaProps.from_dict`` set (type, value
and ``str()``, which AggregateImagePropertiesIsolation compares) or that
it raised.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib

import pytest

from nova_sched.scheduler.wire import image_meta, nova_image_model

_CAPTURE = json.loads((pathlib.Path(__file__).parent / "fixtures"
                       / "image_meta_nova34.json").read_text())
EXAMPLES = _CAPTURE["examples"]


def _capture_tool():
    """The capture tool itself, for its encoding (it imports nova only on use)."""
    path = pathlib.Path(__file__).parents[3] / "tools" / "capture_nova_image_meta.py"
    spec = importlib.util.spec_from_file_location("capture_nova_image_meta", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# bool apart from int, sets apart from lists: as the capture wrote nova's values.
_typed = _capture_tool().encode


@pytest.mark.parametrize("example", EXAMPLES, ids=[e["shows"] for e in EXAMPLES])
def test_reads_as_nova_does(example):
    props, nova = example["properties"], example["nova"]
    if "error" in nova:
        with pytest.raises(image_meta.InvalidImageProperties) as err:
            image_meta.read(props)
        # The message names the property (as the image spelled it).
        assert any(f"image property {key}" in str(err.value) for key in props), err.value
        return
    ours = image_meta.read(props)
    assert {name: _typed(value) for name, value in ours.values.items()} == {
        name: field["value"] for name, field in nova["fields"].items()}
    for name, field in nova["fields"].items():
        if nova_image_model.FIELDS[name][0] == "list_of_cpu_sets":
            continue  # nova's text names its own set class: see test below
        assert str(ours.get(name)) == field["str"], name


def test_every_field_of_nova_model_has_an_example():
    shown = set()
    for example in EXAMPLES:
        shown.update(example["nova"].get("fields", {}))
    assert shown == set(nova_image_model.FIELDS)
    assert len(nova_image_model.FIELDS) == 86


def test_model_and_examples_come_from_the_same_nova():
    assert nova_image_model.NOVA_VERSION == _CAPTURE["nova"]
    assert nova_image_model.MODEL_VERSION == _CAPTURE["image_meta_props"]


def test_cpu_sets_compare_as_their_numbers():
    # nova's str() of hw_numa_cpus is "[CoercedSet({0, 1})]" (its class
    # name); nova-sched's is "[{0, 1}]". Either way the text holds a comma
    # for any cell of two CPUs, so no aggregate value split at commas ever
    # equals it: the two differ only for an aggregate naming nova's class.
    props = image_meta.read({"hw_numa_cpus.0": "0-1"})
    assert str(props.get("hw_numa_cpus")) == "[{0, 1}]"


def test_every_bad_property_is_named_with_its_value_and_the_rule():
    with pytest.raises(image_meta.InvalidImageProperties) as err:
        image_meta.read({"vm_mode": "paravirt", "hw_cpu_cores": "four",
                         "img_hv_requested_version": "6.0", "hw_rng_model": None})
    assert err.value.problems == [
        "image property vm_mode (nova's hw_vm_mode)='paravirt' must be one of "
        "hvm, xen, uml, exe",
        "image property hw_cpu_cores='four' must be a whole number",
        "image property hw_rng_model=None may not be null",
        "image property img_hv_requested_version='6.0' must be comparisons "
        "separated by commas, each an operator (<, <=, >, >=, ==, !=) and a "
        "version, such as >=6.0,<6.2",
    ]


def test_a_long_bad_value_is_shortened_in_the_message():
    with pytest.raises(image_meta.InvalidImageProperties) as err:
        image_meta.read({"hw_disk_bus": "x" * 500})
    assert len(str(err.value)) < 300 and "..." in str(err.value)


def test_unknown_properties_are_kept_apart_as_sent():
    props = image_meta.read({"architecture": "amd64", "custom_tier": "gold",
                             "hw_numa_cpus.0": "0", "trait:CUSTOM_A": "required",
                             "trait:CUSTOM_B": "forbidden", "vmware_adaptertype": "ide",
                             "traits_required": ["X"], "hw_numa_cpus": "0"})
    assert props.values == {"hw_architecture": "x86_64", "hw_numa_cpus": [{0}],
                            "traits_required": ["CUSTOM_A"], "hw_disk_bus": "ide"}
    assert props.unknown == {"custom_tier": "gold"}
    assert props.as_named("hw_architecture") == "x86_64"
    assert props.as_named("architecture") is None  # a legacy name is not a field
    assert props.as_named("custom_tier") == "gold"
    assert props.as_named("hw_vm_mode") is None


def test_nothing_to_read():
    assert image_meta.read(None) is image_meta.EMPTY
    assert image_meta.read({}).values == {}


def test_host_side_canonical_names_are_lenient():
    # What compute nodes report is canonicalised but not judged here.
    assert image_meta.canonical("AMD64", image_meta.ARCH_ALIASES) == "x86_64"
    assert image_meta.canonical("weird", image_meta.ARCH_ALIASES) == "weird"
    assert image_meta.canonical("", image_meta.HV_TYPE_ALIASES) is None
