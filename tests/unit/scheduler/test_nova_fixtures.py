"""Sanity checks of the primitives captured from real nova.

The files under fixtures/novaNN/ were written by
tools/capture_nova_primitives.py running inside a venv with that nova (see
fixtures/README.txt). These tests only check that they are what they claim
to be; decoding them is tested elsewhere.
"""

from __future__ import annotations

import json
import pathlib

import pytest

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
NOVA_DIRS = sorted(p for p in FIXTURES.glob("nova*") if p.is_dir())

REQUEST_SPEC_CASES = (
    "boot_minimal",
    "boot_full",
    "boot_anti_affinity_group",
    "reschedule_with_retry",
    "requested_destination",
    "multi_create_3",
)
WIRE_FILES = (
    "wire_select_destinations_4_5",
    "wire_select_destinations_4_3",
    "wire_select_destinations_4_0",
    "wire_update_aggregates",
    "wire_delete_aggregate",
    "wire_update_instance_info",
    "wire_delete_instance_info",
    "wire_sync_instance_info",
)


def _load(path: pathlib.Path):
    with path.open() as f:
        return json.load(f)


def _is_nova_primitive(prim, name: str | None = None) -> bool:
    return (isinstance(prim, dict)
            and prim.get("nova_object.namespace") == "nova"
            and (name is None or prim.get("nova_object.name") == name)
            and isinstance(prim.get("nova_object.version"), str)
            and isinstance(prim.get("nova_object.data"), dict))


def test_both_nova_versions_captured():
    assert [p.name for p in NOVA_DIRS] == ["nova29", "nova34"]


@pytest.fixture(params=NOVA_DIRS, ids=lambda p: p.name)
def nova_dir(request) -> pathlib.Path:
    return request.param


@pytest.fixture
def manifest(nova_dir):
    return _load(nova_dir / "manifest.json")


def test_every_file_parses_and_is_listed(nova_dir, manifest):
    on_disk = sorted(p.name for p in nova_dir.glob("*.json"))
    assert on_disk == sorted(manifest["files"])
    for path in nova_dir.glob("*.json"):
        _load(path)


def test_manifest_nova_version_matches_dir(nova_dir, manifest):
    major = nova_dir.name[len("nova"):]
    assert manifest["packages"]["nova"].split(".")[0] == major


@pytest.mark.parametrize("case", REQUEST_SPEC_CASES)
def test_request_spec_primitive(nova_dir, manifest, case):
    prim = _load(nova_dir / f"{case}.json")
    assert _is_nova_primitive(prim, "RequestSpec")
    recorded = manifest["object_versions"]["RequestSpec"]
    assert prim["nova_object.version"] == recorded
    assert manifest["request_spec_fixtures"][f"{case}.json"] == recorded
    data = prim["nova_object.data"]
    assert _is_nova_primitive(data["flavor"], "Flavor")
    assert data["flavor"]["nova_object.version"] == \
        manifest["object_versions"]["Flavor"]
    if data.get("image") is not None:
        image = data["image"]
        assert _is_nova_primitive(image, "ImageMeta")
        assert image["nova_object.version"] == \
            manifest["object_versions"]["ImageMeta"]
        props = image["nova_object.data"]["properties"]
        assert props["nova_object.version"] == \
            manifest["object_versions"]["ImageMetaProps"]


def test_multi_create_spec(nova_dir):
    data = _load(nova_dir / "multi_create_3.json")["nova_object.data"]
    assert data["num_instances"] == 3


def test_select_destinations_4_5_carries_boot_full(nova_dir):
    wire = _load(nova_dir / "wire_select_destinations_4_5.json")
    msg = wire["message"]
    assert msg["method"] == "select_destinations"
    assert msg["version"] == "4.5"
    assert wire["target"]["topic"] == "scheduler"
    args = msg["args"]
    assert args["return_objects"] is True
    assert args["return_alternates"] is True
    assert args["spec_obj"] == _load(nova_dir / "boot_full.json")


@pytest.mark.parametrize("name", WIRE_FILES)
def test_wire_files_have_target_ctxt_message(nova_dir, name):
    wire = _load(nova_dir / f"{name}.json")
    assert set(wire) >= {"target", "ctxt", "message", "call"}
    method = name[len("wire_"):]
    if method.startswith("select_destinations"):
        assert wire["call"] is True and not wire["target"]["fanout"]
        method = "select_destinations"
    else:
        assert wire["call"] is False and wire["target"]["fanout"] is True
    assert wire["message"]["method"] == method
    assert "args" in wire["message"] and "version" in wire["message"]


def test_legacy_select_destinations_4_0(nova_dir):
    args = _load(nova_dir / "wire_select_destinations_4_0.json")[
        "message"]["args"]
    assert set(args) == {"request_spec", "filter_properties"}


@pytest.mark.parametrize("name", ("selection", "selection_with_limits"))
def test_selection_primitive(nova_dir, manifest, name):
    prim = _load(nova_dir / f"{name}.json")
    assert _is_nova_primitive(prim, "Selection")
    assert prim["nova_object.version"] == \
        manifest["object_versions"]["Selection"] == "1.1"
    limits = prim["nova_object.data"]["limits"]
    assert _is_nova_primitive(limits, "SchedulerLimits")
    assert limits["nova_object.version"] == "1.0"
