# -------------------------------------------------------------------------
#
# test_cron_bypass.py
#     Issue 9, Data 6: a cron timer changed around the API (a plain UPDATE
#     of active or url, a DELETE) applies to the occurrences it has
#     already materialised: none of them fires with the old definition,
#     or at all once the timer is paused or deleted.
#
# -------------------------------------------------------------------------

import time
import uuid

from conftest import query

SETTLE = 2.0


def scalar(db, sql, args=None):
    with db.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchone()[0]


def make_timer(db, receiver):
    """A per-second timer with occurrences materialised ahead; returns
    (timer id, tag)."""
    url, tag = receiver.unique_url("/ok")
    timer_id = scalar(db, "SELECT jobflow.schedule_cron(%s, '*/1 * * * * *', %s)",
                      ("bypass-" + uuid.uuid4().hex[:8], url))
    receiver.wait_for(lambda r: ("t=" + tag) in r["query"], n=2, timeout=10)
    # the materialiser works about a minute ahead
    assert scalar(db, "SELECT count(*) FROM jobflow.tasks WHERE cron_id = %s"
                  " AND state = 'pending'", (timer_id,)) >= 10
    return timer_id, tag


def assert_quiet(db, receiver, tag, since):
    time.sleep(SETTLE)
    n = len(receiver.tagged(tag))
    time.sleep(3)
    late = [r for r in receiver.tagged(tag) if r["time"] > since + 1.0]
    assert len(receiver.tagged(tag)) == n and late == [], \
        "%d call(s) after the change" % len(late)


def test_update_active_false_cancels_occurrences(db, receiver):
    timer_id, tag = make_timer(db, receiver)
    scalar(db, "UPDATE jobflow.cron_timers SET active = false WHERE id = %s RETURNING id",
           (timer_id,))
    changed = time.time()
    assert scalar(db, "SELECT count(*) FROM jobflow.tasks WHERE cron_id = %s"
                  " AND state = 'pending'", (timer_id,)) == 0
    assert scalar(db, "SELECT count(*) FROM jobflow.tasks WHERE cron_id = %s AND"
                  " last_error = 'cancelled: its cron timer was paused'", (timer_id,)) >= 10
    assert_quiet(db, receiver, tag, changed)


def test_update_url_moves_every_later_call(db, receiver):
    timer_id, tag = make_timer(db, receiver)
    new_url, new_tag = receiver.unique_url("/ok")
    scalar(db, "UPDATE jobflow.cron_timers SET url = %s WHERE id = %s RETURNING id",
           (new_url, timer_id))
    changed = time.time()
    # nothing pending still carries the old URL
    assert scalar(db, "SELECT count(*) FROM jobflow.tasks WHERE cron_id = %s"
                  " AND state = 'pending' AND url <> %s", (timer_id, new_url)) == 0
    receiver.wait_for(lambda r: ("t=" + new_tag) in r["query"], n=3, timeout=10)
    assert_quiet(db, receiver, tag, changed)
    scalar(db, "DELETE FROM jobflow.cron_timers WHERE id = %s RETURNING id", (timer_id,))


def test_delete_cancels_occurrences(db, receiver):
    timer_id, tag = make_timer(db, receiver)
    scalar(db, "DELETE FROM jobflow.cron_timers WHERE id = %s RETURNING id", (timer_id,))
    changed = time.time()
    assert scalar(db, "SELECT count(*) FROM jobflow.tasks WHERE cron_id = %s"
                  " AND state = 'pending'", (timer_id,)) == 0
    assert_quiet(db, receiver, tag, changed)
    # its history stays
    assert scalar(db, "SELECT count(*) FROM jobflow.tasks WHERE cron_id = %s"
                  " AND state = 'succeeded'", (timer_id,)) >= 2


def test_materialiser_bookkeeping_keeps_occurrences(db, receiver):
    """Only a change of the definition cancels: the materialiser's own
    next_at updates (and a missed-policy change) leave them pending."""
    timer_id, tag = make_timer(db, receiver)
    before = scalar(db, "SELECT count(*) FROM jobflow.tasks WHERE cron_id = %s"
                    " AND state = 'cancelled'", (timer_id,))
    scalar(db, "UPDATE jobflow.cron_timers SET missed = 'once' WHERE id = %s RETURNING id",
           (timer_id,))
    assert scalar(db, "SELECT count(*) FROM jobflow.tasks WHERE cron_id = %s"
                  " AND state = 'cancelled'", (timer_id,)) == before
    scalar(db, "DELETE FROM jobflow.cron_timers WHERE id = %s RETURNING id", (timer_id,))
    rows = query(db, "SELECT count(*) AS n FROM jobflow.tasks WHERE cron_id = %s"
                 " AND state = 'pending'", (timer_id,))
    assert rows == [{"n": 0}]
