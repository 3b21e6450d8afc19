# -------------------------------------------------------------------------
#
# test_outcomes.py
#     Outcome notifications (issue 11, item 4): tasks scheduled with
#     notify => true are announced on their owner's channel
#     (jobflow.outcome_channel()) when they finish, in batches ("<id>:<state>"
#     separated by spaces), at the commit of the outcome write; retries are
#     not announced, other tasks never.
#
# -------------------------------------------------------------------------

import select
import time

from conftest import query, wait_final


def listen(conn):
    """LISTEN on the channel of conn's role; the channel's name."""
    channel = query(conn, "SELECT jobflow.outcome_channel() AS c")[0]["c"]
    conn.cursor().execute('LISTEN "%s"' % channel)
    return channel


def collect(conn, channel, until, timeout=30.0):
    """Notifications on channel until until(seen) or timeout: list of
    payloads."""
    payloads = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        if select.select([conn], [], [], 0.2) != ([], [], []):
            conn.poll()
            while conn.notifies:
                n = conn.notifies.pop(0)
                if n.channel == channel:
                    payloads.append(n.payload)
        if until(payloads):
            break
    return payloads


def parse(payloads):
    out = {}
    for p in payloads:
        for item in p.split(" "):
            task, state = item.split(":")
            out[int(task)] = state
    return out


def test_outcomes_are_announced_in_batches(connect, receiver):
    listener = connect()
    channel = listen(listener)
    db = connect()
    ok, tag = receiver.unique_url("/ok")
    bad, _ = receiver.unique_url("/status/404")
    flaky, _ = receiver.unique_url("/flaky/1")
    quiet, _ = receiver.unique_url("/ok")
    rows = query(db, "SELECT array_agg(jobflow.schedule(%s, run_at => now() + interval '1 s',"
                     " notify => true)) AS ids FROM generate_series(1, 40)", (ok,))
    good = rows[0]["ids"]
    failed = query(db, "SELECT jobflow.schedule(%s, notify => true) AS id", (bad,))[0]["id"]
    retried = query(db, "SELECT jobflow.schedule(%s, notify => true) AS id", (flaky,))[0]["id"]
    silent = query(db, "SELECT jobflow.schedule(%s) AS id", (quiet,))[0]["id"]
    wanted = set(good) | {failed, retried}
    payloads = collect(listener, channel, lambda p: wanted <= set(parse(p)))
    seen = parse(payloads)
    assert wanted <= set(seen), "not announced: %s" % (wanted - set(seen))
    assert all(seen[i] == "succeeded" for i in good)
    assert seen[failed] == "failed"
    assert seen[retried] == "succeeded"     # announced once, when it finished
    assert sum(p.count("%d:" % retried) for p in payloads) == 1
    wait_final(db, [silent])
    payloads += collect(listener, channel, lambda p: False, timeout=1.0)
    assert silent not in parse(payloads)
    # batched: 40 tasks due together come in far fewer notifications
    assert len([p for p in payloads if any(("%d:" % i) in p for i in good)]) <= 10, payloads
    # and the states match the table
    states = {r["id"]: r["state"] for r in query(
        db, "SELECT id, state::text FROM jobflow.tasks WHERE id = ANY(%s)", (list(wanted),))}
    assert states == {i: seen[i] for i in wanted}
