# -------------------------------------------------------------------------
#
# test_worker_session.py
#     Issue 20, item 10: what others set cannot stop the worker.
#
#     - A database owner's ALTER DATABASE ... SET (and settings of the
#       worker's role in that database) of default_transaction_read_only,
#       the isolation level and every timeout: the worker sets its own
#       values after connecting, and serves the database as before.
#
# -------------------------------------------------------------------------

import time

import pytest

from conftest import schedule, wait_final


def call(conn, sql, args=None):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        row = cur.fetchone() if cur.description else None
        return row[0] if row else None


def wait_pid(conn, other_than=None, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        pid = call(conn, "SELECT pid FROM jobflow.worker_status()"
                         " WHERE horizon_end IS NOT NULL")
        if pid is not None and pid != other_than:
            return pid
        time.sleep(0.1)
    pytest.fail("no jobflow worker (other than %s) after %d s" % (other_than, timeout))


def test_database_settings_do_not_stop_the_worker(databases, receiver):
    name, conn = databases()
    old = wait_pid(conn)
    version = call(conn, "SHOW server_version_num")
    settings = {
        "default_transaction_read_only": "on",
        "default_transaction_isolation": "serializable",
        "statement_timeout": "1ms",
        "lock_timeout": "1ms",
        "idle_in_transaction_session_timeout": "1ms",
    }
    if int(version) >= 170000:
        settings["transaction_timeout"] = "1ms"
    with databases.admin.cursor() as cur:
        for setting, value in settings.items():
            cur.execute("ALTER DATABASE %s SET %s = %%s" % (name, setting), (value,))
        # the worker's role (the bootstrap superuser), in that database
        cur.execute("ALTER ROLE postgres IN DATABASE %s SET default_transaction_read_only = on"
                    % name)
    # conn was opened before: its own session keeps the defaults
    call(conn, "SELECT pg_terminate_backend(%s)", (old,))
    wait_pid(conn, other_than=old)
    url, tag = receiver.unique_url("/ok")
    tasks = [schedule(conn, url + "&n=%d" % i) for i in range(3)]
    late = schedule(conn, url + "&n=late", run_at_sql="now() + interval '2 s'")
    call(conn, "SELECT jobflow.schedule_cron('every-second', '* * * * * *', %s)",
         (url + "&n=cron",))
    assert set(wait_final(conn, tasks + [late], timeout=30).values()) == {"succeeded"}
    receiver.wait_for(lambda r: ("t=" + tag) in r["query"] and "n=cron" in r["query"],
                      n=2, timeout=20)
    assert call(conn, "SELECT count(*) FROM jobflow.task_log WHERE task_id = ANY(%s)"
                      " AND outcome = 'succeeded'", (tasks + [late],)) == 4
    call(conn, "SELECT jobflow.unschedule_cron('every-second')")
