"""The request context in log lines: follows changes, never shows the token."""

from __future__ import annotations

import logging

from oslo_config import cfg
from oslo_log import formatters
from oslo_log import log as oslo_logging

from nova_sched import rpc


def _line(ctxt) -> str:
    """A log line as oslo.log's formatter writes it for ``ctxt``."""
    conf = cfg.ConfigOpts()
    oslo_logging.register_options(conf)
    conf([])
    formatter = formatters.ContextFormatter(config=conf)
    record = logging.LogRecord("nova_sched.test", logging.INFO, __file__, 1,
                               "placed", None, None)
    record.context = ctxt
    return formatter.format(record)


def test_log_lines_follow_a_context_changed_after_its_first_line():
    ctxt = rpc.RequestContext.from_wire({"request_id": "req-first", "user": "alice",
                                         "project_id": "p1", "auth_token": "s3cret"})
    assert "req-first" in _line(ctxt) and "alice" in _line(ctxt)
    ctxt.request_id = "req-second"
    ctxt.user_id = "bob"
    line = _line(ctxt)
    assert "req-second" in line and "bob" in line
    assert "req-first" not in line and "alice" not in line
    assert ctxt.get_logging_values()["auth_token"] == "***"
    assert "s3cret" not in line
