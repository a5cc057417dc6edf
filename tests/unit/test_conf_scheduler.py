"""[scheduler] options whose value depends on others."""

from __future__ import annotations

import pytest

from nova_sched.conf import CONF
from nova_sched.conf import scheduler as conf_scheduler


@pytest.mark.parametrize("claims, threads", [("local", 2), ("placement", 8)])
def test_request_threads_unset_follow_the_claim_store(claims, threads):
    CONF.set_override("claims", claims, group="scheduler")
    try:
        assert conf_scheduler.request_threads(CONF) == threads
        CONF.set_override("request_threads", 5, group="scheduler")
        assert conf_scheduler.request_threads(CONF) == 5
    finally:
        CONF.clear_override("claims", group="scheduler")
        CONF.clear_override("request_threads", group="scheduler")
