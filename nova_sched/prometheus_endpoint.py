"""The daemon's HTTP endpoint: ``/metrics`` for Prometheus, ``/healthz``.

Served when ``[prometheus] enabled`` is true, on ``[prometheus] host`` and
``port``, by a small threaded HTTP server inside the daemon (the parent
process, with several workers). ``/metrics`` is prometheus_client's text
format; ``/healthz`` answers 200 and ``ok`` while the daemon is healthy,
503 and a one-line reason otherwise (``health``); ``/healthz?verbose``
adds, line by line, what happened lately (``details``: a broker failover,
publishes that waited for the broker, database transactions retried).
"""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

LOG = logging.getLogger(__name__)


class PrometheusEndpoint:
    """Serves ``registry`` on /metrics and ``health()`` on /healthz.

    ``before_scrape`` runs before each /metrics answer (sampling gauges);
    ``health`` returns None when healthy, else the reason; ``details``
    the lines ``/healthz?verbose`` adds.
    """

    def __init__(self, host: str, port: int, registry: CollectorRegistry,
                 health: Callable[[], str | None],
                 before_scrape: Callable[[], None] | None = None,
                 details: Callable[[], list[str]] | None = None):
        self.registry = registry
        self.health = health
        self.before_scrape = before_scrape
        self.details = details
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802  (http.server's name)
                endpoint._answer(self)

            def log_message(self, fmt, *args):
                # A scrape every few seconds would flood the daemon's log.
                LOG.debug("%s - %s", self.address_string(), fmt % args)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port listened on (the one asked for, or the one given for 0)."""
        return self._server.server_address[1]

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="prometheus-endpoint", daemon=True)
        self._thread.start()
        LOG.info("Serving /metrics and /healthz on %s:%d",
                 self._server.server_address[0], self.port)

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
        self._server.server_close()

    def close_in_child(self) -> None:
        """In a process forked from the one that opened the endpoint: close
        the inherited listening socket (the parent serves it)."""
        self._server.socket.close()

    def _answer(self, request: BaseHTTPRequestHandler) -> None:
        path, _, query = request.path.partition("?")
        try:
            if path == "/metrics":
                if self.before_scrape is not None:
                    self.before_scrape()
                status, ctype, body = 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)
            elif path == "/healthz":
                reason = self.health()
                status = 200 if reason is None else 503
                lines = [reason or "ok"]
                if "verbose" in query.split("&") and self.details is not None:
                    lines += self.details() or ["nothing happened lately"]
                body = ("\n".join(lines) + "\n").encode()
                ctype = "text/plain; charset=utf-8"
            else:
                status, ctype, body = 404, "text/plain; charset=utf-8", b"not found: try /metrics or /healthz\n"
        except Exception as err:  # an answer, never a dead endpoint thread
            LOG.exception("Answering %s failed", path)
            status, ctype = 500, "text/plain; charset=utf-8"
            body = f"{type(err).__name__}: {err}\n".encode()
        request.send_response(status)
        request.send_header("Content-Type", ctype)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)
