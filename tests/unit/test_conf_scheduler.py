"""[scheduler] options whose value depends on others."""

from __future__ import annotations

import pytest

from nova_sched.conf import CONF
from nova_sched.conf import scheduler as conf_scheduler


@pytest.mark.parametrize("claims, database, threads", [
    ("local", "sqlite:////var/lib/nova-sched/nova_sched.sqlite", 1),
    ("local", "postgresql+psycopg2://nova:pw@db.example/nova_sched", 2),
    ("placement", "sqlite:////var/lib/nova-sched/nova_sched.sqlite", 8),
    ("placement", "mysql+pymysql://nova:pw@db.example/nova_sched", 8)])
def test_request_threads_unset_follow_the_claim_store_and_database(
        claims, database, threads):
    CONF.set_override("claims", claims, group="scheduler")
    CONF.set_override("connection", database, group="database")
    try:
        assert conf_scheduler.request_threads(CONF) == threads
        CONF.set_override("request_threads", 5, group="scheduler")
        assert conf_scheduler.request_threads(CONF) == 5
    finally:
        CONF.clear_override("claims", group="scheduler")
        CONF.clear_override("connection", group="database")
        CONF.clear_override("request_threads", group="scheduler")
