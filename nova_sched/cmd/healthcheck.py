"""``nova-sched-healthcheck``: ask a running daemon whether it is healthy.

    nova-sched-healthcheck [--config-file FILE] [--config-dir DIR] [--timeout S]

Made for a container's ``HEALTHCHECK`` (and any other probe that runs a
command): the slim image has no curl or wget, and this needs nothing but
the Python standard library and the daemon's own configuration. It reads the
same configuration files as ``nova-sched`` to find the ``[prometheus]``
endpoint, then GETs ``/healthz`` on it.

Exit codes follow Docker's HEALTHCHECK contract: 0 when the daemon answers
200 (its one-line body is printed on stdout); 1 for anything else -- another
status (the daemon's one-line reason is printed), no answer (the connection
error is printed), the endpoint disabled, or a bad command line or
configuration -- with one line on stderr. Never 2, which Docker reserves.
"""

from __future__ import annotations

import http.client
import ipaddress
import sys
import urllib.error
import urllib.request
from typing import Sequence

from oslo_config import cfg

from nova_sched.conf import prometheus

PROG = "nova-sched-healthcheck"

# A reason longer than this is not a health message (something else answers
# on the port); Docker keeps only the first 4 KiB of output anyway.
_MAX_BODY = 4096
_MAX_LINE = 300

_cli_opts = [
    cfg.FloatOpt(
        "timeout",
        default=5.0,
        min=0.1,
        help="Seconds to wait for the daemon to connect and answer. Keep it "
        "below the HEALTHCHECK's --timeout so that a hung daemon is "
        "reported with a reason rather than killed.",
    ),
]


class _Unhealthy(Exception):
    """The one-line reason the check failed."""


def _load_conf(argv: Sequence[str]) -> cfg.ConfigOpts:
    # A private ConfigOpts: the check needs only [prometheus], and must start
    # fast every few seconds without importing the scheduler. The options are
    # the daemon's own definitions, so both read the files the same way;
    # every other section of nova-sched.conf is ignored.
    conf = cfg.ConfigOpts()
    prometheus.register_opts(conf)
    conf.register_cli_opts(_cli_opts)
    conf(
        list(argv),
        project="nova-sched",
        prog=PROG,
        description="Exit 0 if the nova-sched daemon's /healthz answers 200, "
        "else 1 with the reason.",
    )
    return conf


def _probe_host(host: str) -> str:
    """The address to connect to for a daemon listening on ``host``."""
    # A wildcard listen address is not an address to connect to: the daemon
    # listens on loopback too, and the check runs on the same machine.
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


def healthz_url(host: str, port: int) -> str:
    host = _probe_host(host)
    try:
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:
        pass  # A host name.
    return f"http://{host}:{port}/healthz"


def _one_line(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace").strip()
    line = text.splitlines()[0].strip() if text else ""
    if len(line) > _MAX_LINE:
        line = line[:_MAX_LINE] + "..."
    return line


def check(url: str, timeout: float) -> str:
    """The daemon's one-line answer when it is healthy; else _Unhealthy."""
    # No proxy: an http_proxy set for the container's other traffic must not
    # send a loopback health request to a proxy.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as response:
            status = response.status
            body = _one_line(response.read(_MAX_BODY))
    except urllib.error.HTTPError as err:
        # The daemon answered, unhealthy (503) or not serving /healthz.
        try:
            reason = _one_line(err.read(_MAX_BODY))
        except (OSError, http.client.HTTPException):
            reason = ""
        finally:
            err.close()
        raise _Unhealthy(
            f"{url} answered {err.code}: {reason or err.reason}") from None
    except urllib.error.URLError as err:
        raise _Unhealthy(f"cannot reach {url}: {err.reason}") from None
    except TimeoutError:
        raise _Unhealthy(f"{url} did not answer within {timeout:g} s") from None
    except (OSError, http.client.HTTPException) as err:
        # The connection dropped or the answer was not HTTP.
        raise _Unhealthy(f"{url}: {type(err).__name__}: {err}") from None
    if status != 200:
        # 2xx other than 200, or a 3xx urllib did not follow.
        raise _Unhealthy(f"{url} answered {status}: {body}")
    return body or "ok"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the check; returns the exit code (0 healthy, 1 not)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        try:
            conf = _load_conf(argv)
        except SystemExit as exc:
            # argparse: --help (0), or bad usage (2, usage already printed)
            # which must not become Docker's reserved exit code 2.
            return 0 if exc.code in (0, None) else 1
        # oslo.config checks a file's values when they are read, below.
        if not conf.prometheus.enabled:
            raise _Unhealthy(
                "the health endpoint is disabled: set [prometheus] enabled = "
                "true in the daemon's configuration to serve /healthz"
            )
        url = healthz_url(conf.prometheus.host, conf.prometheus.port)
        print(check(url, conf.timeout))
        return 0
    except cfg.Error as exc:
        _error(f"bad configuration: {exc}")
    except _Unhealthy as exc:
        _error(str(exc))
    except Exception as exc:  # noqa: BLE001  (a probe prints one line, never a traceback)
        _error(f"unexpected {type(exc).__name__}: {exc}")
    return 1


def _error(message: str) -> None:
    lines = message.strip().splitlines() or [""]
    print(f"{PROG}: {lines[0]}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
