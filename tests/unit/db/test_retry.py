"""Which database errors re-run a transaction, and how the retry behaves.

Galera rejects a transaction that lost certification to a write on another
node as a deadlock (MySQL error 1213); a node leaving the cluster answers
1047 or drops the connection. Every one of those must re-run the whole
transaction; an error in the statement itself must not.
"""

from __future__ import annotations

import threading

import pymysql
import pytest
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.db import api as db_api
from tests.db_backends import temporary_database


def _mysql_error(code: int, message: str) -> sa_exc.OperationalError:
    return sa_exc.OperationalError("UPDATE compute_nodes ...", {},
                                   pymysql.err.OperationalError(code, message))


@pytest.mark.parametrize("code,message,reason", [
    (1213, "Deadlock found when trying to get lock; try restarting transaction",
     "deadlock"),
    (1205, "Lock wait timeout exceeded; try restarting transaction",
     "lock wait timeout"),
    (1047, "WSREP has not yet prepared node for application use",
     "cluster node not ready"),
    (2013, "Lost connection to MySQL server during query", "connection lost"),
    (2003, "Can't connect to MySQL server on '127.0.0.1' ([Errno 111] "
     "Connection refused)", "cannot connect"),
])
def test_galera_and_connection_errors_are_transient(code, message, reason):
    assert db_api.transient_reason(_mysql_error(code, message)) == reason


def test_errors_of_the_statement_itself_are_not_transient():
    duplicate = sa_exc.IntegrityError(
        "INSERT ...", {}, pymysql.err.IntegrityError(1062, "Duplicate entry"))
    syntax = sa_exc.ProgrammingError(
        "SELEC 1", {}, pymysql.err.ProgrammingError(1064, "You have an error"))
    assert db_api.transient_reason(duplicate) is None
    assert db_api.transient_reason(syntax) is None
    assert db_api.transient_reason(ValueError("not a database error")) is None


def test_a_deadlocked_transaction_runs_again_until_it_commits():
    CONF.set_override("operation_retries", 5, group="database")
    calls = []
    reasons = []
    db_api.add_retry_listener(reasons.append)

    @db_api.retry_on_disconnect
    def write():
        calls.append(1)
        if len(calls) < 3:
            raise _mysql_error(1213, "Deadlock found when trying to get lock")
        return "committed"

    try:
        assert write() == "committed"
    finally:
        db_api.remove_retry_listener(reasons.append)
    assert len(calls) == 3
    assert reasons == ["deadlock", "deadlock"]


def test_a_statement_error_is_raised_at_once():
    calls = []

    @db_api.retry_on_disconnect
    def write():
        calls.append(1)
        raise sa_exc.IntegrityError("INSERT", {}, pymysql.err.IntegrityError(
            1062, "Duplicate entry"))

    with pytest.raises(sa_exc.IntegrityError):
        write()
    assert len(calls) == 1


def test_retries_run_out_into_database_unavailable_naming_the_reason():
    CONF.set_override("operation_retries", 2, group="database")

    @db_api.retry_on_disconnect
    def write():
        raise _mysql_error(1213, "Deadlock found when trying to get lock")

    with pytest.raises(exception.DatabaseUnavailable, match="deadlock.*3 attempts"):
        write()


@pytest.mark.parametrize("url,expected", [
    ("mysql+pymysql://root@127.0.0.1:1/nova",
     {"connect_timeout": 3, "read_timeout": 20, "write_timeout": 20}),
    ("mysql+pymysql://root@127.0.0.1:1/nova?read_timeout=7",
     {"connect_timeout": 3, "read_timeout": 7, "write_timeout": 20}),
    ("postgresql+psycopg2://postgres@127.0.0.1:1/nova", {"connect_timeout": 3}),
])
def test_server_engines_never_wait_forever(url, expected):
    """What the driver is asked to connect with (port 1: nothing answers)."""
    engine = db_api.create_engine(url)
    seen = {}

    @sa.event.listens_for(engine, "do_connect")
    def _capture(dialect, conn_rec, cargs, cparams):
        seen.update(cparams)

    try:
        with pytest.raises(sa_exc.OperationalError):
            engine.connect()
    finally:
        engine.dispose()
    got = {key: int(seen[key]) for key in expected}
    assert got == expected


def _deadlock(engine: sa.Engine) -> BaseException:
    """Two transactions that lock two rows in opposite orders: the server
    picks one as the deadlock's victim. Returns the victim's error."""
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE pair (id INTEGER PRIMARY KEY, n INTEGER)"))
        conn.execute(sa.text("INSERT INTO pair VALUES (1, 0), (2, 0)"))
    first_locked = threading.Barrier(2)
    errors: list[BaseException] = []

    def cross(first: int, second: int) -> None:
        try:
            with engine.begin() as conn:
                conn.execute(sa.text("UPDATE pair SET n = n + 1 WHERE id = :i"),
                             {"i": first})
                first_locked.wait(10)
                conn.execute(sa.text("UPDATE pair SET n = n + 1 WHERE id = :i"),
                             {"i": second})
        except sa_exc.DBAPIError as err:
            errors.append(err)

    threads = [threading.Thread(target=cross, args=(1, 2)),
               threading.Thread(target=cross, args=(2, 1))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(errors) == 1, errors
    return errors[0]


@pytest.mark.parametrize("backend", ["mysql", "postgresql"])
def test_a_real_server_deadlock_is_recognised(backend):
    with temporary_database(backend) as url:
        engine = db_api.create_engine(url)
        try:
            err = _deadlock(engine)
        finally:
            engine.dispose()
    assert db_api.transient_reason(err) == "deadlock", repr(err)
