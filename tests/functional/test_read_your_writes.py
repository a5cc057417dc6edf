"""Read your writes, end to end: an operator's change, then at once a request.

A daemon over the real RabbitMQ, its host table refreshed from its own
thread, two fake computes reporting every half second. The test process
makes each change in the daemon's database exactly as ``nova-sched-manage``
does (the same ``nova_sched.db`` functions, without the command's second of
start-up, so that the request follows the commit within milliseconds), then
asks the daemon at once: ``select_destinations`` (which claims) and
``explain`` (which does not). A hundred rounds per kind of change.

``b1`` has twice ``a1``'s RAM: the RAM weigher sends every request there
unless the change just made takes it out of the request's reach.
"""

from __future__ import annotations

import uuid

import pytest

import cloudlib

pytestmark = pytest.mark.integration

ROUNDS = 100
FILTERS = ["RetryFilter", "ComputeFilter", "AvailabilityZoneFilter",
           "AggregateMultiTenancyIsolation"]
# Small enough that a hundred claims fit on either host.
TINY = cloudlib.flavor("tiny", 64, 1, 0)


@pytest.fixture(scope="module")
def cloud(rabbitmq, workdir):
    c = cloudlib.Cloud(workdir("read_your_writes"), "ryw")
    try:
        c.write_config(c.config_file, {"filter_scheduler": {
            "enabled_filters": FILTERS, "weight_classes": ["RAMWeigher"]}})
        c.db_sync()
        c.start_daemon()
        c.start_compute("a1", 64, 8192, 100, report_interval=0.5)
        c.start_compute("b1", 64, 16384, 100, report_interval=0.5)
        c.wait_for_nodes(["a1", "b1"])
        yield c
    finally:
        codes = c.close()
    assert all(code == 0 for code in codes.values()), \
        f"processes that did not exit 0 on SIGTERM: {codes}"


@pytest.fixture
def operator(cloud):
    """The daemon's database as this process's, for the manage command's
    functions."""
    from nova_sched.db import api as db_api

    engine = db_api.configure(cloud.db_url)
    yield
    engine.dispose()


def _ask(cloud, path: str, availability_zone=None) -> str | None:
    """The host the daemon picks for one tiny instance of project p1."""
    spec, fprops, _ = cloudlib.havana_request(TINY, project_id="p1",
                                              availability_zone=availability_zone)
    cctxt = cloud.client.client.prepare(version="2.10", timeout=30)
    ctxt = cloudlib.request_context(project_id="p1")
    if path == "explain":
        hosts = cctxt.call(ctxt, "explain", request_spec=spec,
                           filter_properties=fprops)["hosts"]
        return hosts[0]["host"] if hosts else None
    spec["instance_uuids"] = [str(uuid.uuid4())]
    (chosen,) = cctxt.call(ctxt, "select_destinations", request_spec=spec,
                           filter_properties=fprops)
    return chosen["host"]


def _rounds(cloud, change, expected, **ask):
    missed = []
    for round_ in range(ROUNDS):
        on = round_ % 2 == 0
        change(on)
        for path in ("select_destinations", "explain"):
            picked = _ask(cloud, path, **ask)
            if picked != expected[on]:
                missed.append((round_, "on" if on else "off", path, picked))
    assert missed == [], f"requests that missed the change just made: {missed}"


def test_tenant_isolation_set_and_cleared(cloud, operator):
    from nova_sched.db import aggregates

    aggregates.create("tenant-b")
    aggregates.add_host("tenant-b", "b1")
    try:
        _rounds(cloud, lambda on: aggregates.set_metadata(
            "tenant-b", {"filter_tenant_id": "tenant-b" if on else None}),
            {True: "a1", False: "b1"})
    finally:
        aggregates.delete("tenant-b")


def test_zone_joined_and_left(cloud, operator):
    from nova_sched.db import aggregates

    aggregates.create("zone-x", zone="zone-x")
    try:
        _rounds(cloud, lambda on: (aggregates.add_host if on else aggregates.remove_host)(
            "zone-x", "b1"), {True: "a1", False: "b1"}, availability_zone="nova")
    finally:
        aggregates.delete("zone-x")


def test_service_disabled_and_enabled(cloud, operator):
    from nova_sched.db import services

    try:
        _rounds(cloud, lambda on: services.disable("b1") if on else services.enable("b1"),
                {True: "a1", False: "b1"})
    finally:
        services.enable("b1")
