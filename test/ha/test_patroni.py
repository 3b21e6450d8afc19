# -------------------------------------------------------------------------
#
# test_patroni.py
#     jobflow under Patroni: a planned switchover and a crash of the
#     leader, each under a steady load of about 200 callbacks a second.
#
# A client thread schedules tasks due one second ahead, 200 a second,
# through whichever node is read-write (libpq's target_session_attrs),
# reconnecting after faults.  For each fault the test checks, from the
# receiver's records and the new leader's tables:
#   - every task committed is delivered and succeeded, none lost (every
#     id the client got back is on the new leader);
#   - every duplicate delivery is a further attempt of its task whose
#     earlier attempt is in jobflow.task_log (the request may have left
#     before the fault, and it is logged so); the same attempt delivered
#     twice, or one the log does not know, is a failure;
#   - the new leader's worker fires after its promotion;
#   - the old leader, once a replica again, fires nothing, and no replica
#     runs a jobflow process.
# The receiver tells the nodes apart by the process that holds the
# client's end of each connection (see ha_receiver.py).  Figures (time
# from the fault to the new leader's first callback, duplicates by cause,
# tasks delivered) are printed, not asserted.
#
# -------------------------------------------------------------------------

import collections
import os
import signal
import threading
import time

import psycopg2
import pytest

from conftest import APP_ROLE, http_json
from pgnode import wait_until

RATE = 200                  # tasks scheduled (and due) per second
AHEAD = 1.0                 # seconds between scheduling and due time
STEADY = 6.0                # seconds of load before the fault
AFTER = 4.0                 # seconds of load after the old leader rejoined


class Load(threading.Thread):
    """Schedules RATE tasks a second, due AHEAD seconds later, in batches
    of one transaction each, through whichever node is read-write."""

    def __init__(self, cluster, url):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.url = url
        self.acked = {}         # task id -> (due epoch, node port)
        self.errors = []        # (time, error): each a batch of unknown fate
        self.halt = threading.Event()

    def run(self):
        conn = None
        start = time.time()
        sent = 0
        while not self.halt.is_set():
            target = int((time.time() - start) * RATE)
            n = min(target - sent, RATE // 2)
            if n <= 0:
                time.sleep(0.01)
                continue
            try:
                if conn is None:
                    conn = psycopg2.connect(self.cluster.dsn())
                    conn.autocommit = True
                with conn.cursor() as cur:
                    cur.execute(
                        "SELECT jobflow.schedule(%s, run_at => now() + %s * interval '1 second'),"
                        "       extract(epoch FROM now() + %s * interval '1 second')::float8"
                        "  FROM generate_series(1, %s)", (self.url, AHEAD, AHEAD, n))
                    rows = cur.fetchall()
                port = conn.info.port
                for task_id, due in rows:
                    self.acked[task_id] = (due, port)
            except psycopg2.Error as e:
                # committed or not: the client cannot know; the tasks, if
                # any, are checked like every other on the new leader
                self.errors.append((time.time(), str(e).strip().splitlines()[0]))
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:
                        pass
                conn = None
                time.sleep(0.1)
            # the rate is by the clock: what an outage kept back is skipped
            sent = max(sent + n, int((time.time() - start) * RATE) - RATE // 10)
        if conn is not None:
            conn.close()

    def stop(self):
        self.halt.set()
        self.join(timeout=30)


def jobflow_processes(node):
    """jobflow's processes on a node, by pg_stat_activity."""
    return node.query("SELECT backend_type, pid FROM pg_stat_activity"
                      " WHERE backend_type LIKE 'jobflow%%'", dbname="postgres")


def promoted(nodes, timeout):
    """(node, time of its promotion) for the first of nodes to be promoted.
    The time is when its jobflow launcher started: the launcher starts as
    soon as recovery ends (BgWorkerStart_RecoveryFinished), so this is the
    earliest moment a worker could exist there."""
    def read_write():
        return next((n for n in nodes if n.in_recovery() is False), None)
    node = wait_until(read_write, timeout, "a node to be promoted", interval=0.05)

    def launcher_start():
        rows = node.query("SELECT extract(epoch FROM backend_start)::float8 FROM pg_stat_activity"
                          " WHERE backend_type = 'jobflow launcher'", dbname="postgres")
        return rows[0][0] if rows else None
    return node, wait_until(launcher_start, 30, "the new leader's jobflow launcher")


def classify_duplicates(received, log):
    """Extra deliveries by cause.  received: task id -> list of records;
    log: (task id, attempt) -> outcome on the new leader."""
    causes = collections.Counter()
    examples = collections.defaultdict(list)
    for task_id, recs in received.items():
        if len(recs) < 2:
            continue
        attempts = sorted(r["attempt"] for r in recs)
        if len(set(attempts)) < len(attempts):
            cause = "the same attempt delivered twice"
            causes[cause] += len(attempts) - len(set(attempts))
            examples[cause].append((task_id, recs))
        for a in sorted(set(attempts))[:-1]:
            outcome = log.get((task_id, a))
            if outcome == "interrupted":
                cause = "interrupted attempt, retried and logged"
            elif outcome in ("retry", "failed"):
                cause = "attempt logged as %s, retried" % outcome
            elif outcome is None:
                cause = "an earlier attempt missing from task_log"
            else:
                cause = "an earlier attempt logged as %s" % outcome
            causes[cause] += 1
            examples[cause].append((task_id, recs))
    return causes, examples


ACCEPTED = ("interrupted attempt, retried and logged", "attempt logged as retry, retried",
            "attempt logged as failed, retried")


def run_scenario(cluster, kind, fault):
    wait_until(cluster.healthy, 120, "a healthy cluster before the %s" % kind)
    old = cluster.leader()
    others = [n for n in cluster.nodes if n is not old]
    for node in others:
        assert not jobflow_processes(node), \
            "replica %s runs jobflow: %s" % (node.name, jobflow_processes(node))
    url = "http://127.0.0.1:%d/%s" % (cluster.receiver_port, kind)
    load = Load(cluster, url)
    load.start()
    try:
        time.sleep(STEADY)
        before = [r for r in cluster.received() if r["node"] == old.name]
        assert before, "the leader fired nothing under load before the %s" % kind

        t_fault = time.time()
        fault(old, others)
        new, t_promoted = promoted(others, 90)

        def first_from_new():
            recs = [r for r in cluster.received() if r["node"] == new.name and r["time"] >= t_fault]
            return min(recs, key=lambda r: r["time"]) if recs else None
        first = wait_until(first_from_new, 60, "the new leader's first callback")

        def old_is_replica():
            members = {m["name"]: m for m in cluster.members()}
            m = members.get(old.name, {})
            return (m.get("role") in ("replica", "sync_standby") and m.get("state") == "running"
                    and old.in_recovery() is True)
        wait_until(old_is_replica, 120, "the old leader to rejoin as a replica\n"
                   + cluster.logs_tail())
        t_rejoined = time.time()
        time.sleep(AFTER)
    finally:
        load.stop()

    leader = cluster.leader() or wait_until(cluster.leader, 30, "a leader")
    assert leader is new, "the leader changed again during the %s" % kind

    # every task scheduled in this scenario ends succeeded on the new leader
    def settled():
        rows = leader.query("SELECT count(*) FILTER (WHERE state <> 'succeeded'), count(*)"
                            "  FROM jobflow.tasks WHERE url = %s", (url,))
        return rows[0][0] == 0 and rows[0][1] > 0
    wait_until(settled, 60, "every task of the %s to succeed" % kind, interval=0.5)
    time.sleep(2.0)     # anything fired late would arrive now

    tasks = dict(leader.query("SELECT id, attempts FROM jobflow.tasks WHERE url = %s", (url,)))
    log = {(t, a): o for t, a, o in leader.query(
        "SELECT l.task_id, l.attempt, l.outcome FROM jobflow.task_log l"
        "  JOIN jobflow.tasks t ON t.id = l.task_id WHERE t.url = %s", (url,))}
    recs = [r for r in cluster.received() if r["id"] in tasks]
    received = collections.defaultdict(list)
    for r in recs:
        received[r["id"]].append(r)

    lost_commits = sorted(set(load.acked) - set(tasks))
    undelivered = sorted(set(tasks) - set(received))
    causes, examples = classify_duplicates(received, log)
    by_node = collections.Counter(r["node"] for r in recs)
    old_after_fault = [r for r in recs if r["node"] == old.name and r["time"] >= t_fault]
    old_as_replica = [r for r in cluster.received()
                      if r["node"] == old.name and r["time"] >= t_rejoined]
    never_leader = [n for n in others if n is not new]
    from_never_leader = [r for r in recs if r["node"] in {n.name for n in never_leader}]
    unknown = [r for r in recs if r["node"].startswith("?")]
    interrupted_logged = sum(1 for o in log.values() if o == "interrupted")
    due = {t: d for t, (d, _) in load.acked.items()}
    steady = sorted(r["time"] - due[r["id"]] for r in recs
                    if r["id"] in due and due[r["id"]] < t_fault - 1)

    print("\n%s: %s -> %s" % (kind, old.name, new.name))
    print("  tasks committed: %d (acknowledged to the client: %d; batches of unknown fate: %d)"
          % (len(tasks), len(load.acked), len(load.errors)))
    print("  tasks delivered: %d of %d; deliveries: %d, by node %s"
          % (len(tasks) - len(undelivered), len(tasks), len(recs), dict(by_node)))
    print("  fault -> promotion: %.2f s; fault -> first callback by the new leader: %.2f s;"
          " promotion -> first callback: %.2f s"
          % (t_promoted - t_fault, first["time"] - t_fault, first["time"] - t_promoted))
    print("  fault -> old leader a replica again: %.1f s" % (t_rejoined - t_fault))
    print("  callbacks by the old leader after the fault: %d (last %.2f s after it);"
          " after it rejoined: %d"
          % (len(old_after_fault),
             max((r["time"] - t_fault for r in old_after_fault), default=0.0),
             len(old_as_replica)))
    print("  duplicates by cause: %s; attempts logged as interrupted: %d"
          % (dict(causes) or "none", interrupted_logged))
    if steady:
        print("  steady load, due -> delivered: median %.0f ms, p99 %.0f ms"
              % (1000 * steady[len(steady) // 2], 1000 * steady[int(len(steady) * 0.99)]))
    if load.errors:
        print("  client errors: first %.2f s, last %.2f s after the fault: %s"
              % (load.errors[0][0] - t_fault, load.errors[-1][0] - t_fault, load.errors[0][1]))

    assert not lost_commits, "%d acknowledged tasks are missing on the new leader: %s" % (
        len(lost_commits), lost_commits[:10])
    assert not undelivered, "%d tasks never delivered: %s" % (len(undelivered), undelivered[:10])
    bad = {c: n for c, n in causes.items() if c not in ACCEPTED}
    assert not bad, "duplicates not explained by a logged attempt: %s; e.g. %s" % (
        bad, {c: examples[c][:3] for c in bad})
    for t, recs_t in received.items():
        assert max(r["attempt"] for r in recs_t) <= tasks[t], \
            "task %d delivered with an attempt its row does not count" % t
    assert not old_as_replica, "the old leader fired %d callbacks as a replica: %s" % (
        len(old_as_replica), old_as_replica[:5])
    assert not from_never_leader, "a node that was never leader fired: %s" % from_never_leader[:5]
    assert not unknown, "callbacks from no known node: %s" % unknown[:5]
    for node in cluster.nodes:
        if node is not leader:
            assert node.in_recovery() is True
            assert not jobflow_processes(node), \
                "replica %s runs jobflow: %s" % (node.name, jobflow_processes(node))
    assert jobflow_processes(leader), "the new leader runs no jobflow process"


def test_switchover_under_load(cluster):
    """A planned switchover (Patroni's REST API) to the sync standby."""
    def switchover(old, others):
        candidate = next(n for n in others if n is cluster.sync_standby())
        status, body = http_json(old.api + "/switchover", "POST",
                                 {"leader": old.name, "candidate": candidate.name}, timeout=60)
        assert status == 200, body
    run_scenario(cluster, "switchover", switchover)


def test_leader_crash_under_load(cluster):
    """kill -9 of the leader's postmaster; Patroni fails over
    (primary_start_timeout: 0) and rejoins the old leader with pg_rewind."""
    def crash(old, others):
        pid = old.postmaster_pid()
        assert pid
        os.kill(pid, signal.SIGKILL)
    run_scenario(cluster, "crash", crash)
