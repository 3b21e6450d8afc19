#!/usr/bin/python3
# -------------------------------------------------------------------------
#
# pgnet.py
#     Run by bench/pgnet.sh: the same application workload through pg_net
#     (database "pgnet") and through jobflow_net (database "jobflow"), in
#     one server, in rounds that alternate the order (pg_net jobflow_net,
#     then jobflow_net pg_net, ...), each run after a VACUUM ANALYZE and a
#     CHECKPOINT:
#       W1  100 calls/s for 20 s of SELECT net.http_post(url, body), each
#           its own transaction (autocommit); lateness = nginx's arrival
#           (ms) - the call's commit as the client saw it return
#       W2  20,000 rows inserted by one INSERT ... SELECT into a table whose
#           trigger calls net.http_post (a Supabase database webhook's
#           shape and payload); callbacks/s from first to last arrival,
#           first and last arrival and the time until every request has
#           its row in net._http_response (polled every 100 ms), counted
#           from the INSERT's commit; requests lost (never arrived), and
#           responses that are errors
#     and, last (PGNET_CRASH=1), a crash per interface: PGNET_CRASH_TASKS
#     orders by one INSERT, the postmaster killed with SIGKILL 200 ms after
#     its commit, the server restarted, and the arrivals counted.
#     Prints each run, then the medians side by side and jobflow_net /
#     pg_net.  The callback URL carries the request's sequence number in
#     the run (".../cb/<run>?due=<seq>"), so nginx's log tells each request
#     apart in both.
#
#     Uses bench/dispatcher.py's helpers.  PGNET_ROUNDS (default 3),
#     PGNET_W2_TASKS (20000), PGNET_CRASH (1), PGNET_CRASH_TASKS (PGNET_W2_TASKS).
#
# -------------------------------------------------------------------------

import os
import signal
import subprocess
import sys
import time

import psycopg2

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dispatcher as b          # noqa: E402  (connects, reads the environment)
import indexes as ix            # noqa: E402
from schemes import median      # noqa: E402

ROUNDS = int(os.environ.get("PGNET_ROUNDS", "3"))
W2_TASKS = int(os.environ.get("PGNET_W2_TASKS", "20000"))
CRASH = os.environ.get("PGNET_CRASH", "1") not in ("", "0")
CRASH_TASKS = int(os.environ.get("PGNET_CRASH_TASKS", str(W2_TASKS)))
SIDES = ["pg_net", "jobflow_net"]
DBNAME = {"pg_net": "pgnet", "jobflow_net": "jobflow"}
PGDATA = os.environ["JOBFLOW_PGDATA"]
PGBIN = os.environ["JOBFLOW_PGBIN"]
RUN_USER = os.environ.get("JOBFLOW_RUN_USER", "")

# The application, the same text in both databases: a Supabase database
# webhook (AFTER INSERT ... FOR EACH ROW, the payload Supabase sends), which
# keeps each request's id beside the row it was made for.
APP = """
CREATE TABLE app_config (base text NOT NULL);
CREATE TABLE orders (
    id bigserial PRIMARY KEY,
    run text NOT NULL,
    seq int NOT NULL,
    item text NOT NULL DEFAULT 'apple'
);
CREATE TABLE order_hooks (order_id bigint PRIMARY KEY, request_id bigint NOT NULL);
CREATE FUNCTION orders_webhook() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO order_hooks
    SELECT NEW.id, net.http_post(
        url := (SELECT base FROM app_config) || '/cb/' || NEW.run || '?due=' || NEW.seq,
        body := jsonb_build_object('type', TG_OP, 'table', TG_TABLE_NAME,
                                   'schema', TG_TABLE_SCHEMA, 'record', to_jsonb(NEW),
                                   'old_record', NULL),
        headers := '{"Content-Type": "application/json"}'::jsonb,
        timeout_milliseconds := 5000);
    RETURN NEW;
END $$;
CREATE TRIGGER orders_webhook AFTER INSERT ON orders
    FOR EACH ROW EXECUTE FUNCTION orders_webhook();
"""


def connect(side):
    conn = psycopg2.connect(dbname=DBNAME[side])
    conn.autocommit = True
    return conn


class Db:
    """A connection per side, reopened after the crash."""

    def __init__(self):
        self.conns = {}

    def conn(self, side):
        c = self.conns.get(side)
        if c is None or c.closed:
            c = self.conns[side] = connect(side)
        return c

    def q(self, side, sql, args=None):
        with self.conn(side).cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall() if cur.description else None

    def q1(self, side, sql, args=None):
        rows = self.q(side, sql, args)
        return rows[0] if rows else None

    def close(self):
        for c in self.conns.values():
            try:
                c.close()
            except psycopg2.Error:
                pass
        self.conns = {}


db = Db()


def setup():
    for side in SIDES:
        db.q(side, APP)
        db.q(side, "INSERT INTO app_config VALUES (%s)", (b.base_url(),))


def prepare(side):
    """The same starting point for every run: dead rows vacuumed, a
    checkpoint (pg_net's tables, or jobflow's, and the application's)."""
    tables = (["net.http_request_queue", "net._http_response"] if side == "pg_net"
              else ["jobflow.tasks", "jobflow.task_log"]) + ["orders", "order_hooks"]
    for t in tables:
        db.q(side, "VACUUM ANALYZE " + t)
    db.q(side, "CHECKPOINT")


def responses(side, lo, hi):
    """Rows of net._http_response for request ids lo..hi: all, errors."""
    return db.q1(side, "SELECT count(*), count(*) FILTER (WHERE error_msg IS NOT NULL OR timed_out)"
                       "  FROM net._http_response WHERE id BETWEEN %s AND %s", (lo, hi))


def distinct(entries):
    return len({e[1] for e in entries})


def settle(tag, n, timeout):
    """The arrivals of run tag once n distinct ones are there, or nothing
    new came for 5 s, or timeout."""
    deadline = time.time() + timeout
    last, last_t = -1, time.time()
    while time.time() < deadline:
        e = b.access.entries(tag)
        if distinct(e) >= n:
            return e
        if len(e) != last:
            last, last_t = len(e), time.time()
        elif time.time() - last_t > 5:
            return e
        time.sleep(0.2)
    return b.access.entries(tag)


def w1(side, tag):
    """100 calls/s for 20 s, each SELECT net.http_post() its own transaction."""
    n = b.STEADY_RATE * b.STEADY_SECONDS
    step = 1000 // b.STEADY_RATE
    busy = ix.Busy()
    conn = connect(side)
    cur = conn.cursor()
    base = b.base_url() + "/cb/" + tag + "?due="
    committed = {}
    ids = []
    start = b.now_ms() + 500
    for i in range(n):
        wait = (start + i * step) / 1000.0 - time.time()
        if wait > 0:
            time.sleep(wait)
        cur.execute("SELECT net.http_post(url := %s, body := %s::jsonb)",
                    (base + str(i), '{"seq": %d}' % i))
        ids.append(cur.fetchone()[0])
        committed[i] = b.now_ms()
    conn.close()
    entries = settle(tag, n, 30)
    late = sorted(a - committed[d] for a, d, *_ in entries if d in committed)
    done = wait_responses(side, min(ids), max(ids), n, 30)
    r = {"arrived": distinct(entries), "lost": n - distinct(entries),
         "dup": len(entries) - distinct(entries),
         "p50": b.pct(late, 50), "p90": b.pct(late, 90), "p99": b.pct(late, 99),
         "max": late[-1] if late else None, "early": sum(1 for x in late if x < 0),
         "resp": done[0], "errors": done[1], "load": busy.load}
    r.update(busy.figures())
    return r


def wait_responses(side, lo, hi, n, timeout, t0=None):
    """Poll net._http_response every 100 ms until n rows for lo..hi are
    there or timeout; returns (rows, error rows, ms from t0 when all were
    there or None)."""
    deadline = time.time() + timeout
    while True:
        got, err = responses(side, lo, hi)
        if got >= n:
            return got, err, (b.now_ms() - t0) if t0 is not None else None
        if time.time() > deadline:
            return got, err, None
        time.sleep(0.1)


def settle_responses(side, lo, hi, n):
    """Rows of net._http_response for lo..hi once there are n, or their
    count did not move for 10 s: (rows, error rows)."""
    last, last_t = None, time.time()
    while True:
        got, err = responses(side, lo, hi)
        if got >= n or time.time() - last_t > 10:
            return got, err
        if got != last:
            last, last_t = got, time.time()
        time.sleep(0.2)


def insert_orders(side, tag, n):
    """One INSERT of n orders (the trigger calls net.http_post for each);
    returns (ms it took, commit ms, request id range)."""
    t0 = b.now_ms()
    db.q(side, "INSERT INTO orders (run, seq) SELECT %s, i FROM generate_series(1, %s) i", (tag, n))
    t1 = b.now_ms()
    lo, hi = db.q1(side, "SELECT min(h.request_id), max(h.request_id) FROM order_hooks h"
                         "  JOIN orders o ON o.id = h.order_id WHERE o.run = %s", (tag,))
    return t1 - t0, t1, lo, hi


def w2(side, tag):
    """W2_TASKS orders by one INSERT, each a net.http_post from the trigger."""
    busy = ix.Busy()
    ins_ms, committed, lo, hi = insert_orders(side, tag, W2_TASKS)
    got, err, all_ms = wait_responses(side, lo, hi, W2_TASKS, 600, committed)
    entries = settle(tag, W2_TASKS, 60)
    arrivals = sorted(e[0] for e in entries)
    span = arrivals[-1] - arrivals[0] if arrivals else 0
    r = {"insert_ms": ins_ms, "arrived": distinct(entries), "lost": W2_TASKS - distinct(entries),
         "dup": len(entries) - distinct(entries),
         "rate": round(len(arrivals) / (max(span, 1) / 1000.0)) if arrivals else None,
         "first": arrivals[0] - committed if arrivals else None,
         "last": arrivals[-1] - committed if arrivals else None,
         "all_resp_ms": all_ms, "resp": got, "errors": err, "load": busy.load}
    r.update(busy.figures())
    return r


def as_server_user(cmd):
    if os.getuid() == 0 and RUN_USER:
        cmd = ["runuser", "-u", RUN_USER, "--"] + cmd
    return subprocess.run(cmd, capture_output=True, text=True)


def crash(side):
    """CRASH_TASKS orders by one INSERT, the postmaster killed with SIGKILL
    200 ms after its commit, the server restarted; what arrives."""
    tag = "crash-" + side
    prepare(side)
    _, committed, _, _ = insert_orders(side, tag, CRASH_TASKS)
    time.sleep(0.2)
    with open(os.path.join(PGDATA, "postmaster.pid")) as f:
        pm = int(f.readline())
    children = [int(p) for p in subprocess.run(["pgrep", "-P", str(pm)], capture_output=True,
                                                 text=True).stdout.split()]
    os.kill(pm, signal.SIGKILL)
    t_kill = b.now_ms()
    db.close()
    deadline = time.time() + 30
    while time.time() < deadline and any(os.path.exists("/proc/%d" % p) for p in children + [pm]):
        time.sleep(0.05)
    at_kill = distinct(b.access.entries(tag))
    b.progress("crash %s: SIGKILL %d ms after the commit; %d arrived by then"
               % (side, t_kill - committed, at_kill))
    out = as_server_user([os.path.join(PGBIN, "pg_ctl"), "-D", PGDATA, "-l",
                          b.CLUSTER_LOG, "-w", "-t", "120", "start"])
    if out.returncode != 0:
        sys.exit("restart failed: %s %s" % (out.stdout, out.stderr))
    b.progress("crash %s: server restarted" % side)
    entries = settle(tag, CRASH_TASKS, 120)
    ids = db.q1(side, "SELECT min(h.request_id), max(h.request_id), count(*) FROM order_hooks h"
                      "  JOIN orders o ON o.id = h.order_id WHERE o.run = %s", (tag,))
    got, err = settle_responses(side, ids[0], ids[1], CRASH_TASKS) if ids[2] else (0, 0)
    return [side, CRASH_TASKS, ids[2], at_kill, distinct(entries), distinct(entries) - at_kill,
            CRASH_TASKS - distinct(entries), len(entries) - distinct(entries), got, err]


def main():
    t_start = time.time()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    head = subprocess.run(["git", "-C", repo, "log", "-1", "--format=%h %s"],
                          capture_output=True, text=True).stdout.strip()
    b.progress("jobflow at %s; %s" % (head, b.q1("SELECT version()")[0].split(" on ")[0]))
    b.progress("pg_net %s, jobflow_net %s" % (
        db.q1("pg_net", "SELECT extversion FROM pg_extension WHERE extname = 'pg_net'")[0],
        db.q1("jobflow_net", "SELECT extversion FROM pg_extension WHERE extname = 'jobflow_net'")[0]))
    settings = db.q("pg_net", "SELECT name, setting FROM pg_settings WHERE name IN"
                              " ('pg_net.batch_size', 'pg_net.ttl', 'jobflow.max_concurrent_requests',"
                              "  'jobflow.max_requests_per_host', 'jobflow.net_max_attempts')"
                              " ORDER BY 1")
    b.progress("settings: %s" % ", ".join("%s=%s" % s for s in settings))
    b.wait_for_worker()
    setup()
    b.progress("warm-up: one unmeasured W2 (2,000 calls) each")
    for side in SIDES:
        prepare(side)
        _, committed, lo, hi = insert_orders(side, "warm-" + side, 2000)
        wait_responses(side, lo, hi, 2000, 120)

    runs = []
    for i in range(ROUNDS):
        for side in (SIDES if i % 2 == 0 else SIDES[::-1]):
            for kind, fn in (("w1", w1), ("w2", w2)):
                prepare(side)
                tag = "%s-%s-%d" % (kind, side, i + 1)
                b.progress(tag)
                r = fn(side, tag)
                r.update({"side": side, "round": i + 1, "kind": kind})
                runs.append(r)
                b.progress("  " + ", ".join("%s %s" % (k, v) for k, v in sorted(r.items())
                                            if k not in ("side", "round", "kind")))
                time.sleep(1)

    def mine(kind, side=None):
        return [r for r in runs if r["kind"] == kind and (side is None or r["side"] == side)]

    b.table("P1. W1: %d net.http_post() calls/s for %d s, each its own transaction (ms)"
            % (b.STEADY_RATE, b.STEADY_SECONDS),
            ["interface", "round", "arrived", "lost", "dup", "p50", "p90", "p99", "max", "early",
             "responses", "errors", "load", "busy %", "others %"],
            [[r["side"], r["round"], r["arrived"], r["lost"], r["dup"], r["p50"], r["p90"], r["p99"],
              r["max"], r["early"], r["resp"], r["errors"], r["load"], r["busy"], r["others"]]
             for r in mine("w1")],
            ["lateness = nginx's $msec (arrival, truncated to ms) - the ms the call's autocommit"
             " returned to the client (a little after the commit: early = below 0)",
             "responses, errors: rows in net._http_response for the run's ids, of them with"
             " error_msg set or timed_out"])
    b.table("P2. W2: %d orders by one INSERT, a net.http_post() each from an AFTER INSERT trigger"
            % W2_TASKS,
            ["interface", "round", "insert ms", "arrived", "lost", "dup", "cb/s", "first ms",
             "last ms", "all responses ms", "responses", "errors", "load", "busy %", "others %"],
            [[r["side"], r["round"], r["insert_ms"], r["arrived"], r["lost"], r["dup"], r["rate"],
              r["first"], r["last"], r["all_resp_ms"], r["resp"], r["errors"], r["load"], r["busy"],
              r["others"]] for r in mine("w2")],
            ["insert ms: the INSERT with its trigger, until its commit returned; first, last: arrival"
             " - that commit; all responses: commit -> every request has its row in"
             " net._http_response (polled every 100 ms)",
             "cb/s = arrivals / (last - first)"])

    def med(kind, side, key):
        return median([r[key] for r in mine(kind, side)])

    figures = [("W1 p50 ms", "w1", "p50"), ("W1 p99 ms", "w1", "p99"), ("W1 max ms", "w1", "max"),
               ("W1 lost", "w1", "lost"),
               ("W2 insert ms", "w2", "insert_ms"), ("W2 cb/s", "w2", "rate"),
               ("W2 last arrival ms", "w2", "last"), ("W2 all responses ms", "w2", "all_resp_ms"),
               ("W2 lost", "w2", "lost"), ("W2 error responses", "w2", "errors")]
    rows = []
    for name, kind, key in figures:
        m = {s: med(kind, s, key) for s in SIDES}
        rows.append([name] + [m[s] for s in SIDES] + [ix.ratio(m["jobflow_net"], m["pg_net"])])
    b.table("P. pg_net vs jobflow_net: medians of %d rounds" % ROUNDS,
            ["figure"] + SIDES + ["jobflow_net / pg_net"], rows,
            ["pg_net: %s" % ", ".join("%s=%s" % s for s in settings if s[0].startswith("pg_net")),
             "jobflow: %s" % ", ".join("%s=%s" % s for s in settings if s[0].startswith("jobflow")),
             "rounds alternate the order; VACUUM ANALYZE and CHECKPOINT before each run"])

    if CRASH:
        b.db.close()        # dispatcher's connection: not used after this
        crashes = [crash(side) for side in SIDES]
        b.table("P3. Crash: %d orders by one INSERT, the postmaster killed (SIGKILL) 200 ms after"
                " its commit, the server restarted; once per interface" % CRASH_TASKS,
                ["interface", "committed", "request ids", "arrived before kill", "arrived in all",
                 "after restart", "lost", "dup", "responses", "errors"], crashes,
                ["arrived: distinct requests at nginx; lost = committed - arrived in all;"
                 " dup: requests that arrived twice (an attempt cut short by the crash is sent again)",
                 "responses: rows in net._http_response once all are there or their count stayed"
                 " the same for 10 s"])

    busy = [r["busy"] for r in runs]
    loads = [r["load"] for r in runs]
    print("\nmachine during the runs: busy %d..%d%% (median %s), 1-min load %.2f..%.2f"
          % (min(busy), max(busy), median(busy), min(loads), max(loads)))
    print("\n%.0f s in all" % (time.time() - t_start))


if __name__ == "__main__":
    main()
