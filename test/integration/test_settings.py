# -------------------------------------------------------------------------
#
# test_settings.py
#     Rules between jobflow's settings (issue 9, item 12): a configuration
#     that contradicts itself is clamped, with a WARNING in the server log
#     naming both settings and the value in effect, and the worker behaves
#     as the value in effect says.
#
# -------------------------------------------------------------------------

import os
import time

import pytest

from conftest import epoch, query, schedule, wait_final


def _log_size(server):
    return os.path.getsize(server.logfile)


def _wait_log(server, offset, needle, timeout=20.0):
    """Wait until the server log, from offset on, holds needle; return
    that part of the log."""
    deadline = time.time() + timeout
    while True:
        with open(server.logfile, errors="replace") as f:
            f.seek(offset)
            text = f.read()
        if needle in text:
            return text
        if time.time() >= deadline:
            pytest.fail("server log has no %r after %.0f s; it says:\n%s"
                        % (needle, timeout, text[-3000:]))
        time.sleep(0.2)


def _reset(server, db, *names):
    for name in names:
        server.set_guc(db, name, None)


@pytest.mark.timing
def test_reconcile_interval_above_a_third_of_horizon_is_clamped(server, connect, receiver):
    """reconcile_interval = 1h with horizon = 60s: the worker rescans every
    20 s instead, says so, and a task due beyond the notify window (so that
    only the rolling rescan can load it) fires on time, not an hour late.
    The server restarts so that the worker starts with the short horizon
    (a lowered horizon only shrinks the loaded window as time passes)."""
    db = connect()
    old_pid = server.worker_pid(db)
    offset = _log_size(server)
    try:
        with db.cursor() as cur:
            cur.execute("ALTER SYSTEM SET jobflow.horizon = '60s'")
            cur.execute("ALTER SYSTEM SET jobflow.reconcile_interval = '1h'")
        db.close()
        server.restart()
        server.wait_worker(old_pid)
        db = connect()
        text = _wait_log(server, offset,
                         "jobflow.reconcile_interval (3600000 ms) is more than "
                         "a third of jobflow.horizon (60 s)")
        assert "The worker uses jobflow.reconcile_interval = 20000 ms." in text
        assert "HINT:  Lower jobflow.reconcile_interval or raise jobflow.horizon." in text
        # SHOW keeps what was configured; the warning says what is in effect
        assert query(db, "SHOW jobflow.reconcile_interval")[0]["jobflow.reconcile_interval"] == "1h"
        # the notify window is the 60 s horizon: a task due later is only
        # loaded by a rescan
        deadline = time.time() + 30
        while True:
            status = query(db, "SELECT horizon_end - now() AS ahead FROM jobflow.worker_status()")[0]
            if status["ahead"] is not None or time.time() > deadline:
                break
            time.sleep(0.1)     # the worker publishes its horizon once loaded
        assert status["ahead"].total_seconds() < 61, status

        url, tag = receiver.unique_url()
        task = schedule(db, url, run_at_sql="now() + interval '65 seconds'")
        wait_final(db, [task], timeout=95.0)
        got = receiver.tagged(tag)
        assert len(got) == 1, got
        late = got[0]["time"] - epoch(db, task)
        assert late < 10.0, "fired %.1f s late" % late
    finally:
        _reset(server, db, "jobflow.reconcile_interval", "jobflow.horizon")


@pytest.mark.parametrize("settings,message,in_effect", [
    ({"jobflow.log_flush_ms": "60s", "jobflow.reconcile_interval": "2s"},
     "jobflow.log_flush_ms (60000 ms) is more than jobflow.reconcile_interval (2000 ms in effect)",
     "The worker uses jobflow.log_flush_ms = 2000 ms."),
    ({"jobflow.retry_backoff_base": "10s", "jobflow.retry_backoff_max": "3s"},
     "jobflow.retry_backoff_base (10000 ms) is more than jobflow.retry_backoff_max (3000 ms)",
     "The worker uses jobflow.retry_backoff_base = 3000 ms."),
    ({"jobflow.max_requests_per_host": "100", "jobflow.max_concurrent_requests": "10"},
     "jobflow.max_requests_per_host (100) is more than jobflow.max_concurrent_requests (10)",
     "The worker uses jobflow.max_requests_per_host = 10."),
])
def test_contradicting_settings_warn_with_value_in_effect(server, db, settings, message, in_effect):
    """Each rule, set in one reload (both values at once, whatever their
    order in the file), is reported once with the value in effect."""
    offset = _log_size(server)
    try:
        with db.cursor() as cur:
            for name, value in settings.items():
                cur.execute("ALTER SYSTEM SET %s = %%s" % name, (value,))
            cur.execute("SELECT pg_reload_conf()")
        text = _wait_log(server, offset, message)
        assert in_effect in text
    finally:
        offset = _log_size(server)
        _reset(server, db, *settings)
    # once the contradiction is gone, the next reload says nothing of it
    _wait_log(server, offset, "received SIGHUP")
    time.sleep(1.5)
    with open(server.logfile, errors="replace") as f:
        f.seek(offset)
        assert message not in f.read()
