"""The daemon's threads named for the operating system as Python names them.

Python (before 3.14) leaves every thread of the process named ``python``
for the kernel, so ``top -H``, ``ps -L`` and ``/proc/<pid>/task/*/comm``
cannot tell the request threads from the consumer or the notification
sender; ``bench/e2e_bench.py`` reads each thread's CPU there. Linux takes
at most 15 bytes of a name; elsewhere nothing is done.
"""

from __future__ import annotations

import re
import threading

# The kernel's limit (TASK_COMM_LEN, 16 bytes with the terminating NUL).
_MAX_BYTES = 15


def os_name(name: str) -> bytes:
    """``name`` cut to the kernel's length, keeping a trailing number
    (``request-worker-1`` becomes ``request-worke-1``, not
    ``request-worker-``, which its sibling would share)."""
    raw = name.encode("utf-8", "replace")
    if len(raw) <= _MAX_BYTES:
        return raw
    number = re.search(rb"[-_.]?\d+$", raw)
    tail = number.group(0) if number and len(number.group(0)) < _MAX_BYTES else b""
    return raw[:_MAX_BYTES - len(tail)] + tail


def name_os_threads() -> int:
    """Give every live thread of the process its Python name in the kernel;
    how many were named. Cheap enough to repeat for threads started since.

    Through ``/proc/self/task/<tid>/comm``, not ``pthread_setname_np``: a
    thread that ends meanwhile is then a file not found, not a freed
    pthread handle.
    """
    named = 0
    for thread in threading.enumerate():
        tid = thread.native_id
        if tid is None or thread is threading.main_thread():
            continue
        try:
            with open(f"/proc/self/task/{tid}/comm", "wb") as comm:
                comm.write(os_name(thread.name))
        except OSError:  # not Linux, or the thread has ended
            continue
        named += 1
    return named
