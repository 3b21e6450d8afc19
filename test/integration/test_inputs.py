# -------------------------------------------------------------------------
#
# test_inputs.py
#     COPY by an application role (issue 9, item 17g).  PostgreSQL refuses
#     COPY FROM into a table with row-level security for every role the
#     policies apply to; an application role copies into the view
#     jobflow.task_import instead, whose rows become tasks under the same
#     policies, checks and notification as an INSERT.
#
# -------------------------------------------------------------------------

import io
import os
import subprocess
import time
import uuid

import psycopg2
import pytest

from conftest import query, wait_final



def _copy(connect, role, sql, data):
    """COPY ... FROM STDIN of data on a connection of its own, as role."""
    conn = connect()
    with conn.cursor() as cur:
        cur.execute("SET ROLE %s" % role)
        cur.copy_expert(sql, io.StringIO(data))
        return cur.rowcount


def test_copy_into_tasks_is_refused_by_postgres_under_rls(connect, app_role):
    """The reason the COPY of docs/user-guide.md failed: PostgreSQL itself
    refuses COPY FROM into a table with row-level security (0A000)."""
    with pytest.raises(psycopg2.errors.FeatureNotSupported) as e:
        _copy(connect, app_role, "COPY jobflow.tasks (url) FROM STDIN",
              "http://127.0.0.1:9/x\n")
    assert "COPY FROM not supported with row-level security" in str(e.value)


def test_copy_into_task_import_makes_tasks_that_fire(db, connect, app_role, receiver):
    """COPY into jobflow.task_import as the application role: the rows are
    that role's tasks, with the table's defaults, and they fire."""
    urls = []
    lines = []
    for i in range(3):
        url, tag = receiver.unique_url()
        urls.append((url, tag))
        lines.append("%s\t{\"n\": %d}\tapplication/json" % (url, i))
    n = _copy(connect, app_role,
              "COPY jobflow.task_import (url, body, content_type) FROM STDIN",
              "\n".join(lines) + "\n")
    assert n == 3
    rows = query(db, "SELECT id, owner::text, method, queue, max_attempts, timeout_ms, headers"
                     " FROM jobflow.tasks WHERE url = ANY(%s) ORDER BY id",
                 ([u for u, _ in urls],))
    assert len(rows) == 3
    for r in rows:
        assert r["owner"] == app_role
        assert (r["method"], r["queue"], r["max_attempts"], r["timeout_ms"], r["headers"]) == \
            ("POST", "default", 5, 30000, {})
    states = wait_final(db, [r["id"] for r in rows], timeout=30.0)
    assert set(states.values()) == {"succeeded"}, states
    for i, (_, tag) in enumerate(urls):
        got = receiver.tagged(tag)
        assert len(got) == 1 and got[0]["body"] == '{"n": %d}' % i, got


def test_copy_into_task_import_checks_every_row(db, connect, app_role):
    """One bad row refuses the whole COPY with the row check's SQLSTATE;
    nothing is written.  A role cannot copy tasks in another's name: the
    view has no owner column."""
    tag = uuid.uuid4().hex
    data = "http://127.0.0.1:9/%s/1\nhttp://.../%s/2\n" % (tag, tag)
    with pytest.raises(psycopg2.errors.InvalidParameterValue) as e:
        _copy(connect, app_role, "COPY jobflow.task_import (url) FROM STDIN", data)
    assert "callback URL has an invalid host" in str(e.value)
    assert query(db, "SELECT count(*) AS n FROM jobflow.tasks WHERE url LIKE %s",
                 ("%" + tag + "%",))[0]["n"] == 0
    cols = query(db, "SELECT array_agg(attname::text ORDER BY attnum) AS cols FROM pg_attribute"
                     " WHERE attrelid = 'jobflow.task_import'::regclass AND attnum > 0")[0]["cols"]
    assert "owner" not in cols and "state" not in cols and "id" not in cols


def test_psql_copy_as_application_role(db, app_role):
    """The recipe of docs/user-guide.md, literally: psql's \\copy, logged in
    as the application role; 2,000 rows, timed."""
    tag = uuid.uuid4().hex
    rows = "".join("http://127.0.0.1:9/%s/%d\t2100-01-01 00:00+00\n" % (tag, i)
                   for i in range(2000))
    script = ("\\copy jobflow.task_import (url, run_at) from stdin\n" + rows + "\\.\n")
    psql = os.path.join(os.environ["JOBFLOW_PGBIN"], "psql")
    start = time.time()
    res = subprocess.run([psql, "-X", "-v", "ON_ERROR_STOP=1", "-U", app_role, "-f", "-"],
                         input=script, capture_output=True, text=True, timeout=120)
    elapsed = time.time() - start
    assert res.returncode == 0, res.stderr
    assert "COPY 2000" in res.stdout, res.stdout
    n = query(db, "SELECT count(*) AS n FROM jobflow.tasks WHERE url LIKE %s AND owner = %s::regrole",
              ("%" + tag + "%", app_role))[0]["n"]
    assert n == 2000
    print("\\copy of 2000 rows through jobflow.task_import: %.2f s" % elapsed)


def test_copy_into_task_import_wakes_once(connect, app_role, receiver):
    """The view inserts one row per statement; the touching id ranges are
    published as one wake-up at commit, not one per row."""
    db = connect()
    before = query(db, "SELECT ranges FROM jobflow.wakeups()")[0]["ranges"]
    url, tag = receiver.unique_url("/ok")
    data = "".join("%s&n=%d\n" % (url, i) for i in range(30))
    assert _copy(connect, app_role, "COPY jobflow.task_import (url) FROM STDIN", data) == 30
    assert query(db, "SELECT ranges FROM jobflow.wakeups()")[0]["ranges"] == before + 1
    ids = [r["id"] for r in query(db, "SELECT id FROM jobflow.tasks WHERE url LIKE %s ORDER BY id",
                                  ("%" + tag + "%",))]
    assert len(ids) == 30
    wait_final(db, ids, timeout=30.0)
