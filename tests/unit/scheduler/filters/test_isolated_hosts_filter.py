"""IsolatedHostsFilter: nova's truth table of isolated images and hosts."""

from __future__ import annotations

import pytest

from nova_sched.conf import CONF
from nova_sched.scheduler.filters.isolated_hosts_filter import IsolatedHostsFilter
from tests.unit.scheduler import fakes

ISO_IMAGE, OTHER_IMAGE = "isolated-image", "other-image"


def _outcomes(image_id, isolated_images, isolated_hosts, restrict):
    """host -> passes for isolated host 'iso' (two nodes) and other host
    'other'."""
    CONF.set_override("isolated_images", isolated_images, "filter_scheduler")
    CONF.set_override("isolated_hosts", isolated_hosts, "filter_scheduler")
    CONF.set_override("restrict_isolated_hosts_to_isolated_images", restrict,
                      "filter_scheduler")
    table = fakes.make_table([dict(host="iso", nodename="iso-a"),
                              dict(host="iso", nodename="iso-b"),
                              dict(host="other")])
    spec = fakes.make_spec(image_id=image_id)
    kept = fakes.passes(IsolatedHostsFilter(), table, spec)
    one = [node in kept for node in (("iso", "iso-a"), ("iso", "iso-b"), ("other", "other"))]
    assert one[0] == one[1]  # every node of a host alike
    return {"iso": one[0], "other": one[2]}


def test_defaults():
    fs = CONF.filter_scheduler
    assert fs.isolated_images == [] and fs.isolated_hosts == []
    assert fs.restrict_isolated_hosts_to_isolated_images is True


# (image isolated, host isolated) -> passes, nova's two result matrices.
@pytest.mark.parametrize("restrict,image,expected", [
    (True, ISO_IMAGE, {"iso": True, "other": False}),
    (True, OTHER_IMAGE, {"iso": False, "other": True}),
    (False, ISO_IMAGE, {"iso": True, "other": False}),
    (False, OTHER_IMAGE, {"iso": True, "other": True}),
])
def test_truth_table(restrict, image, expected):
    assert _outcomes(image, [ISO_IMAGE], ["iso"], restrict) == expected


@pytest.mark.parametrize("restrict,expected", [
    (True, {"iso": False, "other": True}),
    (False, {"iso": True, "other": True}),
])
def test_no_isolated_images(restrict, expected):
    # nova: with no images to match, isolated hosts take nothing when
    # restricted, everything otherwise.
    assert _outcomes(OTHER_IMAGE, [], ["iso"], restrict) == expected


@pytest.mark.parametrize("restrict", [True, False])
def test_no_isolated_hosts(restrict):
    # An isolated image with no isolated host has nowhere to go.
    assert _outcomes(ISO_IMAGE, [ISO_IMAGE], [], restrict) == {"iso": False, "other": False}
    assert _outcomes(OTHER_IMAGE, [ISO_IMAGE], [], restrict) == {"iso": True, "other": True}


def test_nothing_configured_passes_everything():
    assert _outcomes(OTHER_IMAGE, [], [], True) == {"iso": True, "other": True}


def test_image_from_instance_properties_when_the_image_has_no_id():
    CONF.set_override("isolated_images", [ISO_IMAGE], "filter_scheduler")
    CONF.set_override("isolated_hosts", ["iso"], "filter_scheduler")
    table = fakes.make_table([dict(host="iso"), dict(host="other")])
    spec = fakes.make_spec(image_id="")
    spec.instance_properties["image_ref"] = ISO_IMAGE
    assert spec.image_id == ISO_IMAGE
    assert fakes.passes(IsolatedHostsFilter(), table, spec) == [("iso", "iso")]
