# -------------------------------------------------------------------------
#
# test_queues.py
#     Queues as objects (issue 10, item 3), through the real worker and
#     real HTTP receivers on 127.0.0.1: a paused queue fires nothing and
#     holds up no other queue; resumed, its overdue tasks fire in due
#     order; max_concurrent is never exceeded; a 100/s queue is paced,
#     never a burst (its accuracy, 100 +- 5 a second, is measured by
#     bench/queues.sh); priority wins when capacity is short; the
#     per-host rate setting limits a host; per-queue retention; another
#     tenant can neither change nor see a queue.
#
# The SQL API's checks and permission errors are in test/pgtap/queues.sql.
#
# -------------------------------------------------------------------------

import bisect
import time
import uuid

import psycopg2
import pytest

from conftest import call, query, schedule, wait_final, worker_status


@pytest.fixture
def tenant(connect, new_role):
    """An application role and an autocommit connection as it."""
    role = new_role()
    conn = connect(user=role)
    return role, conn


def states(conn, ids):
    rows = query(conn, "SELECT id, state::text FROM jobflow.tasks WHERE id = ANY(%s)", (ids,))
    return {r["id"]: r["state"] for r in rows}


def per_second(times, start, seconds):
    """Counts of arrivals in each whole second from start on."""
    return [sum(1 for t in times if start + k <= t < start + k + 1) for k in range(seconds)]


@pytest.mark.timing
def test_pause_holds_tasks_and_resume_fires_them_in_due_order(tenant, receiver):
    """Paused, a queue's due tasks stay pending past their run_at while
    another queue of the same owner and host fires at once; resumed, the
    overdue ones fire in due order (one at a time here, so that order is
    visible at the receiver), promptly."""
    role, conn = tenant
    assert call(conn, "SELECT jobflow.pause_queue('held')") is True
    call(conn, "SELECT jobflow.set_queue('held', max_concurrent => 1)")
    url, tag = receiver.unique_url("/ok")
    # scheduled in reverse due order: ids and due order disagree
    held = [schedule(conn, url + "&n=%d" % k, queue="held",
                     run_at_sql="now() - interval '%d ms'" % (100 * k))
            for k in range(1, 6)]
    other_url, other_tag = receiver.unique_url("/ok")
    start = time.time()
    other = [schedule(conn, other_url, queue="other") for _ in range(3)]
    got = receiver.wait_for(lambda r: ("t=" + other_tag) in r["query"], n=3, timeout=5)
    assert max(r["time"] for r in got) - start < 1.5, "the paused queue held up another queue"
    assert set(wait_final(conn, other, timeout=5).values()) == {"succeeded"}

    time.sleep(2)
    assert receiver.tagged(tag) == [], "a paused queue fired"
    assert set(states(conn, held).values()) == {"pending"}

    resumed = time.time()
    assert call(conn, "SELECT jobflow.resume_queue('held')") is True
    got = receiver.wait_for(lambda r: ("t=" + tag) in r["query"], n=5, timeout=10)
    assert min(r["time"] for r in got) - resumed < 1.5, "resume took effect late"
    order = [int(r["query"].split("n=")[1].split("&")[0]) for r in sorted(got, key=lambda r: r["time"])]
    assert order == [5, 4, 3, 2, 1], "not in due order: %s" % order
    assert set(wait_final(conn, held, timeout=5).values()) == {"succeeded"}


def test_other_tenant_cannot_pause_limit_or_see(connect, new_role, receiver):
    """A queue belongs to its owner: another tenant's calls naming it fail
    with 42501 and it sees no row of it; the same name in its own
    namespace is another queue; pausing it leaves the first owner's tasks
    firing."""
    alice, bob = new_role(), new_role()
    a, b = connect(user=alice), connect(user=bob)
    call(a, "SELECT jobflow.set_queue('shared', max_per_second => 50)")
    for sql in ("SELECT jobflow.pause_queue('shared', %s)",
                "SELECT jobflow.resume_queue('shared', %s)",
                "SELECT jobflow.drop_queue('shared', %s)",
                "SELECT jobflow.set_queue('shared', max_concurrent => 1, owner => %s)"):
        with pytest.raises(psycopg2.Error) as e:
            call(b, sql, (alice,))
        assert e.value.pgcode == "42501", sql
        assert "permission denied to configure the queues of role" in str(e.value)
    assert query(b, "SELECT * FROM jobflow.queues WHERE owner = %s::regrole", (alice,)) == []
    assert call(b, "SELECT jobflow.pause_queue('shared')") is True
    url, tag = receiver.unique_url("/ok")
    ids = [schedule(a, url, queue="shared") for _ in range(3)]
    receiver.wait_for(lambda r: ("t=" + tag) in r["query"], n=3, timeout=5)
    assert set(wait_final(a, ids, timeout=5).values()) == {"succeeded"}
    row = query(a, "SELECT paused, max_per_second FROM jobflow.queues WHERE name = 'shared'")
    assert row == [{"paused": False, "max_per_second": 50.0}]


def test_max_concurrent_is_never_exceeded(tenant, second_receiver):
    """A queue limited to 3 requests in flight, with 15 slow ones due at
    once: the receiver never serves more than 3 of them at a time, and
    does serve 3 at a time."""
    role, conn = tenant
    call(conn, "SELECT jobflow.set_queue('slow', max_concurrent => 3)")
    url, tag = second_receiver.unique_url("/delay/300")
    ids = [schedule(conn, url, queue="slow") for _ in range(15)]
    assert set(wait_final(conn, ids, timeout=30).values()) == {"succeeded"}
    inflight = [r["inflight"] for r in second_receiver.tagged(tag)]
    assert len(inflight) == 15
    assert max(inflight) == 3, "in flight at arrival: %s" % inflight


def busiest_second(times):
    """The most arrivals within any one second starting at an arrival: a
    burst shows here wherever it falls, not only at whole seconds."""
    return max(bisect.bisect_left(times, t + 1.0) - i for i, t in enumerate(times))


@pytest.mark.timing
def test_rate_of_100_per_second(tenant, second_receiver):
    """600 tasks due at once in a 100/s queue arrive paced: no second holds
    much more than 100 (without the rate all 600 arrive within one), no
    50 ms holds a burst, and the 600 take at least five seconds.  A
    starved machine can only make them slower, so these bounds hold
    under steal; how close the pace stays to 100 a second (100 +- 5) is
    measured by bench/queues.sh, not asserted here."""
    role, conn = tenant
    call(conn, "SELECT jobflow.set_queue('steady', max_per_second => 100)")
    url, tag = second_receiver.unique_url("/ok")
    with conn.cursor() as cur:
        cur.execute("SELECT array_agg(jobflow.schedule(%s, queue => 'steady'))"
                    "  FROM generate_series(1, 600)", (url,))
        ids = cur.fetchone()[0]
    assert set(wait_final(conn, ids, timeout=60).values()) == {"succeeded"}
    times = sorted(r["time"] for r in second_receiver.tagged(tag))
    assert len(times) == 600
    # the worker's own view, to tell a starved worker from a starved receiver
    sent = sorted(r["t"] for r in query(
        conn, "SELECT extract(epoch FROM started_at)::float8 AS t FROM jobflow.task_log"
        " WHERE task_id = ANY(%s)", (ids,)))
    figures = "per second at the receiver: %s, sent by the worker: %s, all in %.2f s" % (
        per_second(times, times[0], 7), per_second(sent, sent[0], 7), times[-1] - times[0])
    # the window lets 100 go in any second; the slack is what the claim's
    # commit and the receiver's own scheduling shift into a second (a quarter
    # second's worth: the machine under test is shared)
    assert busiest_second(times) <= 125, figures
    assert times[-1] - times[0] >= 4.8, figures
    # smooth: no 50 ms window holds more than 20 (5 expected; after a stall
    # of the worker, what the rate allowed meanwhile goes at once, at most
    # 1 + 100 ms' worth = 11; a burst at each second boundary would put 100
    # in one)
    worst = max(bisect.bisect_left(times, t + 0.05) - i for i, t in enumerate(times))
    assert worst <= 20, "%d arrivals within 50 ms (the worker sent at most %d within 50 ms)" % (
        worst, max(bisect.bisect_left(sent, t + 0.05) - i for i, t in enumerate(sent)))
    # not far below the rate either: a pace of half the rate would take 12 s
    assert times[-1] - times[0] <= 12.0, figures


def test_priority_wins_when_capacity_is_short(tenant, second_receiver, server, db):
    """With one owner held to 2 requests at once, the due tasks of its
    priority-10 queue all go before any of its priority-0 queue's."""
    role, conn = tenant
    server.set_guc(db, "jobflow.max_requests_per_owner", 2)
    try:
        time.sleep(0.5)
        call(conn, "SELECT jobflow.pause_queue('low')")
        call(conn, "SELECT jobflow.pause_queue('high')")
        call(conn, "SELECT jobflow.set_queue('high', priority => 10)")
        low_url, low_tag = second_receiver.unique_url("/delay/100")
        high_url, high_tag = second_receiver.unique_url("/delay/100")
        ids = []
        for _ in range(8):
            ids.append(schedule(conn, low_url, queue="low"))
            ids.append(schedule(conn, high_url, queue="high"))
        time.sleep(0.5)
        # both resumed by one commit: they compete from the same turn on
        with conn.cursor() as cur:
            cur.execute("SELECT jobflow.resume_queue('low'), jobflow.resume_queue('high')")
        assert set(wait_final(conn, ids, timeout=30).values()) == {"succeeded"}
    finally:
        server.set_guc(db, "jobflow.max_requests_per_owner", None)
    got = sorted(second_receiver.requests(
        lambda r: ("t=" + low_tag) in r["query"] or ("t=" + high_tag) in r["query"]),
        key=lambda r: r["time"])
    kinds = ["high" if ("t=" + high_tag) in r["query"] else "low" for r in got]
    assert kinds == ["high"] * 8 + ["low"] * 8, kinds


@pytest.mark.timing
def test_per_host_rate_setting(tenant, second_receiver, server, db):
    """jobflow.max_requests_per_second_per_host = 20: 60 tasks due at once
    for one host arrive at about 20 a second; values between 0 and 0.001
    are refused."""
    role, conn = tenant
    with pytest.raises(psycopg2.Error) as e:
        call(db, "ALTER SYSTEM SET jobflow.max_requests_per_second_per_host = 0.0001")
    assert e.value.pgcode == "22023"
    server.set_guc(db, "jobflow.max_requests_per_second_per_host", 20)
    try:
        time.sleep(0.5)
        url, tag = second_receiver.unique_url("/ok")
        ids = [schedule(conn, url) for _ in range(60)]
        assert set(wait_final(conn, ids, timeout=30).values()) == {"succeeded"}
    finally:
        server.set_guc(db, "jobflow.max_requests_per_second_per_host", None)
    times = sorted(r["time"] for r in second_receiver.tagged(tag))
    assert len(times) == 60
    # paced at 20 a second (without the setting all 60 arrive within
    # 100 ms): 2.95 s from first to last, never much more than 20 within
    # any second; a starved machine only slows them down, so the upper
    # bound on the span is loose (half the rate)
    span = times[-1] - times[0]
    figures = "60 requests at 20/s took %.2f s, per second: %s" % (
        span, per_second(times, times[0], 4))
    assert busiest_second(times) <= 26, figures
    assert 2.6 <= span <= 6.0, figures


def test_per_queue_retention(tenant, receiver, server, db):
    """jobflow.retention 2 s: a queue with its own 0 keeps its finished
    tasks, one with 1 s loses them with the default queue's; with
    jobflow.retention 0, a queue's own retention still prunes."""
    role, conn = tenant
    call(conn, "SELECT jobflow.set_queue('keep', retention => interval '0')")
    call(conn, "SELECT jobflow.set_queue('brief', retention => interval '1 second')")
    url, _ = receiver.unique_url("/ok")
    keep = [schedule(conn, url, queue="keep") for _ in range(3)]
    brief = [schedule(conn, url, queue="brief") for _ in range(3)]
    plain = [schedule(conn, url) for _ in range(3)]
    wait_final(conn, keep + brief + plain, timeout=10)
    server.set_guc(db, "jobflow.reconcile_interval", "500ms")
    server.set_guc(db, "jobflow.retention", "2s")
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            left = set(states(db, keep + brief + plain))
            if not left & set(brief + plain):
                break
            time.sleep(0.2)
        assert not left & set(brief + plain), "not pruned: %s" % sorted(left & set(brief + plain))
        assert set(keep) <= left, "a queue with retention 0 lost tasks"
        # the default keeps everything; the queue's own retention still prunes
        server.set_guc(db, "jobflow.retention", 0)
        time.sleep(0.5)
        brief = [schedule(conn, url, queue="brief") for _ in range(2)]
        plain = [schedule(conn, url) for _ in range(2)]
        wait_final(conn, brief + plain, timeout=10)
        deadline = time.time() + 20
        while time.time() < deadline and set(states(db, brief)):
            time.sleep(0.2)
        assert states(db, brief) == {}, "a queue's own retention did not prune"
        assert set(states(db, plain)) == set(plain)
        assert query(db, "SELECT count(*) AS n FROM jobflow.task_log WHERE task_id = ANY(%s)",
                     (brief,)) == [{"n": 0}]
    finally:
        server.set_guc(db, "jobflow.retention", None)
        server.set_guc(db, "jobflow.reconcile_interval", None)


def test_dropped_role_loses_its_queues(db):
    """DROP ROLE: the worker forgets the role's queues (no row names a
    role that no longer exists)."""
    role = "app_q_" + uuid.uuid4().hex[:10]
    with db.cursor() as cur:
        cur.execute("CREATE ROLE %s" % role)
        cur.execute("SELECT jobflow.pause_queue('q', %s::regrole)", (role,))
        cur.execute("SELECT %s::regrole::oid", (role,))
        oid = cur.fetchone()[0]
        cur.execute("DROP ROLE %s" % role)
    deadline = time.time() + 10
    while time.time() < deadline:
        if call(db, "SELECT count(*) FROM jobflow.queues WHERE owner::oid = %s", (oid,)) == 0:
            break
        time.sleep(0.1)
    assert call(db, "SELECT count(*) FROM jobflow.queues WHERE owner::oid = %s", (oid,)) == 0


@pytest.mark.timing
def test_task_moved_out_of_a_paused_queue_fires(tenant, receiver):
    """A task parked in paused queue a is moved, while due, to queue b,
    which nothing holds: it fires at once from b, while a stays paused.
    Before, the worker left a parked task alone when it reloaded the row,
    and the task waited in a's lane, behind a's pause, until a resumed."""
    role, conn = tenant
    call(conn, "SELECT jobflow.pause_queue('a')")
    url, tag = receiver.unique_url("/ok")
    task = schedule(conn, url, queue="a", key="out")
    time.sleep(1.0)                 # due, parked in a's lane
    assert states(conn, [task]) == {task: "pending"}
    again = schedule(conn, url, queue="b", key="out", on_duplicate="replace")
    assert again == task
    assert wait_final(conn, task, timeout=10) == "succeeded"
    assert len(receiver.tagged(tag)) == 1
    assert call(conn, "SELECT paused FROM jobflow.queues WHERE name = 'a'") is True


def test_task_flipped_between_paused_queues_leaves_no_pile(tenant, receiver, db):
    """A task moved back and forth between two paused queues, due each
    time, is parked in each in turn; the copy it leaves in the lane it
    left is never served while that queue is paused.  Such copies go once
    they are most of their lane, so the worker keeps a few dozen of them
    (its queued figure), not one per move (150 here), and the task still
    fires once when its queue resumes."""
    role, conn = tenant
    call(conn, "SELECT jobflow.pause_queue('a')")
    call(conn, "SELECT jobflow.pause_queue('b')")
    url, tag = receiver.unique_url("/ok")
    task = schedule(conn, url, queue="a", key="flip")
    time.sleep(0.5)                 # due, parked in a's lane
    before = worker_status(db)["queued"]
    for i in range(150):
        assert schedule(conn, url, queue="b" if i % 2 == 0 else "a", key="flip",
                        on_duplicate="replace") == task
        time.sleep(0.02)            # parked again, in the other lane
    time.sleep(0.5)
    kept = worker_status(db)["queued"] - before
    assert kept <= 40, "%d copies kept after 150 moves" % kept
    call(conn, "SELECT jobflow.resume_queue('a')")
    call(conn, "SELECT jobflow.resume_queue('b')")
    assert wait_final(conn, task, timeout=10) == "succeeded"
    assert len(receiver.tagged(tag)) == 1


def test_task_moved_to_a_paused_queue_stays_there(tenant, receiver):
    """A task parked in paused queue a is moved (while due) to paused
    queue b, then falls due there.  Resuming a must not send it under a's
    settings through the copy a still held, whether or not the worker has
    loaded the move by then (the claim checks the row's queue too): it
    waits for b's resume, and fires once."""
    role, conn = tenant
    call(conn, "SELECT jobflow.pause_queue('a')")
    call(conn, "SELECT jobflow.pause_queue('b')")
    url, tag = receiver.unique_url("/ok")
    task = schedule(conn, url, queue="a", key="moved")
    time.sleep(1.0)                 # due, parked in a's lane
    again = schedule(conn, url, queue="b", key="moved", on_duplicate="replace",
                     run_at_sql="now() + interval '500 ms'")
    assert again == task
    time.sleep(1.5)                 # due again, parked in b's lane
    call(conn, "SELECT jobflow.resume_queue('a')")
    time.sleep(1.5)
    assert receiver.tagged(tag) == [], "sent through the queue it left"
    assert states(conn, [task]) == {task: "pending"}
    call(conn, "SELECT jobflow.resume_queue('b')")
    assert wait_final(conn, task, timeout=10) == "succeeded"
    assert len(receiver.tagged(tag)) == 1
    # a claim undone on the way (the worker had not seen the move) cost no attempt
    assert query(conn, "SELECT attempts FROM jobflow.tasks WHERE id = %s", (task,))[0]["attempts"] == 1
    assert len(query(conn, "SELECT 1 FROM jobflow.task_log WHERE task_id = %s", (task,))) == 1
