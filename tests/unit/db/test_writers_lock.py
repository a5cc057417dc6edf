"""The writers' lock of a SQLite file: a bulk writer's next transaction
lets the writers already waiting go first, without waiting for ever."""

from __future__ import annotations

import threading
import time

from nova_sched.db.writers_lock import WritersLock


def _wait_until(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_a_waiting_writer_goes_before_the_bulk_writers_next_transaction():
    lock = WritersLock(patience=5.0)
    order = []
    lock.acquire()  # the bulk writer's current transaction

    def claim():
        with lock:
            order.append("claim")

    claimer = threading.Thread(target=claim)
    claimer.start()
    _wait_until(lambda: lock.waiting() == 1)
    lock.release()
    # Without stepping aside the bulk writer would take the lock straight
    # back, the claim still waking up.
    with lock.after_waiters():
        order.append("bulk")
    claimer.join(5)
    assert order == ["claim", "bulk"]


def test_a_bulk_writer_waits_no_longer_than_its_patience():
    lock = WritersLock(patience=0.05)
    holder_in, holder_out = threading.Event(), threading.Event()

    def hold():
        with lock:
            holder_in.set()
            holder_out.wait(5)

    threading.Thread(target=hold, daemon=True).start()
    holder_in.wait(5)
    waiter = threading.Thread(target=lambda: lock.acquire() and lock.release(),
                              daemon=True)
    waiter.start()
    _wait_until(lambda: lock.waiting() == 1)
    took = []

    def bulk():
        with lock.after_waiters():
            took.append(time.monotonic())

    started = time.monotonic()
    bulker = threading.Thread(target=bulk, daemon=True)
    bulker.start()
    time.sleep(0.2)
    # Still held: the bulk writer, past its patience, now waits for the
    # lock itself like any writer.
    assert not took and lock.waiting() == 2
    holder_out.set()
    bulker.join(5)
    waiter.join(5)
    assert took and took[0] - started >= 0.05


def test_the_lock_is_reentrant_and_only_its_holder_releases_it():
    lock = WritersLock()
    with lock:
        with lock.after_waiters():  # its holder does not wait for itself
            with lock:
                pass
        other = threading.Thread(target=lambda: errors.append(_try_release(lock)))
        errors: list = []
        other.start()
        other.join(5)
        assert isinstance(errors[0], RuntimeError)
    # Released as many times as taken: free for another thread.
    got = threading.Event()

    def take():
        with lock:
            got.set()

    threading.Thread(target=take, daemon=True).start()
    assert got.wait(5)


def _try_release(lock):
    try:
        lock.release()
    except RuntimeError as err:
        return err
    return None
