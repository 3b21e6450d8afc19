# -------------------------------------------------------------------------
#
# test_failover.py
#     Failover: a hot standby runs no jobflow worker; once promoted, its
#     worker fires every task the primary had committed.
#
# The test builds its own primary and streaming standby (pg_basebackup -R,
# servers of test/pgnode.py) next to the suite's cluster, kills the
# primary with an immediate stop before the tasks are due, promotes the
# standby and checks that the receiver gets every task, none before its
# time.
#
# -------------------------------------------------------------------------

import os

import pytest

import pgnode
from pgnode import wait_until

BASE_PORT = int(os.environ.get("PGPORT", "54329")) + 10


@pytest.fixture
def pair():
    """(primary, standby): pgnode.Node servers of the database jobflow,
    the standby streaming from the primary; both stopped at the end."""
    with pgnode.scratch_dir("jobflow-failover-") as top:
        primary = pgnode.Node(top, "primary", BASE_PORT, dbname="jobflow")
        standby = pgnode.Node(top, "standby", BASE_PORT + 1, dbname="jobflow")
        try:
            primary.initdb()
            primary.configure()
            primary.start()
            primary.query("CREATE DATABASE jobflow", dbname="postgres")
            primary.query("CREATE EXTENSION jobflow")
            pgnode.as_server_user([standby.bin("pg_basebackup"), "-D", standby.data, "-d",
                                   "host=%s port=%d user=postgres" % (primary.sock, primary.port),
                                   "-R", "-X", "stream", "-c", "fast", "--no-sync"])
            standby.configure()
            standby.start()
            yield primary, standby
        finally:
            for node in (standby, primary):
                node.stop_quietly()


@pytest.mark.smoke
def test_promoted_standby_fires_what_the_primary_committed(pair, receiver):
    primary, standby = pair
    url, tag = receiver.unique_url("/ok")

    assert standby.query("SELECT pg_is_in_recovery()")[0][0] is True
    assert standby.query("SELECT pid FROM jobflow.worker_status()")[0][0] is None, \
        "a standby must not run the jobflow worker"

    rows = primary.query(
        "SELECT jobflow.schedule(%s, run_at => now() + g * interval '300 milliseconds'"
        "                        + interval '2 seconds'),"
        "       extract(epoch FROM now() + g * interval '300 milliseconds' + interval '2 seconds')"
        "  FROM generate_series(1, 5) g", (url,))
    due = {int(r[0]): float(r[1]) for r in rows}

    # the standby has every committed task before the primary goes away
    lsn = primary.query("SELECT pg_current_wal_lsn()::text")[0][0]
    wait_until(lambda: standby.query(
        "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,))[0][0], 30, "replay")
    primary.stop("immediate")
    assert not receiver.tagged(tag), "the primary fired before it was stopped"

    standby.pg_ctl("promote")
    wait_until(lambda: standby.query("SELECT pid FROM jobflow.worker_status()")[0][0],
               30, "the promoted standby's worker")

    wait_until(lambda: len({r["headers"].get("x-jobflow-task-id")
                            for r in receiver.tagged(tag)}) == len(due),
               30, "all tasks to reach the receiver")
    for r in receiver.tagged(tag):
        task_id = int(r["headers"]["x-jobflow-task-id"])
        assert r["time"] >= due[task_id], "task %d fired early" % task_id
    states = wait_until(lambda: (lambda s: s if all(x == "succeeded" for (_, x) in s) else None)(
        standby.query("SELECT id, state::text FROM jobflow.tasks ORDER BY id")),
        30, "all tasks succeeded on the new primary")
    assert sorted(i for (i, _) in states) == sorted(due)
