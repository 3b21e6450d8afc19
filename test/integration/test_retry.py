# -------------------------------------------------------------------------
#
# test_retry.py
#     Outcomes of failed attempts: retries with backoff on 5xx, timeouts
#     and refused connections, Retry-After, non-retryable 4xx and
#     redirect loops, and max_attempts.
#
# The backoff of attempt k (k = 1 for the first retry) is drawn from the
# upper half of min(base * 2^(k-1), max) and is never below twice
# jobflow.log_flush_ms; the gap between two arrivals at the receiver must
# be at least that.
#
# -------------------------------------------------------------------------

import socket
import time
from urllib.parse import quote

import pytest

from conftest import query, schedule, task_log, task_row, wait_final


def setting_ms(conn, name):
    return int(query(conn, "SELECT setting FROM pg_settings WHERE name = %s",
                     (name,))[0]["setting"])


def min_backoff_s(conn, attempt):
    """Smallest delay the worker may put after a failed attempt."""
    base = setting_ms(conn, "jobflow.retry_backoff_base")
    cap = setting_ms(conn, "jobflow.retry_backoff_max")
    flush = setting_ms(conn, "jobflow.log_flush_ms")
    delay = min(base * 2 ** (attempt - 1), cap)
    return max(delay // 2, 2 * flush) / 1000.0


def arrivals(receiver, tag, n, timeout=20):
    reqs = receiver.wait_for(lambda r: ("t=" + tag) in r["query"], n=n, timeout=timeout)
    return sorted(reqs, key=lambda r: r["time"])


def assert_log(log, outcomes, statuses=None):
    assert [r["outcome"] for r in log] == outcomes, log
    assert [r["attempt"] for r in log] == list(range(1, len(outcomes) + 1)), log
    if statuses is not None:
        assert [r["http_status"] for r in log] == statuses, log


def closed_port():
    """A loopback port nothing listens on (bound, then released)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.smoke
def test_retry_on_500_until_success(db, receiver):
    url, tag = receiver.unique_url("/flaky/2")
    task_id = schedule(db, url, max_attempts=5)
    assert wait_final(db, task_id) == "succeeded"

    row = task_row(db, task_id)
    assert row["attempts"] == 3
    assert row["last_status"] == 200
    assert_log(task_log(db, task_id), ["retry", "retry", "succeeded"], [500, 500, 200])

    reqs = arrivals(receiver, tag, 3)
    assert len(reqs) == 3
    assert [r["headers"]["x-jobflow-attempt"] for r in reqs] == ["1", "2", "3"]
    for k in (1, 2):
        gap = reqs[k]["time"] - reqs[k - 1]["time"]
        assert gap >= min_backoff_s(db, k), \
            "attempt %d came %.3f s after attempt %d" % (k + 1, gap, k)


def test_timeout_is_retried_then_fails(db, receiver):
    url, tag = receiver.unique_url("/hang")
    task_id = schedule(db, url, timeout_ms=300, max_attempts=2)
    assert wait_final(db, task_id) == "failed"

    log = task_log(db, task_id)
    assert_log(log, ["retry", "failed"])
    for r in log:
        assert "timed out" in r["error"].lower() or "timeout" in r["error"].lower(), r
    row = task_row(db, task_id)
    assert row["attempts"] == 2
    assert "time" in row["last_error"].lower()
    reqs = arrivals(receiver, tag, 2)
    assert len(reqs) == 2
    # the first attempt waited for its timeout before the retry was due
    # (less the time it took to connect: its clock starts before arrival)
    assert reqs[1]["time"] - reqs[0]["time"] >= 0.25 + min_backoff_s(db, 1)


def test_connection_refused_is_retried_then_fails(db):
    url = "http://127.0.0.1:%d/nothing-here" % closed_port()
    task_id = schedule(db, url, max_attempts=3)
    assert wait_final(db, task_id) == "failed"
    log = task_log(db, task_id)
    assert_log(log, ["retry", "retry", "failed"])
    for r in log:
        assert r["http_status"] is None, r
        assert "connect" in r["error"].lower(), r
    assert task_row(db, task_id)["attempts"] == 3


@pytest.mark.smoke
def test_retry_after_is_honoured(db, receiver):
    url, tag = receiver.unique_url("/status/503?retry_after=1")
    task_id = schedule(db, url, max_attempts=2)
    assert wait_final(db, task_id) == "failed"
    assert_log(task_log(db, task_id), ["retry", "failed"], [503, 503])
    reqs = arrivals(receiver, tag, 2)
    gap = reqs[1]["time"] - reqs[0]["time"]
    assert gap >= 1.0, "second attempt %.3f s after the first, Retry-After said 1 s" % gap


@pytest.mark.smoke
def test_404_is_not_retried(db, receiver):
    url, tag = receiver.unique_url("/status/404")
    task_id = schedule(db, url, max_attempts=5)
    assert wait_final(db, task_id) == "failed"
    assert_log(task_log(db, task_id), ["failed"], [404])
    row = task_row(db, task_id)
    assert row["attempts"] == 1
    assert row["last_status"] == 404
    # nothing else comes: give a retry (minimum backoff) ample time
    assert len(arrivals(receiver, tag, 1)) == 1
    time.sleep(1.0)
    assert len(receiver.tagged(tag)) == 1


def test_max_attempts_respected(db, receiver):
    url3, tag3 = receiver.unique_url("/status/500")
    url1, tag1 = receiver.unique_url("/status/429")
    three = schedule(db, url3, max_attempts=3)
    one = schedule(db, url1, max_attempts=1)
    # 429 is retryable: with a second attempt allowed, it is used
    url2, tag2 = receiver.unique_url("/status/429")
    two = schedule(db, url2, max_attempts=2)
    assert wait_final(db, [three, one, two]) == {three: "failed", one: "failed", two: "failed"}
    assert_log(task_log(db, two), ["retry", "failed"], [429, 429])
    assert_log(task_log(db, three), ["retry", "retry", "failed"], [500, 500, 500])
    assert_log(task_log(db, one), ["failed"], [429])
    assert task_row(db, three)["attempts"] == 3
    assert task_row(db, one)["attempts"] == 1
    time.sleep(1.0)
    assert len(receiver.tagged(tag3)) == 3
    assert len(receiver.tagged(tag1)) == 1
    assert len(receiver.tagged(tag2)) == 2


def test_too_many_redirects_is_not_retried(db, receiver):
    """A chain longer than jobflow.max_redirects (3) is a final failure,
    like any status docs/receivers.md does not list as retryable."""
    path = "/ok"
    for _ in range(6):
        path = "/redirect?to=" + quote(path, safe="")
    url, tag = receiver.unique_url(path)
    task_id = schedule(db, url, max_attempts=3)
    assert wait_final(db, task_id) == "failed"
    log = task_log(db, task_id)
    assert_log(log, ["failed"], [302])
    assert "redirect" in log[0]["error"].lower(), log
    assert task_row(db, task_id)["attempts"] == 1
    # nothing else comes: give a retry (minimum backoff) ample time
    time.sleep(1.0)
    assert len(receiver.tagged(tag)) == 1
