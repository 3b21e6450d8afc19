# -------------------------------------------------------------------------
#
# test_explain.py
#     Issue 24, item 5: jobflow.explain(id) says why a task is where it
#     is, and jobflow.explain_cron(name) why a timer of the caller fires
#     when it does.  Each test drives a real task (or timer) into one
#     state on the suite's cluster, with the real receiver, and checks the
#     first reason's code and the figures of its sentence: not due yet,
#     succeeded, failed, cancelled, running, waiting for a retry, its queue
#     paused, at its queue's cap or rate, at its origin's cap, dispatch
#     off, a restore in progress, no worker (a template database), its
#     owner dropped; and that a tenant explaining another's task or timer
#     gets exactly the error of one that does not exist.
#
# -------------------------------------------------------------------------

import io
import re
import time
import uuid

import psycopg2
import pytest

from conftest import as_role as as_tenant, call, schedule, task_row, wait_final


def answers(conn, role, function, arg):
    """[(reason, explanation)] of jobflow.<function>(arg) as role."""
    with conn.cursor() as cur:
        cur.execute("SET ROLE %s" % role)
        try:
            cur.execute("SELECT reason, explanation FROM jobflow.%s(%%s)" % function, (arg,))
            return cur.fetchall()
        finally:
            cur.execute("RESET ROLE")


def explain(conn, role, task_id):
    return answers(conn, role, "explain", task_id)


def explain_cron(conn, role, name):
    return answers(conn, role, "explain_cron", name)


def tenant_task(conn, role, url, **kw):
    with conn.cursor() as cur:
        cur.execute("SET ROLE %s" % role)
    try:
        return schedule(conn, url, **kw)
    finally:
        with conn.cursor() as cur:
            cur.execute("RESET ROLE")


def reasons(rows):
    return [r for r, _ in rows]


def text_of(rows, reason):
    got = [e for r, e in rows if r == reason]
    assert got, "no %s among %s" % (reason, rows)
    return got[0]


def wait_state(conn, task_id, state, timeout=15):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if task_row(conn, task_id)["state"] == state:
            return
        time.sleep(0.05)
    pytest.fail("task %s not %s after %s s: %s" % (task_id, state, timeout, task_row(conn, task_id)))


def wait_explained(conn, role, task_id, reason, timeout=10):
    """The answer once its first reason is the one expected."""
    deadline = time.time() + timeout
    while True:
        rows = explain(conn, role, task_id)
        if rows and rows[0][0] == reason:
            return rows
        if time.time() >= deadline:
            pytest.fail("explain(%s) never began with %s; last: %s" % (task_id, reason, rows))
        time.sleep(0.1)


def wait_held(conn, held, timeout=10):
    deadline = time.time() + timeout
    while call(conn, "SELECT held FROM jobflow.worker_status()") != held:
        if time.time() >= deadline:
            pytest.fail("the worker was not held for %r" % held)
        time.sleep(0.05)


# -------------------------------------------------------------------------
# Where a task is
# -------------------------------------------------------------------------

def test_not_due_says_in_how_long(db, receiver, role):
    r = role()
    url, _ = receiver.unique_url("/ok")
    task = tenant_task(db, r, url, run_at_sql="now() + interval '29 min 30 s'")
    rows = explain(db, r, task)
    assert rows[0][0] == "not_due", rows
    assert re.match(r"due in 29 min (2\d|30) s \(at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", rows[0][1]), rows
    assert "due" not in reasons(rows)


def test_succeeded_failed_cancelled(db, receiver, role):
    r = role()
    ok_url, _ = receiver.unique_url("/ok")
    bad_url, _ = receiver.unique_url("/status/500")
    far_url, _ = receiver.unique_url("/ok")
    ok = tenant_task(db, r, ok_url)
    bad = tenant_task(db, r, bad_url, max_attempts=1)
    far = tenant_task(db, r, far_url, run_at_sql="now() + interval '1 day'")
    assert as_tenant(db, r, "SELECT jobflow.cancel(%s)", (far,)) is True
    assert wait_final(db, [ok, bad]) == {ok: "succeeded", bad: "failed"}

    rows = explain(db, r, ok)
    assert rows[0][0] == "succeeded" and "with HTTP 200, after 1 attempt(s)" in rows[0][1], rows
    rows = explain(db, r, bad)
    assert rows[0][0] == "failed", rows
    assert "after 1 attempt(s) of 1: last HTTP 500" in rows[0][1], rows
    assert "jobflow.retry(%d)" % bad in rows[0][1], rows
    rows = explain(db, r, far)
    assert rows == [("cancelled", rows[0][1])] and rows[0][1].startswith("cancelled at "), rows


def test_retry_wait_names_the_attempt_and_the_next(db, receiver, server, role):
    """A 503 with Retry-After: 600 (the suite's cluster caps the wait at
    2 s: raised here, for the time of the test)."""
    r = role()
    server.set_guc(db, "jobflow.retry_backoff_max", "15min")
    try:
        time.sleep(0.3)
        url, _ = receiver.unique_url("/status/503?retry_after=600")
        task = tenant_task(db, r, url, max_attempts=3)
        deadline = time.time() + 15
        while True:
            row = task_row(db, task)
            if row["state"] == "pending" and row["attempts"] == 1:
                break
            assert time.time() < deadline, row
            time.sleep(0.05)
    finally:
        server.set_guc(db, "jobflow.retry_backoff_max", None)
    rows = explain(db, r, task)
    assert rows[0][0] == "retry_wait", rows
    assert re.match(r"attempt 1 of 3 failed at .* with HTTP 503; the next"
                    r" attempt is at .*, in (9 min [345]\d s|10 min 0 s)$", rows[0][1]), rows
    as_tenant(db, r, "SELECT jobflow.cancel(%s)", (task,))


def test_running_says_since_when(db, receiver, role):
    r = role()
    url, tag = receiver.unique_url("/hang")
    task = tenant_task(db, r, url, timeout_ms=4000, max_attempts=1)
    wait_state(db, task, "running")
    rows = explain(db, r, task)
    assert rows[0][0] == "running", rows
    assert re.match(r"running since \d{4}-.*, for [\d.]+ s \(attempt 1 of 1\); its request times"
                    r" out 4.0 s after it started$", rows[0][1]), rows
    assert wait_final(db, task) == "failed"


# -------------------------------------------------------------------------
# What holds a due task: its queue, its origin
# -------------------------------------------------------------------------

def test_paused_queue(db, receiver, role):
    r = role()
    queue = "q-" + uuid.uuid4().hex[:6]
    as_tenant(db, r, "SELECT jobflow.pause_queue(%s)", (queue,))
    url, tag = receiver.unique_url("/ok")
    task = tenant_task(db, r, url, queue=queue)
    rows = explain(db, r, task)
    assert rows[0][0] == "queue_paused", rows
    assert rows[0][1].startswith('queue "%s" is paused since ' % queue), rows
    assert rows[0][1].endswith("resume it with jobflow.resume_queue('%s')" % queue), rows
    assert reasons(rows)[-1] == "due", rows
    # an administrator is told to name the owner
    assert "owner => '%s'" % r in dict(explain(db, db.info.user, task))["queue_paused"]
    as_tenant(db, r, "SELECT jobflow.resume_queue(%s)", (queue,))
    assert wait_final(db, task) == "succeeded"
    assert reasons(explain(db, r, task)) == ["succeeded"]


def test_queue_cap(db, receiver, role):
    r = role()
    queue = "c-" + uuid.uuid4().hex[:6]
    as_tenant(db, r, "SELECT jobflow.set_queue(%s, max_concurrent => 1)", (queue,))
    url, _ = receiver.unique_url("/hang")
    first = tenant_task(db, r, url, queue=queue, timeout_ms=3000, max_attempts=1)
    wait_state(db, first, "running")
    second = tenant_task(db, r, url, queue=queue, timeout_ms=3000, max_attempts=1)
    third = tenant_task(db, r, url, queue=queue, timeout_ms=3000, max_attempts=1)
    rows = explain(db, r, third)
    assert rows[0][0] == "queue_cap", rows
    assert rows[0][1] == ('queue "%s" has 1 request(s) in flight, its limit (max_concurrent) is 1;'
                          ' 1 of its due tasks are ahead of this one' % queue), rows
    for t in (second, third):
        as_tenant(db, r, "SELECT jobflow.cancel(%s)", (t,))
    wait_final(db, [first, second, third], timeout=30)


def test_queue_rate(db, receiver, role):
    r = role()
    queue = "r-" + uuid.uuid4().hex[:6]
    as_tenant(db, r, "SELECT jobflow.set_queue(%s, max_per_second => 0.05)", (queue,))
    url, _ = receiver.unique_url("/ok")
    first = tenant_task(db, r, url, queue=queue)
    assert wait_final(db, first) == "succeeded"
    second = tenant_task(db, r, url, queue=queue)
    third = tenant_task(db, r, url, queue=queue)
    rows = explain(db, r, third)
    assert rows[0][0] == "queue_rate", rows
    assert re.match(r'queue "%s" sends at most 0.05 request\(s\) per second \(max_per_second\),'
                    r' [12] went in the last 20 s; 1 of its due tasks are ahead of this one,'
                    r' about 40 s of sending$' % queue, rows[0][1]), rows
    rows = explain(db, r, second)
    assert rows[0][0] == "queue_rate" and "0 of its due tasks are ahead" in rows[0][1], rows
    for t in (second, third):
        as_tenant(db, r, "SELECT jobflow.cancel(%s)", (t,))


def test_origin_cap(db, second_receiver, server, role):
    """One request in flight to an origin whose cap is 1: a second task
    for it waits, and is told the origin's load (published by the worker
    once a second) and how many of its owner's tasks are ahead."""
    r = role()
    server.set_guc(db, "jobflow.max_requests_per_host", 1)
    try:
        time.sleep(0.5)
        url, _ = second_receiver.unique_url("/hang")
        first = tenant_task(db, r, url, timeout_ms=4000, max_attempts=1)
        wait_state(db, first, "running")
        second = tenant_task(db, r, url, timeout_ms=4000, max_attempts=1)
        third = tenant_task(db, r, url, timeout_ms=4000, max_attempts=1)
        rows = wait_explained(db, r, third, "origin_cap")
        origin = "http://127.0.0.1:%d" % second_receiver.port
        assert re.match(r"1 request\(s\) in flight to %s, the limit per origin"
                        r" \(jobflow.max_requests_per_host\) is 1; [12] due task\(s\) wait for it"
                        r" in all, 1 of this owner's are ahead of this one$" % re.escape(origin),
                        rows[0][1]), rows
        for t in (second, third):
            as_tenant(db, r, "SELECT jobflow.cancel(%s)", (t,))
        wait_final(db, [first, second, third], timeout=30)
    finally:
        server.set_guc(db, "jobflow.max_requests_per_host", None)


# -------------------------------------------------------------------------
# What holds every task of the database
# -------------------------------------------------------------------------

def test_dispatch_off(db, receiver, server, role):
    r = role()
    server.set_guc(db, "jobflow.dispatch", "off")
    try:
        wait_held(db, "dispatch off")
        url, _ = receiver.unique_url("/ok")
        task = tenant_task(db, r, url)
        rows = explain(db, r, task)
        assert rows[0][0] == "dispatch_off", rows
        assert "jobflow.dispatch is off on this server" in rows[0][1], rows
        later = tenant_task(db, r, url, run_at_sql="now() + interval '1 hour'")
        assert reasons(explain(db, r, later))[:2] == ["not_due", "dispatch_off"]
    finally:
        server.set_guc(db, "jobflow.dispatch", None)
    assert wait_final(db, task) == "succeeded"


def test_restore_in_progress(db, connect, receiver, role):
    r = role()
    session = connect()
    with session.cursor() as cur:
        cur.copy_expert("COPY jobflow.task_log FROM STDIN", io.StringIO(""))
    try:
        wait_held(db, "restore")
        url, _ = receiver.unique_url("/ok")
        task = tenant_task(db, r, url)
        rows = explain(db, r, task)
        assert rows[0][0] == "restore", rows
        assert "a restore of jobflow's tables is in progress" in rows[0][1], rows
    finally:
        with session.cursor() as cur:
            cur.execute("DISCARD ALL")
    assert wait_final(db, task) == "succeeded"


def test_no_worker_in_a_template(databases, connect, receiver):
    """jobflow serves no template database: its tasks never fire, and
    explain says so."""
    name, _ = databases(extension=False)
    with databases.admin.cursor() as cur:
        cur.execute("ALTER DATABASE %s IS_TEMPLATE true" % name)
    try:
        conn = connect(dbname=name)
        with conn.cursor() as cur:
            cur.execute("CREATE EXTENSION jobflow")
        url, _ = receiver.unique_url("/ok")
        task = schedule(conn, url)
        time.sleep(1)
        rows = explain(conn, conn.info.user, task)
        assert rows[0][0] == "no_worker", rows
        assert "it is a template" in rows[0][1], rows
        conn.close()
    finally:
        with databases.admin.cursor() as cur:
            cur.execute("ALTER DATABASE %s IS_TEMPLATE false" % name)


def test_owner_dropped(db, connect, receiver, role):
    """A role dropped from another database, where its tasks cannot be
    seen: its task never fires, and an administrator is told why."""
    r = role()
    url, _ = receiver.unique_url("/ok")
    task = tenant_task(db, r, url, run_at_sql="now() + interval '1 hour'")
    oid = call(db, "SELECT %s::regrole::oid", (r,))
    other = connect(dbname="postgres")
    with other.cursor() as cur:
        cur.execute("DROP ROLE %s" % r)
    rows = explain(db, db.info.user, task)
    assert rows[0] == ("owner_dropped", "its owner (the role of OID %d) was dropped: its tasks"
                       " never fire, and the worker cancels those still pending" % oid), rows
    call(db, "DELETE FROM jobflow.tasks WHERE id = %s", (task,))


# -------------------------------------------------------------------------
# Cron timers
# -------------------------------------------------------------------------

def test_explain_cron(db, receiver, role):
    r = role()
    daily = "d-" + uuid.uuid4().hex[:6]
    url, tag = receiver.unique_url("/ok")
    as_tenant(db, r, "SELECT jobflow.schedule_cron(%s, '0 3 * * *', %s)", (daily, url))
    rows = explain_cron(db, r, daily)
    assert reasons(rows) == ["next", "never_fired"], rows
    assert re.match(r"next occurrence at \d{4}-\d\d-\d\d 03:00:00\+00, in \d+ (h|min) .*"
                    r" \(schedule '0 3 \* \* \*' in UTC\)$", rows[0][1]), rows

    as_tenant(db, r, "SELECT jobflow.set_cron_active(%s, false)", (daily,))
    rows = explain_cron(db, r, daily)
    assert rows[0][0] == "inactive", rows
    assert rows[0][1].endswith("resume it with jobflow.set_cron_active('%s', true)" % daily), rows
    assert "next" not in reasons(rows)

    every = "e-" + uuid.uuid4().hex[:6]
    as_tenant(db, r, "SELECT jobflow.schedule_cron(%s, '*/1 * * * * *', %s)", (every, url))
    receiver.wait_for(lambda q: ("t=" + tag) in q["query"], timeout=15)
    deadline = time.time() + 15
    while True:
        rows = explain_cron(db, r, every)
        if "last_succeeded" in reasons(rows):
            break
        assert time.time() < deadline, rows
        time.sleep(0.2)
    assert reasons(rows)[0] == "next", rows
    assert re.match(r"last occurrence: task \d+, succeeded at .* with HTTP 200, after 1 attempt",
                    text_of(rows, "last_succeeded")), rows
    as_tenant(db, r, "SELECT jobflow.unschedule_cron(%s)", (every,))


# -------------------------------------------------------------------------
# Row-level security: no existence oracle
# -------------------------------------------------------------------------

def error_of(conn, role, sql, args):
    with conn.cursor() as cur:
        cur.execute("SET ROLE %s" % role)
    try:
        with pytest.raises(psycopg2.Error) as e:
            with conn.cursor() as cur:
                cur.execute(sql, args)
        return e.value.pgcode, e.value.diag.message_primary, e.value.diag.message_hint
    finally:
        with conn.cursor() as cur:
            cur.execute("RESET ROLE")


def test_another_tenants_task_and_timer_are_not_found(db, receiver, role):
    a, b = role(), role()
    url, _ = receiver.unique_url("/ok")
    task = tenant_task(db, a, url, run_at_sql="now() + interval '1 hour'")
    timer = "t-" + uuid.uuid4().hex[:6]
    as_tenant(db, a, "SELECT jobflow.schedule_cron(%s, '0 3 * * *', %s)", (timer, url))
    missing = call(db, "SELECT max(id) + 1000000 FROM jobflow.tasks")

    theirs = error_of(db, b, "SELECT * FROM jobflow.explain(%s)", (task,))
    none = error_of(db, b, "SELECT * FROM jobflow.explain(%s)", (missing,))
    assert theirs[0] == "42704" and theirs[1] == "task %d does not exist" % task, theirs
    assert (none[0], none[1].replace(str(missing), "N"), none[2]) \
        == (theirs[0], theirs[1].replace(str(task), "N"), theirs[2])

    theirs = error_of(db, b, "SELECT * FROM jobflow.explain_cron(%s)", (timer,))
    none = error_of(db, b, "SELECT * FROM jobflow.explain_cron(%s)", (timer + "x",))
    assert theirs[0] == "42704" and theirs[1] == 'cron timer "%s" does not exist' % timer, theirs
    assert (none[0], none[1].replace(timer + "x", "N"), none[2]) \
        == (theirs[0], theirs[1].replace(timer, "N"), theirs[2])
    # its own answer, by contrast
    assert explain(db, a, task)[0][0] == "not_due"
    as_tenant(db, a, "SELECT jobflow.unschedule_cron(%s)", (timer,))
