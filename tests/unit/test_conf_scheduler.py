"""[scheduler] options whose value depends on others."""

from __future__ import annotations

import pytest

from nova_sched.conf import CONF
from nova_sched.conf import scheduler as conf_scheduler


_SQLITE = "sqlite:////var/lib/nova-sched/nova_sched.sqlite"


@pytest.mark.parametrize("claims, database, workers, threads", [
    ("local", _SQLITE, 1, 1),
    ("local", _SQLITE, 2, 2),
    ("local", "postgresql+psycopg2://nova:pw@db.example/nova_sched", 1, 2),
    ("placement", _SQLITE, 1, 8),
    ("placement", "mysql+pymysql://nova:pw@db.example/nova_sched", 1, 8)])
def test_request_threads_unset_follow_the_claim_store_database_and_workers(
        claims, database, workers, threads):
    CONF.set_override("claims", claims, group="scheduler")
    CONF.set_override("connection", database, group="database")
    CONF.set_override("workers", workers, group="scheduler")
    try:
        assert conf_scheduler.request_threads(CONF) == threads
        CONF.set_override("request_threads", 5, group="scheduler")
        assert conf_scheduler.request_threads(CONF) == 5
    finally:
        CONF.clear_override("claims", group="scheduler")
        CONF.clear_override("connection", group="database")
        CONF.clear_override("workers", group="scheduler")
        CONF.clear_override("request_threads", group="scheduler")
