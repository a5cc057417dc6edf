"""Fixtures of the functional suite: real processes on the real RabbitMQ.

The session cloud is one ``nova-sched`` daemon and five
``nova-sched-fake-compute`` processes sharing a private vhost, exchange and
SQLite database (see cloudlib); tests share it because starting and
stopping processes costs seconds. Tests that need a differently shaped
cloud (retries, bad configuration, shutdown) build their own.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

import cloudlib

SESSION_COMPUTES = cloudlib.SESSION_COMPUTES


def _assert_clean_exit(codes: dict) -> None:
    """The contract's SIGTERM behaviour, checked at every cloud's end."""
    bad = {name: code for name, code in codes.items() if code != 0}
    assert not bad, f"processes that did not exit 0 on SIGTERM: {bad}"


@pytest.fixture(scope="session")
def rabbitmq():
    if not cloudlib.rabbit_reachable():
        pytest.fail("RabbitMQ is not answering on 127.0.0.1:5672: run "
                    "tools/ensure_rabbitmq.sh (run_tests.sh does)", pytrace=False)


@pytest.fixture(scope="module")
def broker(rabbitmq, request):
    """A vhost private to the test module, deleted after it."""
    tag = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_").replace("_", "")
    b = cloudlib.Broker(f"{tag}_{uuid.uuid4().hex[:8]}").open()
    try:
        yield b
    finally:
        b.close()



@pytest.fixture(scope="session")
def nova_venv():
    """Today's nova and its Placement in a venv of their own (made once, then reused)."""
    import novacloud

    try:
        return novacloud.ensure_venv()
    except novacloud.CloudError as err:
        pytest.fail(str(err), pytrace=False)


@pytest.fixture(scope="session")
def nova_python(nova_venv):
    """The python of that venv, to run nova's own code (drivers, capture tools)."""
    return nova_venv / "bin" / "python"


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    """A new directory per call for configs, databases and process logs.

    Under $NOVA_SCHED_TEST_DIR when set (kept for reading the logs after
    the run), else pytest's temporary directories.
    """
    root = os.environ.get("NOVA_SCHED_TEST_DIR")

    def _make(name: str) -> Path:
        if root:
            path = Path(root) / f"{name}-{uuid.uuid4().hex[:6]}"
            path.mkdir(parents=True)
            return path
        return tmp_path_factory.mktemp(name)

    return _make


@pytest.fixture(scope="session")
def cloud(rabbitmq, workdir):
    """The shared cloud: a daemon, five fake computes, a notification listener."""
    c = cloudlib.Cloud(workdir("cloud"), "session")
    try:
        c.db_sync()
        c.notifications = cloudlib.NotificationCollector(c.config_file)
        c.start_daemon()
        for host, (vcpus, ram, disk) in SESSION_COMPUTES.items():
            c.start_compute(host, vcpus, ram, disk)
        c.wait_for_nodes(list(SESSION_COMPUTES))
        yield c
    finally:
        listener = getattr(c, "notifications", None)
        if listener is not None:
            listener.close()
        codes = c.close()
    _assert_clean_exit(codes)
