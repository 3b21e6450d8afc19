# -------------------------------------------------------------------------
#
# test_idempotency.py
#     Idempotency keys (issue 11, item 1) under real concurrency: two
#     connections racing with one key end with one task and no error with
#     'ignore'; a racer that rolls back leaves the key to the other; a task
#     the worker has finished frees its key.
#
# -------------------------------------------------------------------------

import threading
import uuid

from conftest import query, schedule, wait_final


def _race(connect, receiver, second_commits, on_duplicate="ignore"):
    """First connection schedules with key k in an open transaction; the
    second schedules with the same key in a thread (it must wait); then the
    first commits or rolls back.  Returns (first id, second id or error, key)."""
    key = "race-" + uuid.uuid4().hex
    url, _tag = receiver.unique_url()
    first = connect(autocommit=False)
    second = connect()
    first_id = schedule(first, url, key=key, run_at_sql="now() + interval '1 hour'")
    result = {}

    def run():
        try:
            result["id"] = schedule(second, url, key=key, on_duplicate=on_duplicate,
                                    run_at_sql="now() + interval '1 hour'")
        except Exception as e:  # reported to the test below
            result["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join(1.0)
    assert t.is_alive(), "the second schedule() did not wait for the first transaction"
    if second_commits:
        first.commit()
    else:
        first.rollback()
    t.join(20)
    assert not t.is_alive()
    return first_id, result, key


def test_racing_ignore_ends_with_one_task(connect, receiver, db):
    first_id, result, key = _race(connect, receiver, True)
    assert "error" not in result, result.get("error")
    assert result["id"] == first_id
    rows = query(db, "SELECT id FROM jobflow.tasks WHERE key = %s", (key,))
    assert [r["id"] for r in rows] == [first_id]
    db.cursor().execute("SELECT jobflow.cancel(%s)", (first_id,))


def test_racer_that_rolls_back_leaves_the_key(connect, receiver, db):
    first_id, result, key = _race(connect, receiver, False)
    assert "error" not in result, result.get("error")
    assert result["id"] != first_id
    rows = query(db, "SELECT id FROM jobflow.tasks WHERE key = %s", (key,))
    assert [r["id"] for r in rows] == [result["id"]]
    db.cursor().execute("SELECT jobflow.cancel(%s)", (result["id"],))


def test_racing_error_raises_unique_violation(connect, receiver, db):
    first_id, result, key = _race(connect, receiver, True, on_duplicate="error")
    assert getattr(result.get("error"), "pgcode", None) == "23505", result
    rows = query(db, "SELECT id FROM jobflow.tasks WHERE key = %s", (key,))
    assert [r["id"] for r in rows] == [first_id]
    db.cursor().execute("SELECT jobflow.cancel(%s)", (first_id,))


def test_finished_task_frees_its_key(db, receiver):
    key = "done-" + uuid.uuid4().hex
    url, _tag = receiver.unique_url()
    first = schedule(db, url, key=key)
    wait_final(db, [first])
    again = schedule(db, url, key=key)
    assert again != first
    wait_final(db, [again])
    states = query(db, "SELECT state::text FROM jobflow.tasks WHERE key = %s ORDER BY id", (key,))
    assert [r["state"] for r in states] == ["succeeded", "succeeded"]
