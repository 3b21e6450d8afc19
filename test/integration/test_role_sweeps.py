# -------------------------------------------------------------------------
#
# test_role_sweeps.py
#     Issue 20, item 6 (c): changes of roles that drop none (a role with no
#     grant at all changing its own password in a loop) sweep nothing, and
#     the worker looks at the roles at most once per
#     jobflow.reconcile_interval however fast they change; a role dropped,
#     from any database, is still swept.
#
# The counters are the worker's (jobflow.stats); the tests run one at a
# time, so a delta around a statement is its own.
#
# -------------------------------------------------------------------------

import time
import uuid

import psycopg2

from conftest import call, query, schedule, settle, stat, wait_final


def test_password_changes_in_a_loop_sweep_nothing(db, connect, receiver):
    """A role with no grant at all changes its own password 200 times while
    the worker is busy: before, each change made every worker of the
    cluster sweep every pending task; now the worker looks at the roles at
    most once per reconcile interval, and sweeps nothing (no role is gone).
    A role dropped afterwards is still swept."""
    name = "jf_pw_" + uuid.uuid4().hex[:8]
    with db.cursor() as cur:
        cur.execute("CREATE ROLE %s LOGIN PASSWORD 'start'" % name)
    try:
        attacker = connect(user=name)
        interval = call(db, "SELECT setting::int FROM pg_settings"
                            " WHERE name = 'jobflow.reconcile_interval'") / 1000.0
        url, tag = receiver.unique_url("/ok")
        checks, sweeps = settle(db, "role_checks_total"), stat(db, "role_sweeps_total")
        started = time.time()
        tasks = []
        for i in range(200):
            call(attacker, "ALTER ROLE %s PASSWORD 'pw%d'" % (name, i))
            if i % 4 == 0:      # keeps the worker turning
                tasks.append(schedule(db, url + "&n=%d" % i))
        took = time.time() - started
        wait_final(db, tasks, timeout=30)
        time.sleep(2 * interval + 0.5)
        elapsed = time.time() - started
        assert stat(db, "role_sweeps_total") - sweeps <= 2
        assert stat(db, "role_checks_total") - checks <= elapsed / interval + 2, \
            "%d looks at the roles in %.1f s (%.1f s of changes)" % (
                stat(db, "role_checks_total") - checks, elapsed, took)
    finally:
        with db.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE usename = %s", (name,))
            cur.execute("DROP ROLE %s" % name)


def test_a_dropped_role_is_still_swept(db, receiver):
    """DROP ROLE run from another database (where jobflow's hook cannot see
    the tasks): the worker cancels the role's pending task."""
    role = "jf_gone_" + uuid.uuid4().hex[:8]
    url, _ = receiver.unique_url("/ok")
    with db.cursor() as cur:
        cur.execute("CREATE ROLE %s" % role)
        cur.execute("GRANT jobflow_user TO %s" % role)
        cur.execute("SET ROLE %s" % role)
        cur.execute("SELECT jobflow.schedule(%s, now() + interval '1 day')", (url,))
        task = cur.fetchone()[0]
        cur.execute("RESET ROLE")
    sweeps = stat(db, "role_sweeps_total")
    other = psycopg2.connect(dbname="postgres")
    other.autocommit = True
    try:
        with other.cursor() as cur:
            cur.execute("DROP ROLE %s" % role)
    finally:
        other.close()
    deadline = time.time() + 15
    while time.time() < deadline:
        state = query(db, "SELECT state::text FROM jobflow.tasks WHERE id = %s", (task,))
        if state[0]["state"] == "cancelled":
            break
        time.sleep(0.1)
    assert state[0]["state"] == "cancelled"
    assert stat(db, "role_sweeps_total") - sweeps >= 1
