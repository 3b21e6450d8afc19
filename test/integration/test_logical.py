# -------------------------------------------------------------------------
#
# test_logical.py
#     Logical replication and blue/green moves: a database that receives
#     jobflow's tables by logical replication fires nothing and writes
#     nothing of its own until it is the primary (jobflow.dispatch = auto);
#     a database moved to another cluster as docs/operations.md says fires
#     every task exactly once; jobflow.dispatch = off holds a primary.
#
# The tests build their own two clusters next to the suite's (servers of
# test/pgnode.py, as test_failover.py's): "blue" publishes (wal_level =
# logical), "green" subscribes.  Each test uses databases of its own on
# them.
#
# -------------------------------------------------------------------------

import os
import threading
import time
from urllib.parse import parse_qs

import psycopg2
import pytest

import pgnode
from pgnode import wait_until

BASE_PORT = int(os.environ.get("PGPORT", "54329")) + 20

# the tables docs/operations.md publishes for a move (all but outcome_key)
MOVED = ("jobflow.tasks, jobflow.task_log, jobflow.cron_timers, jobflow.queues,"
         " jobflow.secrets, jobflow.signing_secrets, jobflow.client_certificates,"
         " jobflow.installation")


class Node(pgnode.Node):
    """One cluster of the pair (test/pgnode.py's Node) whose tests each use
    databases of their own: sql() and one() name the database first."""

    def init(self, extra):
        """initdb, configure (a reconcile every second, and extra) and start."""
        self.initdb()
        self.configure(["jobflow.reconcile_interval = '1s'"] + extra)
        self.start()

    def sql(self, dbname, text, args=None):
        """Every row of text run in dbname (None without rows)."""
        return self.query(text, args, dbname)

    def one(self, dbname, text, args=None):
        """The first column of the first row of text run in dbname."""
        return self.value(text, args, dbname)

    def database(self, name):
        """A new database with jobflow, and the role app (jobflow_user)."""
        self.sql("postgres", "CREATE DATABASE %s" % name)
        self.sql(name, "CREATE EXTENSION jobflow")
        self.sql(name, "GRANT jobflow_user TO app")

    def drop(self, name):
        """Drop a test's database, and its subscriptions first."""
        try:
            for (sub,) in self.sql(name, "SELECT subname FROM pg_subscription"
                                         " WHERE subdbid = (SELECT oid FROM pg_database"
                                         "                   WHERE datname = current_database())"):
                self.sql(name, "DROP SUBSCRIPTION %s" % sub)
        except psycopg2.Error:
            pass
        self.sql("postgres", "DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)

    def set_dispatch(self, value):
        """ALTER SYSTEM SET jobflow.dispatch (RESET for None), reloaded."""
        if value is None:
            self.sql("postgres", "ALTER SYSTEM RESET jobflow.dispatch")
        else:
            self.sql("postgres", "ALTER SYSTEM SET jobflow.dispatch = %s" % value)
        self.sql("postgres", "SELECT pg_reload_conf()")


@pytest.fixture(scope="module")
def clusters():
    with pgnode.scratch_dir("jobflow-logical-") as top:
        blue = Node(top, "blue", BASE_PORT)
        green = Node(top, "green", BASE_PORT + 1)
        try:
            blue.init(["wal_level = logical"])
            green.init([])
            # the same role names, other oids: green makes roles blue has not
            green.sql("postgres", "CREATE ROLE filler1; CREATE ROLE filler2")
            for node in (blue, green):
                node.sql("postgres", "CREATE ROLE app LOGIN")
            yield blue, green
        finally:
            for node in (green, blue):
                node.stop_quietly()


def as_app(node, db, sql, args=None):
    """sql's first row, run in db as the role app, on a connection of its own."""
    conn = node.connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute("SET ROLE app")
            cur.execute(sql, args)
            return cur.fetchone()
    finally:
        conn.close()


def schedule_as_app(node, db, url, seconds):
    """(id, due time in Unix seconds) of a new task of app's, due in seconds."""
    return as_app(node, db, "SELECT jobflow.schedule(%s, run_at => now() + %s * interval '1 second'),"
                            " extract(epoch FROM now() + %s * interval '1 second')::float8",
                  (url, seconds, seconds))


def held(node, db):
    return node.one(db, "SELECT held FROM jobflow.worker_status()")


def held_metric(node, db):
    return node.one(db, "SELECT labels FROM jobflow.stats"
                    " WHERE metric = 'worker_held' AND value = 1")


def task_rows(node, db):
    return node.sql(db, "SELECT id, state::text, attempts, updated_at, cron_id"
                        "  FROM jobflow.tasks ORDER BY id")


def subscribe(green, db, blue, publication):
    green.sql(db, "CREATE SUBSCRIPTION %s_sub CONNECTION '%s' PUBLICATION %s"
              % (db, blue.conninfo(db), publication))
    wait_until(lambda: green.one(db, "SELECT count(*) = 0 FROM pg_subscription_rel"
                                     " WHERE srsubstate <> 'r'"), 30, "the initial copy")


# -------------------------------------------------------------------------
# 1. A subscriber fires nothing, writes nothing, until it is the primary
# -------------------------------------------------------------------------

@pytest.mark.smoke
def test_subscriber_holds_until_the_subscription_is_dropped(clusters, receiver):
    blue, green = clusters
    db = "logical_hold"
    for node in (blue, green):
        node.database(db)
    url, tag = receiver.unique_url("/ok")
    # blue sends nothing (every request the receiver gets is green's), and
    # has tasks falling due and a timer of every second
    blue.set_dispatch("off")
    try:
        wait_until(lambda: held(blue, db) == "dispatch off", 10, "blue to hold")
        due = dict(schedule_as_app(blue, db, url, 1.0 + i * 0.2) for i in range(5))
        cron_url, cron_tag = receiver.unique_url("/ok")
        blue.sql(db, "SET ROLE app; SELECT jobflow.schedule_cron('every-second', '* * * * * *', %s)",
                 (cron_url,))
        if blue.one(db, "SELECT current_setting('server_version_num')::int") >= 150000:
            blue.sql(db, "CREATE PUBLICATION p_hold FOR TABLES IN SCHEMA jobflow")
        else:
            blue.sql(db, "CREATE PUBLICATION p_hold FOR ALL TABLES")
        subscribe(green, db, blue, "p_hold")
        # the sequences are not replicated: set them ahead, so that only the
        # subscription holds green's worker (not the check of its sequences)
        green.sql(db, "SELECT setval('jobflow.tasks_id_seq', 1000000),"
                      "       setval('jobflow.cron_timers_id_seq', 1000000)")
        assert green.one(db, "SELECT count(*) FROM jobflow.tasks") == len(due)
        before = task_rows(green, db)
        # well past the tasks' due times and several reconcile intervals
        time.sleep(max(0, max(due.values()) - time.time()) + 3.5)
        assert receiver.tagged(tag) == [] and receiver.tagged(cron_tag) == [], \
            "the subscriber fired"
        assert task_rows(green, db) == before, "the subscriber wrote to jobflow.tasks"
        assert task_rows(green, db) == task_rows(blue, db)
        assert green.one(db, "SELECT count(*) FROM jobflow.tasks WHERE cron_id IS NOT NULL") == 0, \
            "the subscriber materialised cron occurrences"
        # and says why
        assert held(green, db) == "subscription"
        assert held_metric(green, db) == 'reason="subscription"'

        # the subscription dropped, green is the primary: every task fires once
        dropped = time.time()
        green.sql(db, "DROP SUBSCRIPTION %s_sub" % db)
        got = receiver.wait_for(lambda r: ("t=" + tag) in r["query"], n=len(due), timeout=15)
        released = min(r["time"] for r in got) - dropped
        print("green fired %.2f s after DROP SUBSCRIPTION" % released)
        ids = sorted(int(r["headers"]["x-jobflow-task-id"]) for r in got)
        assert ids == sorted(due), "not every task exactly once: %s" % ids
        for r in got:
            assert r["time"] >= due[int(r["headers"]["x-jobflow-task-id"])]
        receiver.wait_for(lambda r: ("t=" + cron_tag) in r["query"], n=2, timeout=10)
        assert held(green, db) is None
    finally:
        green.drop(db)
        blue.drop(db)
        blue.set_dispatch(None)


# -------------------------------------------------------------------------
# 2. A blue/green move as docs/operations.md describes it
# -------------------------------------------------------------------------

class Load:
    """Schedules a task every 50 ms, due 0.3 to 1.5 s later, on the database
    it points at; each URL carries a number that tells the task apart
    across both clusters.  Pausing holds the calls (as an application
    waiting for the switch); due times stay what they were meant to be."""

    def __init__(self, url):
        self.url = url
        self.target = None
        self.n = 0
        self.due = {}
        self.paused = threading.Event()
        self.idle = threading.Event()
        self.stop = threading.Event()
        self.errors = []
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            if self.paused.is_set():
                self.idle.set()
                time.sleep(0.01)
                continue
            self.idle.clear()
            node, db = self.target
            self.n += 1
            n = self.n
            due = time.time() + 0.3 + (n % 7) * 0.2
            try:
                as_app(node, db, "SELECT jobflow.schedule(%s, run_at => to_timestamp(%s))",
                       ("%s&n=%d" % (self.url, n), due))
                self.due[n] = due
            except Exception as e:      # noqa: BLE001 - reported by the test
                self.errors.append(repr(e))
            time.sleep(0.05)

    def pause(self):
        self.paused.set()
        self.idle.clear()
        wait_until(self.idle.is_set, 10, "the load to pause")


def test_blue_green_move_fires_every_task_exactly_once(clusters, receiver):
    blue, green = clusters
    db = "logical_move"
    for node in (blue, green):
        node.database(db)
    url, tag = receiver.unique_url("/ok")
    load = Load(url)
    load.target = (blue, db)
    load.thread.start()
    try:
        # a timer too: its occurrences fire once, on one side or the other
        cron_url, cron_tag = receiver.unique_url("/ok")
        blue.sql(db, "SET ROLE app; SELECT jobflow.schedule_cron('tick', '* * * * * *', %s)",
                 (cron_url,))

        # before: publication on blue, subscription on green (which holds)
        blue.sql(db, "CREATE PUBLICATION jobflow_move FOR TABLE " + MOVED)
        subscribe(green, db, blue, "jobflow_move")
        assert held(green, db) == "subscription"
        # green's sequences, well ahead of blue's already (only the
        # subscription holds green's worker from here on)
        green.sql(db, "SELECT setval('jobflow.tasks_id_seq', %s + 1000000),"
                      "       setval('jobflow.cron_timers_id_seq', %s + 1000000)",
                  blue.sql(db, "SELECT (SELECT last_value FROM jobflow.tasks_id_seq),"
                               "       (SELECT last_value FROM jobflow.cron_timers_id_seq)")[0])
        time.sleep(3)

        # cutover
        t0 = time.time()
        blue.set_dispatch("off")
        load.pause()                    # the application's writes wait
        wait_until(lambda: blue.one(
            db, "SELECT w.held = 'dispatch off' AND w.in_flight + w.queued + w.buffered_rows = 0"
                "   AND NOT EXISTS (SELECT 1 FROM jobflow.tasks WHERE state = 'running')"
                "  FROM jobflow.worker_status() w"), 20, "blue's in-flight requests")
        lsn = blue.one(db, "SELECT pg_current_wal_lsn()::text")
        wait_until(lambda: blue.one(
            db, "SELECT confirmed_flush_lsn >= %s::pg_lsn FROM pg_replication_slots"
                " WHERE slot_name = %s", (lsn, "%s_sub" % db)), 20, "green to catch up")
        # green's sequences are ahead of blue's
        seqs = blue.sql(db, "SELECT (SELECT last_value FROM jobflow.tasks_id_seq),"
                            "       (SELECT last_value FROM jobflow.cron_timers_id_seq)")[0]
        assert green.one(db, "SELECT (SELECT last_value FROM jobflow.tasks_id_seq) > %s"
                             "   AND (SELECT last_value FROM jobflow.cron_timers_id_seq) > %s",
                         seqs)
        assert task_rows(green, db) == task_rows(blue, db), "green has not caught up"
        green.sql(db, "DROP SUBSCRIPTION %s_sub" % db)
        load.target = (green, db)
        load.paused.clear()
        print("cutover: %.2f s of paused writes" % (time.time() - t0))
        wait_until(lambda: held(green, db) is None, 10, "green to release")

        time.sleep(2)
        load.stop.set()
        load.thread.join(10)
        assert not load.errors, load.errors[:3]
        # every task scheduled on either side fires once, none early
        wait_until(lambda: len(receiver.tagged(tag)) >= len(load.due), 15, "every task")
        time.sleep(1)
        got = receiver.tagged(tag)
        seen = {}
        for r in got:
            n = int(parse_qs(r["query"])["n"][0])
            seen.setdefault(n, []).append(r)
        assert sorted(seen) == sorted(load.due), "lost: %s" % (set(load.due) - set(seen))
        twice = {n: len(rs) for n, rs in seen.items() if len(rs) > 1}
        assert not twice, "fired twice: %s" % twice
        early = [n for n, rs in seen.items() if rs[0]["time"] < load.due[n] - 0.01]
        assert not early, "fired early: %s" % early
        by_side = green.one(db, "SELECT count(*) FROM jobflow.tasks t WHERE t.id > %s"
                                " AND t.url LIKE %s", (seqs[0], "%" + tag + "%"))
        print("move: %d tasks, %d of them scheduled on green" % (len(load.due), by_side))
        assert by_side > 0
        # the timer: no occurrence twice, none missing between the first and last
        ticks = {}
        for r in receiver.tagged(cron_tag):
            ticks.setdefault(r["headers"]["x-jobflow-task-id"], []).append(r)
        assert all(len(v) == 1 for v in ticks.values()), "an occurrence fired twice"
        at = green.sql(db, "SELECT extract(epoch FROM cron_at)::bigint FROM jobflow.tasks"
                           " WHERE id = ANY(%s::bigint[]) ORDER BY 1",
                       ([int(i) for i in ticks],))
        at = [a for (a,) in at]
        assert len(at) == len(set(at)) and at == list(range(at[0], at[0] + len(at))), \
            "cron occurrences missing or twice: %s" % at
        # the blue side stays off for a rollback and wrote nothing since
        assert held(blue, db) == "dispatch off"
    finally:
        load.stop.set()
        load.thread.join(10)
        green.drop(db)
        blue.drop(db)
        blue.set_dispatch(None)


# -------------------------------------------------------------------------
# 3. jobflow.dispatch = off on a plain primary
# -------------------------------------------------------------------------

def test_off_holds_a_primary_and_auto_releases_it(clusters, receiver):
    blue, _ = clusters
    db = "logical_off"
    blue.database(db)
    slow_url, slow_tag = receiver.unique_url("/delay/1500")
    url, tag = receiver.unique_url("/ok")
    try:
        # in flight when dispatch goes off: finishes, and is recorded
        slow, _ = schedule_as_app(blue, db, slow_url, 0)
        receiver.wait_for(lambda r: ("t=" + slow_tag) in r["query"], timeout=10)
        blue.set_dispatch("off")
        wait_until(lambda: held(blue, db) == "dispatch off", 10, "the switch")
        assert held_metric(blue, db) == 'reason="dispatch off"'
        wait_until(lambda: blue.one(db, "SELECT state::text FROM jobflow.tasks WHERE id = %s",
                                    (slow,)) == "succeeded", 10, "the request in flight")
        task, due = schedule_as_app(blue, db, url, 0.5)
        blue.sql(db, "SET ROLE app; SELECT jobflow.schedule_cron('off-tick', '* * * * * *', %s)",
                 (url,))
        time.sleep(3)
        assert receiver.tagged(tag) == []
        assert blue.one(db, "SELECT state::text FROM jobflow.tasks WHERE id = %s", (task,)) == "pending"
        assert blue.one(db, "SELECT count(*) FROM jobflow.tasks WHERE cron_id IS NOT NULL") == 0, \
            "cron occurrences were materialised while dispatch was off"
        # no tenant flips it back: neither SET, nor ALTER SYSTEM, nor per role
        for sql in ("SET jobflow.dispatch = on", "ALTER SYSTEM SET jobflow.dispatch = on",
                    "ALTER ROLE app SET jobflow.dispatch = on",
                    "ALTER DATABASE %s SET jobflow.dispatch = on" % db):
            with pytest.raises(psycopg2.Error):
                blue.sql(db, "SET ROLE app; " + sql)
        assert held(blue, db) == "dispatch off"
        blue.set_dispatch("auto")
        got = receiver.wait_for(lambda r: ("t=" + tag) in r["query"]
                                and r["headers"]["x-jobflow-task-id"] == str(task), timeout=10)
        assert len(got) == 1 and got[0]["time"] >= due
        assert held(blue, db) is None
    finally:
        blue.drop(db)
        blue.set_dispatch(None)


# -------------------------------------------------------------------------
# 4. A tenant's own subscription holds nobody (PostgreSQL 16 and later)
# -------------------------------------------------------------------------

def test_a_tenants_subscription_does_not_hold_the_worker(clusters, receiver):
    """From 16 a role granted pg_create_subscription (and CREATE on the
    database) subscribes to a publisher of its choice: one whose tables
    are named like jobflow's fills pg_subscription_rel with jobflow's
    tables.  It cannot write them, and must not hold every tenant's
    callbacks either."""
    blue, green = clusters
    if green.one("postgres", "SELECT current_setting('server_version_num')::int") < 160000:
        pytest.skip("pg_create_subscription is new in PostgreSQL 16")
    db = "logical_tenant"
    for node in (blue, green):
        node.database(db)
    # the tenant's "own" publisher: a role with a password (a non-superuser
    # subscription must use one) and a publication of jobflow's tables
    blue.sql("postgres", "DO $$BEGIN CREATE ROLE intruder LOGIN REPLICATION PASSWORD 'pw';"
                         " EXCEPTION WHEN duplicate_object THEN NULL; END$$")
    hba = os.path.join(blue.data, "pg_hba.conf")
    pgnode.as_server_user(["sh", "-c", "grep -q intruder '%s' || sed -i '1i local all intruder scram-sha-256' '%s'"
                           % (hba, hba)])
    blue.sql("postgres", "SELECT pg_reload_conf()")
    blue.sql(db, "CREATE PUBLICATION p_tenant FOR ALL TABLES")
    green.sql("postgres", "DO $$BEGIN CREATE ROLE intruder LOGIN;"
                          " EXCEPTION WHEN duplicate_object THEN NULL; END$$")
    # a tenant of the database (jobflow_user: USAGE on schema jobflow, which
    # naming jobflow's tables in a subscription takes)
    green.sql(db, "GRANT pg_create_subscription, jobflow_user TO intruder;"
                  " GRANT CREATE ON DATABASE %s TO intruder" % db)
    url, tag = receiver.unique_url("/ok")
    try:
        green.sql(db, "SET ROLE intruder; CREATE SUBSCRIPTION s_tenant CONNECTION '%s"
                      " user=intruder password=pw' PUBLICATION p_tenant"
                      " WITH (enabled = false, copy_data = false, slot_name = NONE,"
                      "       create_slot = false)"
                  % blue.conninfo(db).replace(" user=postgres", ""))
        assert green.one(db, "SELECT count(*) FROM pg_subscription_rel r JOIN pg_class c"
                             " ON c.oid = r.srrelid WHERE c.relnamespace = 'jobflow'::regnamespace") > 0, \
            "the tenant's subscription lists no table of jobflow"
        time.sleep(1.5)       # more than a reconcile interval
        task, due = schedule_as_app(green, db, url, 0.2)
        got = receiver.wait_for(lambda r: ("t=" + tag) in r["query"], timeout=10)
        assert len(got) == 1 and got[0]["time"] >= due
        assert held(green, db) is None
    finally:
        green.sql(db, "DROP SUBSCRIPTION IF EXISTS s_tenant")
        green.drop(db)
        blue.drop(db)


# -------------------------------------------------------------------------
# 5. A restarted worker does not show its predecessor's hold
# -------------------------------------------------------------------------

def test_a_restarted_worker_does_not_report_its_predecessors_hold(clusters, receiver):
    """The slot keeps what the worker published when the worker exits and
    the same database's next worker takes it: a worker that exited while
    held (here jobflow.dispatch = off; or a subscription dropped while it
    restarted) must not leave worker_status() and jobflow_worker_held
    saying its successor holds while that one fires."""
    blue, _ = clusters
    db = "logical_restart"
    blue.database(db)
    url, tag = receiver.unique_url("/ok")
    try:
        blue.set_dispatch("off")
        wait_until(lambda: held(blue, db) == "dispatch off", 10, "the switch")
        old = blue.one(db, "SELECT pid FROM jobflow.worker_status()")
        # on, read only by the next worker (the server reloads once the old
        # one is gone, within the second before its restart)
        blue.sql("postgres", "ALTER SYSTEM SET jobflow.dispatch = on")
        blue.sql("postgres", "SELECT pg_terminate_backend(%s)", (old,))
        wait_until(lambda: blue.one("postgres", "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity"
                                                " WHERE pid = %s)", (old,)), 10, "the worker to exit")
        blue.sql("postgres", "SELECT pg_reload_conf()")
        wait_until(lambda: blue.one(db, "SELECT pid IS NOT NULL AND pid <> %s"
                                        "  FROM jobflow.worker_status()", (old,)), 15, "a new worker")
        task, due = schedule_as_app(blue, db, url, 0.2)
        got = receiver.wait_for(lambda r: ("t=" + tag) in r["query"], timeout=10)
        assert len(got) == 1
        assert held(blue, db) is None, "the new worker fires, yet is said to hold"
        assert blue.one(db, "SELECT count(*) FROM jobflow.stats"
                            " WHERE metric = 'worker_held' AND value = 1") == 0
    finally:
        blue.drop(db)
        blue.set_dispatch(None)


# -------------------------------------------------------------------------
# 6. A held worker's look costs the same with many tables subscribed
# -------------------------------------------------------------------------

def test_a_held_workers_look_does_not_scan_every_subscribed_table(clusters, receiver):
    """A held worker looks at the subscriptions up to ten times a second
    (every wake-up a tenant's schedule() causes, at most every 100 ms).
    A move subscribes to every table of the database, which can be
    thousands, and from 16 a tenant's own subscription adds as many rows
    as it likes: a look must go from jobflow's few tables to
    pg_subscription_rel by its index, not read all of it."""
    blue, green = clusters
    db = "logical_look"
    ntables = 2000
    for node in (blue, green):
        node.database(db)
        node.sql(db, "CREATE SCHEMA many; DO $$BEGIN FOR i IN 1..%d LOOP"
                     " EXECUTE format('CREATE TABLE many.t%%s (id int PRIMARY KEY)', i);"
                     " END LOOP; END$$" % ntables)
    url, _ = receiver.unique_url("/ok")
    try:
        blue.sql(db, "CREATE PUBLICATION p_look FOR ALL TABLES")
        # no apply worker (enabled = false): only jobflow's worker reads
        # pg_subscription_rel in the database meanwhile
        green.sql(db, "CREATE SUBSCRIPTION %s_sub CONNECTION '%s' PUBLICATION p_look"
                      " WITH (enabled = false, copy_data = false, slot_name = NONE,"
                      "       create_slot = false)" % (db, blue.conninfo(db)))
        assert green.one(db, "SELECT count(*) FROM pg_subscription_rel") > ntables
        wait_until(lambda: held(green, db) == "subscription", 10, "green to hold")

        def scans():
            green.sql(db, "SELECT pg_stat_clear_snapshot()")
            return green.sql(db, "SELECT seq_scan, idx_scan FROM pg_stat_sys_tables"
                                 " WHERE relname = 'pg_subscription_rel'")[0]
        time.sleep(1.5)     # the statistics of the looks so far are flushed
        before = scans()
        # a tenant's schedules wake the held worker: it looks each time
        deadline = time.time() + 3
        while time.time() < deadline:
            schedule_as_app(green, db, url, 60)
            time.sleep(0.05)
        time.sleep(1.5)
        after = scans()
        print("looks: %d index scans, %d sequential scans of pg_subscription_rel (%d rows)"
              % (after[1] - before[1], after[0] - before[0], ntables))
        assert sum(after) > sum(before), "the held worker did not look"
        assert after[0] == before[0], "a look read all of pg_subscription_rel"
        assert held(green, db) == "subscription"
    finally:
        green.drop(db)
        blue.drop(db)
