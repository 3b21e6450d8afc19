# -------------------------------------------------------------------------
#
# test_quotas.py
#     Issue 20, item 6 (a): a role may have at most
#     jobflow.max_queues_per_role configured queues and
#     jobflow.max_timers_per_role cron timers.  One more is refused with
#     53400, the count in the detail and the setting in the hint; two
#     transactions cannot both take the last place; the settings are for
#     the whole server (superuser, not per role, database or session); a
#     restore brings back what it dumped.
#
# -------------------------------------------------------------------------

import io
import threading
import time

import psycopg2
import pytest

from conftest import call, query


def error_of(conn, sql, args=None):
    with pytest.raises(psycopg2.Error) as e:
        call(conn, sql, args)
    if not conn.autocommit:
        conn.rollback()
    return e.value


@pytest.fixture
def limits(db, server):
    """Factory: limits(queues=, timers=) sets the per-role limits for the
    server and waits until a new session sees them; reset at the end."""
    names = []

    def set_limits(queues=None, timers=None):
        for name, value in (("jobflow.max_queues_per_role", queues),
                            ("jobflow.max_timers_per_role", timers)):
            if value is None:
                continue
            server.set_guc(db, name, value)
            names.append(name)
            deadline = time.time() + 10
            while call(db, "SELECT current_setting(%s)", (name,)) != str(value):
                assert time.time() < deadline, "%s not reloaded" % name
                time.sleep(0.1)
    yield set_limits
    for name in names:
        server.set_guc(db, name, None)


@pytest.fixture
def tenant(connect, new_role):
    role = new_role()
    conn = connect()
    call(conn, "SET ROLE %s" % role)
    return role, conn


def test_queues_per_role(tenant, limits):
    role, conn = tenant
    limits(queues=3)
    call(conn, "SELECT jobflow.set_queue('a', max_concurrent => 2)")
    call(conn, "SELECT jobflow.pause_queue('b')")
    call(conn, "SELECT jobflow.set_queue('c', priority => 1)")
    for sql in ("SELECT jobflow.set_queue('d')", "SELECT jobflow.pause_queue('d')"):
        e = error_of(conn, sql)
        assert e.pgcode == "53400", (sql, e.pgcode, str(e))
        assert e.diag.message_primary == \
            'role "%s" may not configure more than 3 queues' % role
        assert e.diag.message_detail == "It has 3 configured queues (rows of jobflow.queues)."
        assert "jobflow.max_queues_per_role" in e.diag.message_hint
        assert "jobflow.drop_queue()" in e.diag.message_hint
    # what it has it may change; a place freed may be taken
    call(conn, "SELECT jobflow.set_queue('a', max_concurrent => 5)")
    assert call(conn, "SELECT jobflow.pause_queue('a')") is True
    assert call(conn, "SELECT jobflow.resume_queue('b')") is True
    assert call(conn, "SELECT jobflow.drop_queue('c')") is True
    call(conn, "SELECT jobflow.pause_queue('d')")
    assert call(conn, "SELECT count(*) FROM jobflow.queues WHERE owner = %s::regrole",
                (role,)) == 3


def test_admin_naming_an_owner_meets_that_owners_limit(db, tenant, limits):
    role, conn = tenant
    limits(queues=1)
    call(conn, "SELECT jobflow.pause_queue('mine')")
    e = error_of(db, "SELECT jobflow.set_queue('by_admin', owner => %s::regrole)", (role,))
    assert e.pgcode == "53400"
    assert role in e.diag.message_primary


def test_timers_per_role(tenant, limits, receiver):
    role, conn = tenant
    limits(timers=2)
    url, _ = receiver.unique_url("/ok")
    call(conn, "SELECT jobflow.schedule_cron('t1', '0 3 * * *', %s)", (url,))
    call(conn, "SELECT jobflow.schedule_cron('t2', '0 4 * * *', %s, active => false)", (url,))
    e = error_of(conn, "SELECT jobflow.schedule_cron('t3', '0 5 * * *', %s)", (url,))
    assert e.pgcode == "53400", (e.pgcode, str(e))
    assert e.diag.message_primary == 'role "%s" may not have more than 2 cron timers' % role
    assert e.diag.message_detail == "It has 2 cron timers."
    assert "jobflow.max_timers_per_role" in e.diag.message_hint
    # a plain INSERT is held to it too
    e = error_of(conn, "INSERT INTO jobflow.cron_timers (name, schedule, url)"
                       " VALUES ('t3', '0 5 * * *', %s)", (url,))
    assert e.pgcode == "53400"
    # replacing a timer by name is no new timer; a deleted one frees its place
    call(conn, "SELECT jobflow.schedule_cron('t1', '0 6 * * *', %s)", (url,))
    call(conn, "SELECT jobflow.unschedule_cron('t2')")
    call(conn, "SELECT jobflow.schedule_cron('t3', '0 5 * * *', %s)", (url,))
    assert call(conn, "SELECT count(*) FROM jobflow.cron_timers") == 2


def test_one_statement_cannot_pass_the_limit(tenant, limits, receiver):
    """The rows a statement inserted before count for its next ones."""
    role, conn = tenant
    limits(timers=5)
    url, _ = receiver.unique_url("/ok")
    e = error_of(conn, "INSERT INTO jobflow.cron_timers (name, schedule, url, active)"
                       " SELECT 'bulk' || g, '0 3 * * *', %s, false"
                       "   FROM generate_series(1, 50) g", (url,))
    assert e.pgcode == "53400"
    assert e.diag.message_detail == "It has 5 cron timers."
    assert call(conn, "SELECT count(*) FROM jobflow.cron_timers") == 0


@pytest.mark.parametrize("isolation", ["read committed", "repeatable read"])
def test_two_transactions_cannot_both_take_the_last_place(isolation, connect, new_role,
                                                          limits):
    """Two sessions of one role each create a queue while one place is
    left: the second waits for the first, then is refused (at either
    isolation level: its snapshot, taken before the first committed, does
    not hide the first one's row from the count)."""
    role = new_role()
    limits(queues=2)
    one, two = connect(autocommit=False), connect(autocommit=False)
    call(one, "SET ROLE %s" % role)
    call(one, "SELECT jobflow.set_queue('zero')")
    one.commit()
    for conn in (one, two):
        call(conn, "SET TRANSACTION ISOLATION LEVEL %s" % isolation)
        call(conn, "SET LOCAL ROLE %s" % role)
        call(conn, "SELECT count(*) FROM jobflow.queues")   # the snapshot is taken
    two_pid = call(two, "SELECT pg_backend_pid()")
    call(one, "SELECT jobflow.set_queue('first')")
    result = {}

    def second():
        try:
            call(two, "SELECT jobflow.pause_queue('second')")
            two.commit()
            result["ok"] = True
        except psycopg2.Error as e:
            two.rollback()
            result["error"] = e

    thread = threading.Thread(target=second)
    thread.start()
    watcher = connect()
    deadline = time.time() + 10
    while call(watcher, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s"
                        " AND wait_event_type = 'Lock'", (two_pid,)) == 0:
        if time.time() > deadline or not thread.is_alive():
            break
        time.sleep(0.05)
    one.commit()
    thread.join(20)
    assert not thread.is_alive()
    assert "error" in result, "both transactions took the last place"
    assert result["error"].pgcode == "53400", str(result["error"])
    assert call(watcher, "SELECT count(*) FROM jobflow.queues WHERE owner = %s::regrole",
                (role,)) == 2


def test_limits_are_for_the_whole_server(db, tenant, new_role):
    """Superuser settings, and not per role, database or session: a value
    there would let some sessions of a role make what the others count."""
    role, conn = tenant
    e = error_of(conn, "SET jobflow.max_queues_per_role = 100000")
    assert e.pgcode == "42501"
    for sql in ("SET jobflow.max_queues_per_role = 5",
                "SET jobflow.max_timers_per_role = 5",
                "ALTER ROLE %s SET jobflow.max_queues_per_role = 5000" % role,
                "ALTER DATABASE jobflow SET jobflow.max_timers_per_role = 5000"):
        e = error_of(db, sql)
        assert e.pgcode == "22023", (sql, e.pgcode, str(e))
        assert "postgresql.conf" in e.diag.message_detail
    assert query(db, "SHOW jobflow.max_queues_per_role")[0]["jobflow.max_queues_per_role"] == "1000"
    assert query(db, "SHOW jobflow.max_timers_per_role")[0]["jobflow.max_timers_per_role"] == "1000"


def test_a_restore_brings_back_more_than_the_limit(db, connect, tenant, limits, receiver):
    """A restore's COPY of timers (with their ids) is not held to the
    limit: it brings back what was dumped."""
    role, conn = tenant
    limits(timers=1)
    url, _ = receiver.unique_url("/ok")
    ids = [call(db, "SELECT nextval('jobflow.cron_timers_id_seq')") for _ in range(3)]
    data = "".join("%d\trestored%d\t%s\t0 3 * * *\t%s\tf\n" % (i, i, role, url) for i in ids)
    restorer = connect()
    try:
        with restorer.cursor() as cur:
            cur.copy_expert("COPY jobflow.cron_timers (id, name, owner, schedule, url, active)"
                            " FROM STDIN", io.StringIO(data))
    finally:
        restorer.close()        # the restore is over: the worker goes on
    assert call(db, "SELECT count(*) FROM jobflow.cron_timers WHERE owner = %s::regrole",
                (role,)) == 3
    e = error_of(conn, "SELECT jobflow.schedule_cron('more', '0 3 * * *', %s)", (url,))
    assert e.pgcode == "53400"
