"""nova-sched-healthcheck against a stand-in /healthz on 127.0.0.1.

The daemon's endpoint is replaced by a tiny http.server whose answer each
test chooses, so these tests check what a container's HEALTHCHECK relies
on: the exit code (0 healthy, 1 not, never Docker's reserved 2), the one
line explaining why, and that the check reads the daemon's configuration
(files and conf.d directory) to find the endpoint.
"""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from nova_sched.cmd import healthcheck


class _Answer:
    """What the stand-in endpoint answers; a test changes it."""

    status = 200
    body = b"ok: consuming topic scheduler\n"
    delay = 0.0


class _Handler(http.server.BaseHTTPRequestHandler):
    answer: _Answer
    paths: list[str]

    def do_GET(self) -> None:  # noqa: N802  (http.server's naming)
        self.paths.append(self.path)
        if self.answer.delay:
            time.sleep(self.answer.delay)
        self.send_response(self.answer.status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(self.answer.body)))
        self.end_headers()
        self.wfile.write(self.answer.body)

    def log_message(self, *args) -> None:
        pass  # Keep pytest's output clean.


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        pass  # The client gave up on a delayed answer: expected, not news.


def _serve(address: str, family: int) -> Iterator[tuple[int, _Answer, list[str]]]:
    answer, paths = _Answer(), []
    handler = type("Handler", (_Handler,), {"answer": answer, "paths": paths})
    server_cls = type("Server", (_Server,), {"address_family": family})
    server = server_cls((address, 0), handler)
    thread = threading.Thread(target=server.serve_forever,
                              kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], answer, paths
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def endpoint() -> Iterator[tuple[int, _Answer, list[str]]]:
    """(port, answer, requested paths) of a stand-in /healthz on 127.0.0.1."""
    yield from _serve("127.0.0.1", socket.AF_INET)


@pytest.fixture
def write_conf(tmp_path: Path) -> Callable[..., str]:
    def write(name: str = "nova-sched.conf", **prometheus) -> str:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        # Sections the check does not use must not bother it.
        lines = ["[DEFAULT]", "transport_url = rabbit://guest:guest@nowhere:5672/",
                 "[database]", "connection = sqlite:////nonexistent/db.sqlite",
                 "[prometheus]"]
        lines += [f"{key} = {value}" for key, value in prometheus.items()]
        path.write_text("\n".join(lines) + "\n")
        return str(path)

    return write


@pytest.fixture
def run(capsys) -> Callable[..., tuple[int, str, str]]:
    def _run(*argv: str) -> tuple[int, str, str]:
        code = healthcheck.main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return _run


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def _free_port() -> int:
    """A port nothing listens on (bound then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_healthy_exits_0_and_prints_the_body(endpoint, write_conf, run):
    port, answer, paths = endpoint
    conf = write_conf(enabled="true", host="127.0.0.1", port=port)
    code, out, err = run("--config-file", conf)
    assert (code, err) == (0, "")
    assert _one_line(out) == "ok: consuming topic scheduler"
    assert paths == ["/healthz"]


def test_unhealthy_503_exits_1_with_the_daemons_reason(endpoint, write_conf, run):
    port, answer, _ = endpoint
    answer.status = 503
    answer.body = b"not consuming: broker connection lost 42 s ago\n"
    code, out, err = run("--config-file", write_conf(enabled="true", port=port))
    assert code == 1 and out == ""
    line = _one_line(err)
    assert "503" in line
    assert "not consuming: broker connection lost 42 s ago" in line


@pytest.mark.parametrize("status", [204, 404, 500])
def test_any_other_status_is_unhealthy(endpoint, write_conf, run, status):
    # Something else on the port, or a daemon without /healthz.
    port, answer, _ = endpoint
    answer.status = status
    answer.body = b"" if status == 204 else b"<html>\n<p>not here</p>\n</html>\n"
    code, _out, err = run("--config-file", write_conf(enabled="true", port=port))
    assert code == 1
    assert str(status) in _one_line(err)


def test_connection_refused_exits_1_with_the_error(write_conf, run):
    port = _free_port()
    code, out, err = run("--config-file", write_conf(enabled="true", port=port))
    assert code == 1 and out == ""
    line = _one_line(err)
    assert f"127.0.0.1:{port}/healthz" in line
    assert "refused" in line.lower()


def test_a_hung_daemon_is_reported_within_the_timeout(endpoint, write_conf, run):
    port, answer, _ = endpoint
    answer.delay = 3.0
    started = time.monotonic()
    code, _out, err = run("--config-file", write_conf(enabled="true", port=port),
                          "--timeout", "0.3")
    assert time.monotonic() - started < 2.0
    assert code == 1
    assert "timed out" in _one_line(err) or "did not answer" in err


def test_disabled_endpoint_exits_1_naming_the_option(write_conf, run):
    code, out, err = run("--config-file", write_conf())  # enabled defaults to false
    assert code == 1 and out == ""
    line = _one_line(err)
    assert "disabled" in line
    assert "[prometheus] enabled" in line


def test_wildcard_listen_address_is_asked_on_loopback(endpoint, write_conf, run):
    # The image's conf.d listens on 0.0.0.0 for scraping.
    port, _answer, paths = endpoint
    code, _out, _err = run("--config-file",
                           write_conf(enabled="true", host="0.0.0.0", port=port))
    assert code == 0 and paths == ["/healthz"]


def _ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_ipv6_wildcard_is_asked_on_ipv6_loopback(write_conf, run):
    for port, _answer, paths in _serve("::1", socket.AF_INET6):
        code, _out, err = run("--config-file",
                              write_conf(enabled="true", host="::", port=port))
        assert (code, err) == (0, "")
        assert paths == ["/healthz"]


def test_conf_d_overrides_the_config_file(endpoint, write_conf, run, tmp_path):
    # The image's layout: the operator's nova-sched.conf leaves the endpoint
    # off, the shipped conf.d file turns it on.
    port, _answer, _paths = endpoint
    conf = write_conf(enabled="false", port=_free_port())
    write_conf("nova-sched.conf.d/50-health.conf", enabled="true",
               host="0.0.0.0")
    write_conf("nova-sched.conf.d/60-port.conf", port=port)
    code, _out, err = run("--config-file", conf,
                          "--config-dir", str(tmp_path / "nova-sched.conf.d"))
    assert (code, err) == (0, "")


def test_a_proxy_in_the_environment_is_not_used(endpoint, write_conf, run,
                                                monkeypatch):
    # Containers often carry http_proxy for their outbound traffic.
    port, _answer, paths = endpoint
    for name in ("http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{_free_port()}")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    code, _out, err = run("--config-file", write_conf(enabled="true", port=port))
    assert (code, err) == (0, "")


def test_missing_config_file_exits_1_not_2(run, tmp_path):
    code, _out, err = run("--config-file", str(tmp_path / "absent.conf"))
    assert code == 1
    assert "absent.conf" in _one_line(err)


def test_bad_value_in_the_config_exits_1_with_one_line(write_conf, run):
    code, _out, err = run("--config-file", write_conf(enabled="true", port="http"))
    assert code == 1
    assert "port" in _one_line(err)


@pytest.mark.parametrize("argv", [["--timeout", "soon"], ["--no-such-flag"]])
def test_bad_usage_exits_1_not_dockers_reserved_2(run, argv):
    code, _out, _err = run(*argv)
    assert code == 1


def test_console_script(endpoint, write_conf, tmp_path):
    """The installed command, as the HEALTHCHECK runs it."""
    script = Path(sys.executable).with_name("nova-sched-healthcheck")
    command = [str(script)] if script.exists() else [
        sys.executable, "-m", "nova_sched.cmd.healthcheck"]
    port, answer, _paths = endpoint
    conf = write_conf(enabled="true", port=port)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}

    def probe() -> subprocess.CompletedProcess:
        return subprocess.run([*command, "--config-file", conf], env=env,
                              capture_output=True, text=True, timeout=60)

    result = probe()
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok: consuming topic scheduler"

    answer.status, answer.body = 503, b"not consuming: stopping\n"
    result = probe()
    assert result.returncode == 1
    assert "not consuming: stopping" in _one_line(result.stderr)
