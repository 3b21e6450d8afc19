# -------------------------------------------------------------------------
#
# test_notify.py
#     NOTIFY jobflow is sent at commit only, once per statement, with the
#     id range the statement inserted.
#
# A listener connection stands in for the worker (which listens too and
# does its own thing with the notifications).  Notifications are matched to
# a test by the ids they cover, so any other traffic on the channel cannot
# make these tests pass or fail.
#
# -------------------------------------------------------------------------

import io
import select
import time

from conftest import schedule


def drain(listener, wait=0.0):
    """Every notification that arrives on listener within wait seconds (or
    is already there), as (lo, hi, payload) tuples."""
    got = []
    deadline = time.time() + wait
    while True:
        listener.poll()
        while listener.notifies:
            n = listener.notifies.pop(0)
            assert n.channel == "jobflow"
            parts = n.payload.split(" ")
            if len(parts) == 2:
                got.append((int(parts[0]), int(parts[1]), n.payload))
            else:
                got.append((None, None, n.payload))
        left = deadline - time.time()
        if left <= 0:
            return got
        select.select([listener], [], [], left)


def covering(notes, ids):
    """The notifications whose range covers any of ids."""
    return [n for n in notes if n[0] is not None
            and any(n[0] <= i <= n[1] for i in ids)]


def wait_covering(listener, ids, timeout=5.0):
    """Notifications covering ids, waiting until one arrives."""
    deadline = time.time() + timeout
    seen = []
    while time.time() < deadline:
        seen += drain(listener, 0.1)
        if covering(seen, ids):
            # let a duplicate, if any, arrive too
            seen += drain(listener, 0.3)
            return covering(seen, ids)
    return covering(seen, ids)


def make_listener(connect):
    listener = connect()
    with listener.cursor() as cur:
        cur.execute("LISTEN jobflow")
    drain(listener)
    return listener


def test_notify_only_at_commit(connect, receiver):
    listener = make_listener(connect)
    tx = connect(autocommit=False)
    url, _ = receiver.unique_url("/ok")

    task_id = schedule(tx, url)
    # the transaction is open: nothing may have been sent
    assert covering(drain(listener, 0.5), [task_id]) == []
    tx.commit()

    notes = wait_covering(listener, [task_id])
    assert [n[2] for n in notes] == ["%d %d" % (task_id, task_id)]


def test_no_notify_after_rollback(connect, receiver):
    listener = make_listener(connect)
    tx = connect(autocommit=False)
    url, _ = receiver.unique_url("/ok")

    task_id = schedule(tx, url)
    assert covering(drain(listener, 0.2), [task_id]) == []
    tx.rollback()
    assert covering(drain(listener, 1.0), [task_id]) == []

    # the listener works: a committed task right after is notified
    later = schedule(connect(), url)
    assert later > task_id
    assert [n[2] for n in wait_covering(listener, [later])] == ["%d %d" % (later, later)]


def test_insert_select_notifies_once_with_range(connect, receiver):
    listener = make_listener(connect)
    db = connect()
    url, _ = receiver.unique_url("/ok")

    with db.cursor() as cur:
        cur.execute("INSERT INTO jobflow.tasks (url, run_at)"
                    " SELECT %s || '&n=' || g, now() FROM generate_series(1, 25) g"
                    " RETURNING id", (url,))
        ids = sorted(r[0] for r in cur.fetchall())
    assert len(ids) == 25
    notes = wait_covering(listener, ids)
    assert [n[2] for n in notes] == ["%d %d" % (ids[0], ids[-1])]


def test_copy_notifies_once_with_range(connect, receiver):
    listener = make_listener(connect)
    db = connect()
    url, tag = receiver.unique_url("/ok")

    data = "".join("%s&n=%d\n" % (url, i) for i in range(30))
    with db.cursor() as cur:
        cur.copy_expert("COPY jobflow.tasks (url) FROM STDIN", io.StringIO(data))
        cur.execute("SELECT id FROM jobflow.tasks WHERE url LIKE %s ORDER BY id",
                    ("%" + tag + "%",))
        ids = [r[0] for r in cur.fetchall()]
    assert len(ids) == 30
    notes = wait_covering(listener, ids)
    assert [n[2] for n in notes] == ["%d %d" % (ids[0], ids[-1])]


def test_two_statements_in_one_transaction_notify_at_commit(connect, receiver):
    listener = make_listener(connect)
    tx = connect(autocommit=False)
    url, _ = receiver.unique_url("/ok")

    first = schedule(tx, url)
    second = schedule(tx, url)
    assert covering(drain(listener, 0.3), [first, second]) == []
    tx.commit()
    notes = wait_covering(listener, [first, second])
    payloads = sorted(n[2] for n in notes)
    if second == first + 1:
        # ranges of statements that touch are announced as one (a COPY into
        # jobflow.task_import inserts one row per statement)
        assert payloads == ["%d %d" % (first, second)]
    else:
        assert payloads == sorted(["%d %d" % (first, first), "%d %d" % (second, second)])
