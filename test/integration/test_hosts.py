# -------------------------------------------------------------------------
#
# test_hosts.py
#     A host that never answers does not hold up callbacks to other hosts;
#     one that never stops answering does not hold its request slot.
#
# jobflow.max_requests_per_host is lowered (ALTER SYSTEM + reload) so that
# a few /hang requests to 127.0.0.1 saturate that host; tasks for
# "localhost" (the same receiver, a different host key) must still arrive
# promptly, and the cap must hold for the saturated host.
#
# -------------------------------------------------------------------------

import time

import pytest

from conftest import schedule, task_log, wait_final

CAP = 3
HANG_TIMEOUT_MS = 4000


@pytest.fixture
def low_host_cap(db, server):
    server.set_guc(db, "jobflow.max_requests_per_host", CAP)
    # the worker applies it on its next loop turn after SIGHUP
    time.sleep(0.5)
    try:
        yield CAP
    finally:
        server.set_guc(db, "jobflow.max_requests_per_host", None)


@pytest.mark.timing
def test_hanging_host_does_not_delay_other_hosts(db, receiver, server, low_host_cap):
    hang_url, hang_tag = receiver.unique_url("/hang", host="127.0.0.1")
    hang_ids = [schedule(db, hang_url, timeout_ms=HANG_TIMEOUT_MS, max_attempts=1)
                for _ in range(2 * CAP)]
    # the first CAP are in flight and hang; the rest wait for a slot
    receiver.wait_for(lambda r: ("t=" + hang_tag) in r["query"], n=CAP, timeout=5)

    ok_url, ok_tag = receiver.unique_url("/ok", host="localhost")
    start = time.time()
    ok_ids = [schedule(db, ok_url) for _ in range(2 * CAP)]
    reqs = receiver.wait_for(lambda r: ("t=" + ok_tag) in r["query"], n=len(ok_ids),
                             timeout=HANG_TIMEOUT_MS / 1000.0 + 5)
    latest = max(r["time"] for r in reqs)
    assert latest - start < 1.0, \
        "callbacks to localhost took %.3f s behind a hanging 127.0.0.1" % (latest - start)
    assert set(wait_final(db, ok_ids, timeout=5).values()) == {"succeeded"}

    # the saturated host got no more than its cap
    hanging = receiver.tagged(hang_tag)
    assert len(hanging) == CAP, "%d requests to the hanging host, cap %d" % (len(hanging), CAP)

    # lifting the cap releases the queued ones; all end failed (timeout)
    server.set_guc(db, "jobflow.max_requests_per_host", None)
    assert set(wait_final(db, hang_ids, timeout=2 * HANG_TIMEOUT_MS / 1000.0 + 10).values()) \
        == {"failed"}
    for i in hang_ids:
        log = task_log(db, i)
        assert len(log) == 1 and "timed out" in log[0]["error"].lower(), log


def test_endless_body_frees_its_slot(db, second_receiver, server):
    """Issue 20, item 8: a receiver that sends its status and then streams
    a body without end.  The worker keeps the excerpt, stops reading and
    frees the slot: the task ends with the receiver's status long before
    its 60 s timeout, and a task to the same origin behind it (one request
    per host) is not held up.  Before, both waited for the timeout."""
    server.set_guc(db, "jobflow.max_requests_per_host", 1)
    time.sleep(0.5)
    try:
        start = time.time()
        url, tag = second_receiver.unique_url("/stream?seconds=90")
        endless = schedule(db, url, timeout_ms=60000, max_attempts=1)
        second_receiver.wait_for(lambda r: ("t=" + tag) in r["query"], n=1, timeout=10)
        url404, tag404 = second_receiver.unique_url("/stream?status=404&seconds=90")
        failing = schedule(db, url404, timeout_ms=60000, max_attempts=3)
        ok_url, ok_tag = second_receiver.unique_url("/ok")
        after = schedule(db, ok_url)
        states = wait_final(db, [endless, failing, after], timeout=30)
        assert time.time() - start < 30
        assert states == {endless: "succeeded", failing: "failed", after: "succeeded"}
        log = task_log(db, endless)
        assert len(log) == 1 and log[0]["http_status"] == 200 and log[0]["error"] is None, log
        assert log[0]["response"] == "x" * 4096
        # the outcome is the status's, as for any answer: 404 is final
        log = task_log(db, failing)
        assert len(log) == 1 and log[0]["http_status"] == 404, log
        assert log[0]["error"] == "HTTP status 404"
        assert len(second_receiver.tagged(ok_tag)) == 1
    finally:
        server.set_guc(db, "jobflow.max_requests_per_host", None)


def _wheel_bytes(db):
    with db.cursor() as cur:
        cur.execute("SELECT wheel_bytes FROM jobflow.worker_status()")
        return cur.fetchone()[0]


def _origins_round(db, n):
    """2,000 tasks, each to an origin of its own (127.n.x.y:9: loopback,
    refused at once), one attempt each; wait until all have failed."""
    with db.cursor() as cur:
        cur.execute(
            "SELECT array_agg(jobflow.schedule("
            "  url => pg_catalog.format('http://127.%%s.%%s.%%s:9/', %s, k / 250, k %% 250 + 1),"
            "  max_attempts => 1))"
            "  FROM generate_series(0, 1999) k", (n,))
        ids = cur.fetchone()[0]
    states = wait_final(db, ids, timeout=60)
    assert set(states.values()) == {"failed"}


def _settles_below(db, limit, timeout=20.0):
    """Wait (housekeeping collects every second here) until the worker's
    memory is at most limit; the last figure either way."""
    deadline = time.time() + timeout
    while True:
        now = _wheel_bytes(db)
        if now <= limit or time.time() > deadline:
            return now
        time.sleep(0.2)


def test_origins_no_task_needs_are_forgotten(db, server):
    """A tenant sending to ever new origins costs the worker the live ones
    only: each origin's lane, its entry and (with a per-host rate) its
    2.4 KB window go once its tasks are done and the rate forgot it.
    Without that, every round of 2,000 new origins would keep about 6 MB."""
    server.set_guc(db, "jobflow.max_requests_per_second_per_host", 1000)
    time.sleep(0.5)
    try:
        before = _wheel_bytes(db)
        _origins_round(db, 1)
        # the worker's tables keep their size for reuse: about 2.1 MB more
        # than a fresh worker here (7.4 MB without collecting)
        first = _settles_below(db, before + 3_500_000)
        assert first <= before + 3_500_000, (before, first)
        time.sleep(2.5)             # two more rounds of housekeeping: all collected
        first = _wheel_bytes(db)
        _origins_round(db, 2)
        second = _settles_below(db, first + 200_000)
        print("worker memory: %d bytes before, %d after 2,000 origins, %d after 2,000 more"
              % (before, first, second))
        assert second <= first + 200_000, (before, first, second)
    finally:
        server.set_guc(db, "jobflow.max_requests_per_second_per_host", None)
