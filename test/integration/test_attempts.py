# -------------------------------------------------------------------------
#
# test_attempts.py
#     Each attempt counted and logged once, and sent only as often as it is
#     counted (issue 9, items 7 and 8): after a crash of the whole server
#     every request that reached the receiver has its attempt in task_log
#     and no attempt number is sent twice; after kill -9 of the worker in a
#     burst, only requests that were sent are logged as interrupted.
#
# -------------------------------------------------------------------------


from conftest import query, wait_final


def received(receiver, tag):
    """{(task id, attempt): how many times the receiver got it}."""
    got = {}
    for r in receiver.tagged(tag):
        key = (int(r["headers"]["x-jobflow-task-id"]), int(r["headers"]["x-jobflow-attempt"]))
        got[key] = got.get(key, 0) + 1
    return got


def logged(conn, ids):
    return {(r["task_id"], r["attempt"]): r["outcome"] for r in query(
        conn, "SELECT task_id, attempt, outcome FROM jobflow.task_log"
              " WHERE task_id = ANY(%s)", (ids,))}


def burst(conn, url, n):
    with conn.cursor() as cur:
        cur.execute("INSERT INTO jobflow.tasks (url, max_attempts)"
                    " SELECT %s || '&n=' || g, 10 FROM generate_series(1, %s) g"
                    " RETURNING id", (url, n))
        return sorted(r[0] for r in cur.fetchall())


def test_crash_loses_no_attempt(connect, receiver, server):
    """Item 7: an immediate stop in the middle of a burst.  Claims commit
    before their requests go out, so no attempt reaches the receiver twice
    and every attempt that reached it is in the log."""
    db = connect()
    url, tag = receiver.unique_url("/delay/100")
    ids = burst(db, url, 1500)
    receiver.wait_for(lambda r: ("t=" + tag) in r["query"], n=300, timeout=30)
    server.crash_restart()
    server.wait_worker(None, timeout=60)
    db = connect()
    states = wait_final(db, ids, timeout=90)
    assert set(states.values()) == {"succeeded"}, {s: list(states.values()).count(s)
                                                    for s in set(states.values())}
    got = received(receiver, tag)
    twice = {k: v for k, v in got.items() if v > 1}
    assert not twice, "attempts sent more than once: %s" % sorted(twice)[:10]
    log = logged(db, ids)
    missing = sorted(k for k in got if k not in log)
    assert not missing, "%d attempts reached the receiver with no task_log row: %s" % (
        len(missing), missing[:10])
    # and the attempt counters agree with the log
    rows = query(db, "SELECT id, attempts FROM jobflow.tasks WHERE id = ANY(%s)", (ids,))
    for r in rows:
        mine = sorted(a for (t, a) in log if t == r["id"])
        assert mine == list(range(1, r["attempts"] + 1)), (r, mine)


def test_kill9_interrupts_only_what_was_sent(connect, receiver, server):
    """Item 8: kill -9 of the worker while a burst of 3,000 drains 64 at a
    time: the interrupted attempts are those in flight, not every task the
    worker had claimed."""
    db = connect()
    url, tag = receiver.unique_url("/delay/300")
    ids = burst(db, url, 3000)
    receiver.wait_for(lambda r: ("t=" + tag) in r["query"], n=200, timeout=30)
    old = server.worker_pid(db)
    server.kill9(old)
    server.wait_worker(old, timeout=60)
    db = connect()
    states = wait_final(db, ids, timeout=120)
    assert set(states.values()) == {"succeeded"}
    got = received(receiver, tag)
    interrupted = [k for k, v in logged(db, ids).items() if v == "interrupted"]
    assert interrupted, "kill -9 interrupted nothing: the test did not test"
    unsent = [k for k in interrupted if k not in got]
    # interrupted: the requests in flight, and attempts whose outcome (written
    # asynchronously) the crash lost; all of them reached the receiver, but
    # for one claim (at most the host's 64 places) killed between its commit
    # and its requests leaving: on a loaded machine that window is several
    # ms.  Claiming ahead, as 0.1.0 did, leaves thousands unsent.
    assert len(unsent) <= 64, "%d of %d interrupted attempts never reached the receiver" % (
        len(unsent), len(interrupted))
