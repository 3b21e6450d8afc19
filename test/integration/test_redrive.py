# -------------------------------------------------------------------------
#
# test_redrive.py
#     Redrive and dead letters (issue 10, item 2): jobflow.retry() and
#     jobflow.retry_failed() send failed and cancelled tasks again with a
#     fresh attempt budget, attempt numbers still increasing; the worker
#     learns of them at commit; jobflow.failed_tasks shows each role its
#     own dead letters; a role cannot redrive another role's tasks, and
#     jobflow_admin can redrive all of them.
#
# -------------------------------------------------------------------------

import time
import uuid

import psycopg2
import pytest

from conftest import query, schedule, task_log, task_row, wait_final


@pytest.fixture
def roles(db):
    """Two application roles and one jobflow_admin: (a, b, admin)."""
    names = ["jf_rd_%s" % uuid.uuid4().hex[:8] for _ in range(3)]
    with db.cursor() as cur:
        for n in names[:2]:
            cur.execute("CREATE ROLE %s" % n)
            cur.execute("GRANT jobflow_user TO %s" % n)
        cur.execute("CREATE ROLE %s" % names[2])
        cur.execute("GRANT jobflow_admin TO %s" % names[2])
    yield names
    with db.cursor() as cur:
        cur.execute("UPDATE jobflow.tasks SET state = 'cancelled' WHERE state = 'pending'"
                    " AND owner::text = ANY(%s)", (names,))


def as_role(conn, role, sql, args=None):
    """Rows of sql run as role."""
    with conn.cursor() as cur:
        cur.execute("SET ROLE %s" % role)
        try:
            cur.execute(sql, args)
            return cur.fetchall() if cur.description else cur.rowcount
        finally:
            cur.execute("RESET ROLE")


def one(conn, sql, args=None):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchone()[0]


def failed_task(conn, receiver, path="/status/500", role=None, **kw):
    """A task that has failed for good; returns (id, tag)."""
    url, tag = receiver.unique_url(path)
    kw.setdefault("max_attempts", 1)
    if role is None:
        task_id = schedule(conn, url, **kw)
    else:
        with conn.cursor() as cur:
            cur.execute("SET ROLE %s" % role)
        task_id = schedule(conn, url, **kw)
        with conn.cursor() as cur:
            cur.execute("RESET ROLE")
    assert wait_final(conn, task_id) == "failed"
    return task_id, tag


def test_retry_runs_a_failed_task_again(db, receiver):
    """Two 500s exhaust max_attempts = 2; after retry() the third attempt
    succeeds, numbered 3 in the log and in X-Jobflow-Attempt."""
    task_id, tag = failed_task(db, receiver, "/flaky/2", max_attempts=2)
    assert task_row(db, task_id)["attempts"] == 2

    assert one(db, "SELECT jobflow.retry(%s)", (task_id,)) is True
    assert wait_final(db, task_id) == "succeeded"

    row = task_row(db, task_id)
    assert row["attempts"] == 3
    assert row["last_status"] == 200
    log = task_log(db, task_id)
    assert [r["attempt"] for r in log] == [1, 2, 3], log
    assert [r["outcome"] for r in log][-1] == "succeeded", log
    reqs = receiver.wait_for(lambda r: ("t=" + tag) in r["query"], n=3)
    assert sorted(r["headers"]["x-jobflow-attempt"] for r in reqs) == ["1", "2", "3"]


def test_retry_gives_a_fresh_budget(db, receiver):
    """A task of max_attempts = 2 that keeps failing makes exactly two
    more attempts after a retry, then fails again; a second retry, two
    more."""
    task_id, tag = failed_task(db, receiver, "/status/503", max_attempts=2)
    assert task_row(db, task_id)["attempts"] == 2
    for expected in (4, 6):
        assert one(db, "SELECT jobflow.retry(%s)", (task_id,)) is True
        assert wait_final(db, task_id, timeout=30) == "failed"
        row = task_row(db, task_id)
        assert row["attempts"] == expected, row
        assert row["max_attempts"] == expected, row
    log = task_log(db, task_id)
    assert [r["attempt"] for r in log] == [1, 2, 3, 4, 5, 6], log
    reqs = receiver.wait_for(lambda r: ("t=" + tag) in r["query"], n=6)
    assert sorted(int(r["headers"]["x-jobflow-attempt"]) for r in reqs) == [1, 2, 3, 4, 5, 6]


def test_retry_cancelled_at_a_given_time(db, receiver):
    """A cancelled task runs again at the time retry() gives, not before."""
    url, tag = receiver.unique_url("/ok")
    task_id = schedule(db, url, run_at_sql="now() + interval '1 hour'")
    assert one(db, "SELECT jobflow.cancel(%s)", (task_id,)) is True
    asked = time.time()
    assert one(db, "SELECT jobflow.retry(%s, now() + interval '2 s')", (task_id,)) is True
    assert task_row(db, task_id)["state"] == "pending"
    assert wait_final(db, task_id) == "succeeded"
    reqs = receiver.wait_for(lambda r: ("t=" + tag) in r["query"])
    assert reqs[0]["time"] >= asked + 1.5, "sent %.3f s after retry()" % (reqs[0]["time"] - asked)


def test_retry_refuses_other_states(db, receiver):
    """Succeeded, pending and unknown tasks are left alone (false); a
    succeeded task cannot be sent again even by an UPDATE."""
    url, _ = receiver.unique_url("/ok")
    done = schedule(db, url)
    assert wait_final(db, done) == "succeeded"
    later = schedule(db, url, run_at_sql="now() + interval '1 hour'")
    assert one(db, "SELECT jobflow.retry(%s)", (done,)) is False
    assert one(db, "SELECT jobflow.retry(%s)", (later,)) is False
    assert one(db, "SELECT jobflow.retry(%s)", (-1,)) is False
    assert one(db, "SELECT jobflow.retry(NULL)") is False
    assert task_row(db, done)["state"] == "succeeded"
    with pytest.raises(psycopg2.errors.ObjectNotInPrerequisiteState):
        with db.cursor() as cur:
            cur.execute("UPDATE jobflow.tasks SET state = 'pending' WHERE id = %s", (done,))
    with pytest.raises(psycopg2.errors.NullValueNotAllowed):
        one(db, "SELECT jobflow.retry(%s, NULL)", (done,))
    assert one(db, "SELECT jobflow.cancel(%s)", (later,)) is True


def test_owners_redrive_their_own(connect, receiver, roles):
    """Role b can neither see nor redrive a's dead letter, by retry(),
    retry_failed() or UPDATE; a can; a jobflow_admin can redrive any."""
    a, b, admin = roles
    db = connect()
    task_id, _ = failed_task(db, receiver, role=a)

    assert as_role(db, b, "SELECT id FROM jobflow.failed_tasks WHERE id = %s", (task_id,)) == []
    assert as_role(db, b, "SELECT jobflow.retry(%s)", (task_id,)) == [(False,)]
    assert as_role(db, b, "SELECT jobflow.retry_failed()") == [(0,)]
    assert as_role(db, b, "UPDATE jobflow.tasks SET state = 'pending' WHERE id = %s",
                   (task_id,)) == 0
    assert task_row(db, task_id)["state"] == "failed"

    seen = as_role(db, a, "SELECT id, attempts, last_status FROM jobflow.failed_tasks"
                   " WHERE id = %s", (task_id,))
    assert seen == [(task_id, 1, 500)]
    assert as_role(db, a, "SELECT jobflow.retry(%s)", (task_id,)) == [(True,)]
    assert wait_final(db, task_id) == "failed"
    assert task_row(db, task_id)["attempts"] == 2

    assert as_role(db, admin, "SELECT jobflow.retry(%s)", (task_id,)) == [(True,)]
    assert wait_final(db, task_id) == "failed"
    assert task_row(db, task_id)["attempts"] == 3


def test_retry_failed_by_queue_and_time(connect, receiver, roles):
    """retry_failed(queue, since) redrives the caller's failed tasks of
    that queue that failed since that time, and no others: not another
    queue, not older failures, not cancelled tasks, not another role's."""
    a, b, _ = roles
    db = connect()
    q1 = "rd_" + uuid.uuid4().hex[:8]
    q2 = "rd_" + uuid.uuid4().hex[:8]
    old, _ = failed_task(db, receiver, role=a, queue=q1)
    time.sleep(0.2)
    since = one(db, "SELECT now()")
    mine = [failed_task(db, receiver, role=a, queue=q1)[0] for _ in range(2)]
    other_queue, _ = failed_task(db, receiver, role=a, queue=q2)
    other_role, _ = failed_task(db, receiver, role=b, queue=q1)
    url, _ = receiver.unique_url("/ok")
    cancelled = schedule(db, url, queue=q1, run_at_sql="now() + interval '1 hour'")
    one(db, "SELECT jobflow.cancel(%s)", (cancelled,))

    assert as_role(db, a, "SELECT jobflow.retry_failed(%s, %s)", (q1, since)) == [(2,)]
    states = wait_final(db, mine)
    assert states == {i: "failed" for i in mine}
    for i in mine:
        assert task_row(db, i)["attempts"] == 2
    for i in (old, other_queue, other_role):
        assert task_row(db, i)["attempts"] == 1
    assert task_row(db, cancelled)["state"] == "cancelled"

    # all queues, any time: the remaining failures of a, twice for mine
    assert as_role(db, a, "SELECT jobflow.retry_failed()") == [(4,)]
    wait_final(db, mine + [old, other_queue])
    assert task_row(db, other_role)["attempts"] == 1
    assert task_row(db, old)["attempts"] == 2
