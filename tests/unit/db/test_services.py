"""Compute services: disable and enable move changed_at, never the heartbeat."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.db import api as db_api
from nova_sched.db import models
from nova_sched.db import services

HEARTBEAT = dt.datetime(2030, 1, 2, 3, 4, 5)


@pytest.fixture
def rows(db):
    """h1 runs nova-compute; h2 runs only another service."""
    with db_api.session_scope() as session:
        session.add_all(
            [
                models.Service(host="h1", binary="nova-compute", topic="compute",
                               updated_at=HEARTBEAT, changed_at=5),
                models.Service(host="h2", binary="nova-conductor",
                               updated_at=HEARTBEAT, changed_at=5),
            ]
        )


def _row(host: str, binary: str = "nova-compute") -> models.Service:
    with db_api.session_scope() as session:
        return session.scalars(
            sa.select(models.Service).where(
                models.Service.host == host, models.Service.binary == binary
            )
        ).one()


def test_disable_then_enable(rows):
    result = services.disable("h1", reason="maintenance")
    disabled = _row("h1")
    assert result["disabled"] is True
    assert (disabled.disabled, disabled.disabled_reason) == (True, "maintenance")
    assert disabled.changed_at > 5
    assert disabled.updated_at == HEARTBEAT

    services.enable("h1")
    enabled = _row("h1")
    assert (enabled.disabled, enabled.disabled_reason) == (False, None)
    assert enabled.changed_at >= disabled.changed_at
    assert enabled.updated_at == HEARTBEAT


def test_disable_without_reason(rows):
    services.disable("h1")
    assert (_row("h1").disabled, _row("h1").disabled_reason) == (True, None)


@pytest.mark.parametrize("host", ["nowhere", "h2"])
def test_host_without_compute_service_is_an_error(rows, host):
    with pytest.raises(exception.ServiceNotFound, match=host):
        services.disable(host)
    with pytest.raises(exception.ServiceNotFound, match=host):
        services.enable(host)
    assert _row("h2", "nova-conductor").disabled is False


def test_too_long_reason_is_refused(rows):
    with pytest.raises(exception.InvalidInput):
        services.disable("h1", reason="r" * 256)
    assert _row("h1").disabled is False


def test_list_all_says_which_services_are_up(rows):
    CONF.set_override("service_down_time", 60)
    now = db_api.utcnow()
    with db_api.session_scope() as session:
        session.execute(
            sa.update(models.Service)
            .where(models.Service.host == "h1")
            .values(updated_at=now - dt.timedelta(seconds=10))
        )
        session.execute(
            sa.update(models.Service)
            .where(models.Service.host == "h2")
            .values(updated_at=now - dt.timedelta(seconds=90))
        )

    listed = {(s["host"], s["binary"]): s for s in services.list_all()}

    assert listed[("h1", "nova-compute")]["up"] is True
    assert listed[("h2", "nova-conductor")]["up"] is False
    assert listed[("h1", "nova-compute")]["topic"] == "compute"


def test_is_up_follows_service_down_time():
    CONF.set_override("service_down_time", 30)
    now = dt.datetime(2030, 1, 1, 0, 0, 0)
    assert services.is_up(now - dt.timedelta(seconds=30), now)
    assert not services.is_up(now - dt.timedelta(seconds=31), now)
    # A compute clock slightly ahead is not "down".
    assert services.is_up(now + dt.timedelta(seconds=5), now)
    assert not services.is_up(None, now)
