# -------------------------------------------------------------------------
#
# test_restore_marks.py
#     Issue 20, item 2: a session marks itself as restoring jobflow's
#     tables (and the worker claims nothing while it lives) only when it
#     may write those rows: a COPY into jobflow.task_log, or into tasks or
#     cron_timers with their ids, by a role without table-level INSERT or
#     held to row-level security fails and marks nothing.  A mark ends
#     with the transaction that made it if that transaction aborts, and at
#     DISCARD ALL (what a pooler runs before handing a connection on).
#
#     Before, any role with USAGE on the schema (jobflow_monitor, so every
#     member of pg_monitor) paused every callback of the database with one
#     failed COPY, until its session ended.
#
# The restore modes themselves are test_restore.py's.
#
# -------------------------------------------------------------------------

import io
import time
import uuid

import psycopg2
import pytest

from conftest import schedule, wait_final

# a task due now fires well within this while a session holds a failed COPY
FIRES_WITHIN = 20


def failed_copy(conn, sql, data="1\t2\t3\n"):
    """Run COPY ... FROM STDIN on conn and return the error it raises."""
    with pytest.raises(psycopg2.Error) as e:
        with conn.cursor() as cur:
            cur.copy_expert(sql, io.StringIO(data))
    return e.value


def fires(db, receiver, timeout=FIRES_WITHIN):
    """A task due now is sent and succeeds within timeout."""
    url, tag = receiver.unique_url("/ok")
    task = schedule(db, url)
    receiver.wait_for(lambda r: ("t=" + tag) in r["query"], timeout=timeout)
    assert wait_final(db, task, timeout=timeout) == "succeeded"


@pytest.fixture
def login_role(db):
    """Factory: login_role(*granted) -> a fresh LOGIN role granted those
    roles; dropped at the end of the test."""
    names = []

    def make(*granted):
        name = "jf_mark_" + uuid.uuid4().hex[:8]
        with db.cursor() as cur:
            cur.execute("CREATE ROLE %s LOGIN" % name)
            for g in granted:
                cur.execute("GRANT %s TO %s" % (g, name))
        names.append(name)
        return name
    yield make
    with db.cursor() as cur:
        for name in names:
            cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE usename = %s", (name,))
            cur.execute("DROP OWNED BY %s" % name)
            cur.execute("DROP ROLE %s" % name)


RESTORE_COPIES = [
    "COPY jobflow.task_log FROM STDIN",
    "COPY jobflow.tasks (id, url) FROM STDIN",
    "COPY jobflow.cron_timers (id, name, schedule, url) FROM STDIN",
]


@pytest.mark.parametrize("granted", ["pg_monitor", "jobflow_monitor", "jobflow_user"])
def test_copy_without_the_right_to_write_pauses_nothing(granted, db, connect, receiver,
                                                         login_role):
    """A monitoring role (a member of pg_monitor, as every metrics exporter
    is) and an application role try what a restore writes; each COPY fails
    for lack of permission, the session stays open, and a task due
    meanwhile fires."""
    role = login_role(granted)
    session = connect(user=role)
    for sql in RESTORE_COPIES:
        err = failed_copy(session, sql)
        assert err.pgcode == "42501", (sql, err.pgcode, str(err))
    fires(db, receiver)
    # still open, still harmless
    with session.cursor() as cur:
        cur.execute("SELECT 1")
    fires(db, receiver)


def test_failed_copy_of_the_owner_leaves_no_mark(db, connect, receiver):
    """The extension's owner may restore, but a COPY of its that fails
    rolls its mark back with it: in a transaction (and a savepoint) that
    goes on, and in autocommit."""
    session = connect(autocommit=False)
    with session.cursor() as cur:
        cur.execute("SAVEPOINT s")
    err = failed_copy(session, "COPY jobflow.task_log FROM STDIN", "not a log row\n")
    assert err.pgcode == "22P02", err.pgcode
    with session.cursor() as cur:
        cur.execute("ROLLBACK TO SAVEPOINT s")
        cur.execute("SELECT 1")
    fires(db, receiver)
    session.commit()
    fires(db, receiver)

    session.autocommit = True
    err = failed_copy(session, "COPY jobflow.tasks (id, url) FROM STDIN", "x\ty\n")
    assert err.pgcode == "22P02", err.pgcode
    fires(db, receiver)


def test_a_restore_mark_ends_at_discard_all(db, connect, receiver):
    """A COPY that a restore would run, committed, pauses the worker for
    the rest of the session (test_restore.py relies on it); DISCARD ALL, a
    pooler's reset, ends it, and the task due meanwhile fires."""
    session = connect()
    with session.cursor() as cur:
        cur.copy_expert("COPY jobflow.task_log FROM STDIN", io.StringIO(""))
    url, tag = receiver.unique_url("/ok")
    task = schedule(db, url)
    time.sleep(2.0)
    assert receiver.tagged(tag) == [], "fired while a restore was in progress"
    with session.cursor() as cur:
        cur.execute("DISCARD ALL")
    receiver.wait_for(lambda r: ("t=" + tag) in r["query"], timeout=FIRES_WITHIN)
    assert wait_final(db, task) == "succeeded"
