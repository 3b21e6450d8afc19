# -------------------------------------------------------------------------
#
# isolation.py
#     The isolation phase of bench/dispatcher.py (BENCH_PHASES=isolation,
#     or bench/isolation.sh): a victim role sends a steady 50 callbacks/s to
#     nginx while another role (or the victim itself) brings slow hosts, a
#     huge due set, an overdue backlog or locks; the victim's lateness at
#     the receiver is printed per scenario next to the same run's baseline.
#
# Slow hosts are black holes: sockets on 127.0.0.1 that listen and never
# accept, so requests there wait for their timeout (60 s).
#
# -------------------------------------------------------------------------

import os
import socket
import threading
import time

RATE = 50
MODES = ["ACCESS EXCLUSIVE", "EXCLUSIVE", "SHARE ROW EXCLUSIVE", "SHARE",
         "SHARE UPDATE EXCLUSIVE", "ROW EXCLUSIVE", "ROW SHARE", "ACCESS SHARE"]


def black_holes(n):
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        s.listen(4096)
        socks.append(s)
    return socks


def run_isolation(b, seconds):
    """b: the dispatcher module (connect, q, q1, access, lateness_row, ...)."""
    for r in ("jf_bench_tenant", "jf_bench_victim"):
        b.q("DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '%s')"
            " THEN CREATE ROLE %s; END IF; END$$" % (r, r))
        b.q("GRANT jobflow_user TO %s" % r)

    def flood(role, urls, per, timeout_ms=60000, due="now()"):
        conn = b.connect()
        cur = conn.cursor()
        cur.execute("SET ROLE %s" % role)
        cur.execute("INSERT INTO jobflow.tasks (url, run_at, timeout_ms, max_attempts)"
                    " SELECT u, " + due + ", %s, 1 FROM unnest(%s::text[]) u,"
                    " generate_series(1, %s)", (timeout_ms, urls, per))
        conn.close()

    def victim(tag):
        n = RATE * seconds
        step = 1000 // RATE
        conn = b.connect()
        cur = conn.cursor()
        cur.execute("SET ROLE jf_bench_victim")
        base = b.now_ms() + 2000
        cur.execute("INSERT INTO jobflow.tasks (url, run_at)"
                    " SELECT " + b.url_sql(tag, "%(base)s + i * %(step)s") + ","
                    "        pg_catalog.to_timestamp((%(base)s + i * %(step)s) / 1000.0)"
                    "   FROM generate_series(0, %(n)s - 1) i", {"base": base, "step": step, "n": n})
        conn.close()
        time.sleep(max(0, (base + n * step - b.now_ms()) / 1000.0) + 1.0)
        return n, b.access.wait(tag, n, 15)

    def holes_scenario(count, per, role):
        def setup():
            socks = black_holes(count)
            flood(role, ["http://127.0.0.1:%d/slow" % s.getsockname()[1] for s in socks], per)
            time.sleep(1.0)
            return socks
        return setup

    def backlog():
        flood("jf_bench_tenant", ["http://localhost:%d/backlog" % b.PORT], 200000,
              timeout_ms=30000, due="now() - interval '1 hour'")
        return []

    def locks():
        conn = b.connect()
        conn.autocommit = False
        cur = conn.cursor()
        cur.execute("SET ROLE jf_bench_tenant")
        cur.execute("SELECT jobflow.schedule('http://127.0.0.1:%d/x', run_at => now() + interval '1 day')"
                    % b.PORT)
        rels = [r[0] for r in b.q("SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c"
                                  " JOIN pg_namespace n ON n.oid = c.relnamespace"
                                  " WHERE n.nspname = 'jobflow' AND c.relkind IN ('r', 'p', 'v')")]
        held = []
        for rel in rels:
            for mode in MODES:
                cur.execute("SAVEPOINT s")
                try:
                    cur.execute("LOCK TABLE %s IN %s MODE" % (rel, mode))
                    held.append("%s %s" % (rel.split(".")[1], mode.lower()))
                    cur.execute("RELEASE SAVEPOINT s")
                    break
                except Exception:
                    cur.execute("ROLLBACK TO SAVEPOINT s")
        cur.execute("SELECT id FROM jobflow.tasks FOR UPDATE")
        b.progress("tenant holds: %s" % ", ".join(held))
        return [conn]

    def row_locks():
        """A tenant's UPDATE of its own tasks that met them while pending
        and waited (behind a lock on its first task) while they were
        claimed keeps a lock on each once running; their requests (to
        black holes, 3 s timeout) end within the victim's run."""
        socks = black_holes(1)
        url = "http://127.0.0.1:%d/slow" % socks[0].getsockname()[1]
        conn = b.connect()
        cur = conn.cursor()
        cur.execute("SET ROLE jf_bench_tenant")
        cur.execute("SELECT jobflow.schedule(%s, run_at => now() + interval '1 s')", (url,))
        first = cur.fetchone()[0]
        cur.execute("SELECT jobflow.schedule(%s, run_at => now() + interval '2 s', timeout_ms => 3000,"
                    "                        max_attempts => 1) FROM generate_series(1, 50)", (url,))
        ids = [r[0] for r in cur.fetchall()]
        conn.close()
        blocker = b.connect()
        blocker.autocommit = False
        blocker.cursor().execute("SET ROLE jf_bench_tenant; SELECT id FROM jobflow.tasks"
                                 " WHERE id = %s FOR UPDATE", (first,))
        updater = b.connect()
        updater.autocommit = False
        ucur = updater.cursor()
        ucur.execute("SET ROLE jf_bench_tenant")
        thread = threading.Thread(target=ucur.execute, args=(
            "UPDATE jobflow.tasks SET run_at = run_at WHERE id = ANY(%s)", ([first] + ids,)))
        thread.start()
        deadline = time.time() + 15
        while time.time() < deadline and b.q1(
                "SELECT count(*) FROM jobflow.tasks WHERE id = ANY(%s) AND state = 'running'",
                (ids,))[0] < len(ids):
            time.sleep(0.05)
        blocker.commit()
        blocker.close()
        thread.join(15)
        b.progress("tenant's UPDATE holds locks on %d running tasks" % b.q1(
            "SELECT count(*) FROM jobflow.tasks t WHERE t.id = ANY(%s) AND NOT EXISTS"
            " (SELECT FROM jobflow.tasks x WHERE x.id = t.id FOR UPDATE SKIP LOCKED)", (ids,))[0])
        return socks + [updater]

    scenarios = [
        ("baseline", None),
        ("a: 10 slow ports, other tenant", holes_scenario(10, 100, "jf_bench_tenant")),
        ("b: 10 slow ports, same tenant", holes_scenario(10, 100, "jf_bench_victim")),
        ("c: 1 slow host, 20,000 due", holes_scenario(1, 20000, "jf_bench_tenant")),
        ("d: 200,000 overdue, one host", backlog),
        ("e: tenant locks every relation", locks),
        ("f: tenant's row locks, running tasks", row_locks),
    ]
    # BENCH_ISO_ONLY=c,d: the baseline and those scenarios only
    only = [x for x in os.environ.get("BENCH_ISO_ONLY", "").split(",") if x]
    if only:
        scenarios = [s for s in scenarios if s[1] is None or s[0].split(":")[0] in only]
    # the cluster was just made: the kernel is still writing initdb's and
    # CREATE DATABASE's files back, and every fsync (each claim commits
    # durably) waits 25-200 ms behind that; the baseline would measure it
    b.q("CHECKPOINT")
    os.sync()
    rows = []
    for i, (name, setup) in enumerate(scenarios):
        b.progress("isolation %s: victim %d/s for %d s" % (name, RATE, seconds))
        held = setup() if setup else []
        st = b.status()
        n, entries = victim("iso%d" % i)
        rows.append(b.lateness_row(name, n, entries, [st["in_flight"], st["queued"]]))
        for h in held:
            if isinstance(h, socket.socket):
                h.close()
            else:
                h.rollback()
                h.close()
        b.q("UPDATE jobflow.tasks SET state = 'cancelled' WHERE state = 'pending'"
            " AND owner::text IN ('jf_bench_tenant', 'jf_bench_victim')")
        time.sleep(2.0)
    b.table("6. Isolation: the victim's lateness at the receiver (ms), %d/s for %d s" % (RATE, seconds),
            ["scenario", "tasks", "arrived", "distinct", "p50", "p90", "p99", "max",
             "early", "conns", "in flight", "queued"], rows,
            ["in flight / queued: worker_status() when the victim's run started"
             " (queued counts due tasks parked per host)",
             "the same run's baseline is the first row"])
