"""The daemon's threads carry their Python names in the kernel (top -H,
/proc/<pid>/task/*/comm), within the kernel's 15 bytes."""

from __future__ import annotations

import sys
import threading

import pytest

from nova_sched.os_thread_names import name_os_threads, os_name


def test_long_names_keep_their_number():
    assert os_name("topic-consumer") == b"topic-consumer"
    assert os_name("request-worker-0") == b"request-worke-0"
    assert os_name("request-worker-1") != os_name("request-worker-0")
    assert len(os_name("compute-casts-heartbeat")) == 15
    assert len(os_name("é" * 20)) <= 15


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_every_thread_is_named_as_python_names_it():
    done = threading.Event()
    threads = [threading.Thread(target=done.wait, name=f"request-worker-{i}")
               for i in range(2)]
    for thread in threads:
        thread.start()
    try:
        assert name_os_threads() >= 2
        names = [open(f"/proc/self/task/{t.native_id}/comm", "rb").read().strip()
                 for t in threads]
        assert names == [b"request-worke-0", b"request-worke-1"]
    finally:
        done.set()
        for thread in threads:
            thread.join()
