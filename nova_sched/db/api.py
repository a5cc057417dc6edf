"""Engine, sessions and the retry policy for transient database errors."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import logging
import os
import random
import socket
import threading
import time
import uuid
from typing import Callable, Iterator, TypeVar

import sqlalchemy as sa
from sqlalchemy import event, exc as sa_exc
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from nova_sched import exception
from nova_sched.db import driver_sql, wal_checkpoints
from nova_sched.db.writers_lock import WritersLock

LOG = logging.getLogger(__name__)

_lock = threading.Lock()
_engine: sa.Engine | None = None
_sessionmaker: sessionmaker | None = None
_url: str | None = None
# SQLite has one writer at a time (every transaction here takes the write
# lock up front), and a connection that finds it taken polls with sleeps
# of up to 100 ms: with several threads that turns a millisecond's wait
# into a tenth of a second. This process's transactions therefore queue on
# a lock of their own (db.writers_lock); other processes sharing the file
# still meet SQLite's busy timeout. An in-memory database is one
# connection shared by all threads, which must take turns anyway.
_sqlite_lock: WritersLock | None = None
# The WAL checkpoints of the configured engine's SQLite file.
_checkpointer: wal_checkpoints.WalCheckpointer | None = None

T = TypeVar("T")

# Execution option marking a connection that only reads (read_session).
_READ_ONLY = "nova_sched_read_only"


def utcnow() -> dt.datetime:
    """Naive UTC, the form nova's tables store."""
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def now_us() -> int:
    """Microseconds since the epoch: the stamp of a row's last change."""
    return time.time_ns() // 1000


_writer: tuple[int, str] | None = None


def writer_id() -> str:
    """This process's name in ``changed_by`` (new after a fork)."""
    global _writer
    pid = os.getpid()
    if _writer is None or _writer[0] != pid:
        _writer = (pid, f"{socket.gethostname()[:40]}:{pid}:{uuid.uuid4().hex[:8]}")
    return _writer[1]


# PyMySQL waits forever by default. A Galera node that dies leaves its
# clients with nothing to read and stalls every writer on the other nodes
# for 4-6 s while the cluster drops it: reads must wait out that stall (a
# COMMIT that timed out may still have committed), connections must not
# wait for a dead address. Values in the URL's query win.
MYSQL_TIMEOUTS = {"connect_timeout": 3, "read_timeout": 20, "write_timeout": 20}
POSTGRESQL_TIMEOUTS = {"connect_timeout": 3}


def _is_memory(url: str) -> bool:
    return url in ("sqlite://", "sqlite:///:memory:")


def create_engine(url: str, own_checkpoints: bool = False) -> sa.Engine:
    """An engine tuned for the scheduler's short transactions.

    ``own_checkpoints``: a ``WalCheckpointer`` checkpoints a SQLite file's
    WAL; its writers do only past the checkpointer's safety net.
    """
    kwargs: dict = {}
    memory = _is_memory(url)
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        if memory:
            # One connection shared by every thread, so that the whole
            # process (the embedded demo) sees one in-memory database.
            kwargs["poolclass"] = StaticPool
        else:
            # Each SQLite connection keeps a page cache, which a write by
            # another connection empties. Handed out in turn (the pool's
            # default), a thread met a cold cache on every transaction:
            # some forty page reads a boot request. The connection
            # returned last comes back instead, its cache warm.
            kwargs["pool_use_lifo"] = True
    else:
        kwargs["pool_pre_ping"] = True
        kwargs["pool_recycle"] = 3600
        parsed = sa.engine.make_url(url)
        defaults = (MYSQL_TIMEOUTS if parsed.get_backend_name() == "mysql"
                    else POSTGRESQL_TIMEOUTS
                    if parsed.get_backend_name() == "postgresql" else {})
        kwargs["connect_args"] = {key: value for key, value in defaults.items()
                                  if key not in parsed.query}
    engine = sa.create_engine(url, **kwargs)
    if url.startswith("sqlite"):

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):
            # Let SQLAlchemy's "begin" hook below open transactions itself.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            # Several processes share a file database in test clouds; WAL
            # lets readers run beside the one writer.
            if not memory:
                cur.execute("PRAGMA journal_mode=WAL")
                # In WAL mode NORMAL survives any process crash and loses at
                # most the last commits on power loss; FULL would fsync every
                # one of the several commits per instance. Production clouds
                # use PostgreSQL or MariaDB.
                cur.execute("PRAGMA synchronous=NORMAL")
                if own_checkpoints:
                    cur.execute("PRAGMA wal_autocheckpoint="
                                f"{wal_checkpoints.SAFETY_NET_PAGES}")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn):
            # A deferred transaction that reads, then writes, fails at once
            # with SQLITE_BUSY when another process wrote in between; taking
            # the write lock up front makes writers queue on busy_timeout.
            # Readers (read_session) take a snapshot and no lock.
            # On the driver's cursor (``driver_sql.run``): exec_driver_sql
            # cost each hot transaction a statement's worth of Python.
            statement = ("BEGIN" if conn.get_execution_options().get(_READ_ONLY)
                         else "BEGIN IMMEDIATE")
            driver_sql.run(conn, statement).close()

    return engine


def configure(url: str) -> sa.Engine:
    """Use ``url`` for every session from now on (replacing any engine)."""
    global _engine, _sessionmaker, _url, _sqlite_lock, _checkpointer
    with _lock:
        if _checkpointer is not None:
            _checkpointer.stop()
            _checkpointer = None
        if _engine is not None:
            _engine.dispose()
        own_checkpoints = wal_checkpoints.checkpointed_here(url)
        _engine = create_engine(url, own_checkpoints)
        _sessionmaker = sessionmaker(bind=_engine, expire_on_commit=False)
        _url = url
        _sqlite_lock = WritersLock() if url.startswith("sqlite") else None
        if own_checkpoints:
            _checkpointer = wal_checkpoints.WalCheckpointer(url, _sqlite_lock).start()
        return _engine


def get_engine() -> sa.Engine:
    if _engine is None:
        from nova_sched.conf import CONF

        configure(CONF.database.connection)
    assert _engine is not None
    return _engine


@contextlib.contextmanager
def session_scope() -> Iterator[Session]:
    """A session whose transaction commits on success, rolls back on error."""
    get_engine()
    assert _sessionmaker is not None
    lock = _sqlite_lock or contextlib.nullcontext()
    with lock:
        session = _sessionmaker()
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()


@contextlib.contextmanager
def transaction(bulk: bool = False) -> Iterator[sa.Connection]:
    """A Core connection in a transaction: the cheap path for hot writes.

    Decisions write a few rows per instance; the ORM's unit of work costs
    ten times what these plain statements do. ``bulk``: one of a batch's
    transactions (compute reports), which on a SQLite file lets this
    process's writers already waiting go first (``WritersLock.after_waiters``).
    """
    engine = get_engine()
    lock = _sqlite_lock
    if lock is None:
        lock = contextlib.nullcontext()
    elif bulk:
        lock = lock.after_waiters()
    with lock:
        with engine.begin() as conn:
            yield conn


@contextlib.contextmanager
def read_session() -> Iterator[Session]:
    """A session for reading only: nothing it does is committed.

    On a SQLite file it neither takes the write lock nor queues behind
    this process's writers: WAL gives it a consistent snapshot beside
    them. Elsewhere it is an ordinary transaction.
    """
    engine = get_engine()
    lock = _sqlite_lock if _url is not None and _is_memory(_url) else None
    with lock or contextlib.nullcontext():
        with engine.connect() as conn:
            conn.execution_options(**{_READ_ONLY: True})
            session = Session(bind=conn)
            try:
                yield session
            finally:
                session.rollback()
                session.close()


# Why a failed statement is worth running its whole transaction again, by
# the server's error code. Galera rejects a transaction that conflicts with
# one committed on another node at certification, as a deadlock (1213);
# a node leaving or joining the cluster answers 1047 until it is synced.
_MYSQL_CONFLICTS = {1213: "deadlock", 1205: "lock wait timeout"}
_MYSQL_UNAVAILABLE = {1047: "cluster node not ready", 2003: "cannot connect",
                      2006: "server gone away", 2013: "connection lost",
                      1927: "connection killed", 4031: "disconnected by server"}
_PG_CONFLICTS = {"40001": "serialization failure", "40P01": "deadlock"}
# Connection trouble named in the message (PostgreSQL, SQLite and driver
# errors that carry no code); SQLite's "database is locked" is contention.
_DISCONNECT_MARKERS = (
    "connection",
    "server has gone away",
    "lost connection",
    "could not connect",
    "database is locked",
    "terminating",
    "closed",
    "unable to open database",
    "connection refused",
)

# Callbacks told of each retry with its reason ("deadlock", "connection
# lost", ...): the daemon counts them for /metrics.
_retry_listeners: list[Callable[[str], None]] = []


def add_retry_listener(listener: Callable[[str], None]) -> None:
    """Call ``listener(reason)`` each time a transaction is retried."""
    _retry_listeners.append(listener)


def remove_retry_listener(listener: Callable[[str], None]) -> None:
    """Stop calling ``listener`` (a no-op if it was not added)."""
    if listener in _retry_listeners:
        _retry_listeners.remove(listener)


def transient_reason(err: BaseException) -> str | None:
    """Why running ``err``'s transaction again may succeed, or None.

    Two kinds: the transaction lost to a concurrent one (a deadlock, a
    Galera certification conflict, a serialization failure: nothing was
    written, so running it again is always safe), or the connection went
    away (the server died, failed over, or is not ready). A connection lost
    during COMMIT leaves unknown whether the transaction committed: every
    write retried by ``retry_on_disconnect`` must therefore give the same
    result run twice (claims replace the instance's earlier claim, releases
    count what they delete, reports overwrite).
    """
    if not isinstance(err, sa_exc.DBAPIError):
        return None
    orig = err.orig
    code = orig.args[0] if orig is not None and orig.args else None
    if isinstance(code, int):
        reason = _MYSQL_CONFLICTS.get(code) or _MYSQL_UNAVAILABLE.get(code)
        if reason:
            return reason
    pgcode = getattr(orig, "pgcode", None)
    if pgcode in _PG_CONFLICTS:
        return _PG_CONFLICTS[pgcode]
    if err.connection_invalidated:
        return "connection lost"
    if isinstance(err, sa_exc.OperationalError):
        text = str(orig).lower() if orig is not None else str(err).lower()
        if "deadlock" in text:
            return "deadlock"
        if any(m in text for m in _DISCONNECT_MARKERS):
            return "connection lost"
        return None
    if isinstance(err, sa_exc.InterfaceError):
        return "connection lost"
    return None


def _conflict(reason: str) -> bool:
    return reason in _MYSQL_CONFLICTS.values() or reason in _PG_CONFLICTS.values()


def retry_on_disconnect(func: Callable[..., T]) -> Callable[..., T]:
    """Run ``func`` (one whole transaction) again while it fails for a
    transient reason (``transient_reason``): a lost connection, a deadlock
    or a Galera certification conflict.

    After ``[database] operation_retries`` failures the error becomes
    DatabaseUnavailable, which callers turn into a visible failure (or
    park the request until the database is back).
    """

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        attempts = None  # read at the first failure: most calls have none
        delay = 0.1
        attempt = 0
        while True:
            attempt += 1
            try:
                return func(*args, **kwargs)
            except sa_exc.SQLAlchemyError as err:
                reason = transient_reason(err)
                if reason is None:
                    raise
                if attempts is None:
                    from nova_sched.conf import CONF

                    attempts = CONF.database.operation_retries + 1
                for listener in _retry_listeners:
                    listener(reason)
                if attempt == attempts:
                    raise exception.DatabaseUnavailable(
                        f"{func.__name__}: {reason} ({type(err).__name__}) "
                        f"after {attempts} attempts"
                    ) from err
                if _conflict(reason):
                    # The winner has committed: go again at once, a little
                    # apart from the other losers.
                    pause = random.uniform(0.005, 0.03) * attempt
                else:
                    pause = delay
                    delay = min(delay * 2, 2.0)
                LOG.warning(
                    "Database %s in %s (attempt %d of %d), retrying in %.2fs",
                    reason,
                    func.__name__,
                    attempt,
                    attempts,
                    pause,
                )
                time.sleep(pause)

    return wrapper


def ping() -> None:
    """One ``SELECT 1``: returns if the database answers, else raises the
    driver's error (an SQLAlchemyError)."""
    with get_engine().connect() as conn:
        conn.execute(sa.text("SELECT 1"))


def wait_for_database(retries: int, interval: float) -> None:
    """Block until the database answers; DatabaseUnavailable after retries."""
    last: Exception | None = None
    for attempt in range(retries + 1):
        try:
            ping()
            return
        except sa_exc.SQLAlchemyError as err:
            last = err
            LOG.warning(
                "Database not reachable (attempt %d of %d): %s",
                attempt + 1,
                retries + 1,
                type(err).__name__,
            )
            if attempt < retries:
                time.sleep(interval)
    raise exception.DatabaseUnavailable(
        f"not reachable after {retries + 1} attempts ({type(last).__name__})"
    )
