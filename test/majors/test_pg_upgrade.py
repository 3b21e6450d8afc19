# -------------------------------------------------------------------------
#
# test_pg_upgrade.py
#     A major-version upgrade with pg_upgrade (issue 23, item 2): a
#     cluster with jobflow in two databases, holding pending tasks, fired
#     tasks with their attempt log (a retried one, a failed one), cron
#     timers firing every second or two, a header secret, a signing
#     secret and configured queues (one paused), is stopped, upgraded with
#     pg_upgrade (--check first, then --copy or --link) to a later major
#     with jobflow installed, and started as an operator would, with
#     nothing run by hand.  Then:
#
#       - nothing reached the receiver from the old server's stop to the
#         new server's start: pg_upgrade starts both servers (binary-
#         upgrade mode, -b) several times, and jobflow's launcher must not
#         start there (src/jobflow.c);
#       - the worker of each database starts by itself;
#       - every jobflow table equals what the old cluster held at its stop
#         (read with jobflow not loaded), but for what the worker moves on
#         from there: states, attempts, next_at, new log rows and tasks;
#       - each pending task fires exactly once, never before its run_at;
#         the task of the paused queue stays pending;
#       - the cron timers fire new occurrences, none of them twice;
#       - the header secret reaches the receiver and the callbacks are
#         still signed with the signing secret made before the upgrade;
#       - each of two tenants sees only its own rows in jobflow.cron and
#         jobflow.failed_tasks (made differently on 14).
#
# Each case prints how long its steps took; about 20 s in all on two busy
# cores, most of it waiting for the tasks and timers.
#
# Which servers to upgrade between, and how: JOBFLOW_UPGRADE_PAIRS (see
# conftest.py), e.g.
#
#     JOBFLOW_UPGRADE_PAIRS="/pg16/bin/pg_config:/pg17/bin/pg_config:copy,link
#                            /pg14/bin/pg_config:/pg17/bin/pg_config"
#
# Without it the test is skipped.
#
# -------------------------------------------------------------------------

import json
import time
import uuid

from pgnode import as_server_user, wait_until
from signatures import python_verify

DATABASES = ("app_one", "app_two")
ROLE = "jf_upgrade_app"
OTHER = "jf_upgrade_other"      # another tenant, whose rows ROLE must not see
FINAL = ("succeeded", "failed", "cancelled")

# Seconds from the old server's stop to the new one's start, as measured
# here (at -O0, on two busy cores): the tasks "due after the upgrade" are
# scheduled that far ahead, plus a margin.  A slower run only makes them
# overdue at the start: every check holds all the same.
DOWNTIME_ESTIMATE = 10
MARGIN = 3

# Columns the worker legitimately moves on after the start.
MOVING = {
    "tasks": {"state", "attempts", "attempts_base", "updated_at", "last_status",
              "last_error"},
    "cron_timers": {"next_at", "updated_at"},
}


def as_app(cluster, db, sql, args=None, role=ROLE):
    """sql's first column of its first row, run as the application role."""
    conn = cluster.connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute("SET ROLE %s" % role)
            cur.execute(sql, args)
            row = cur.fetchone() if cur.description else None
            return row[0] if row else None
    finally:
        conn.close()


def snapshot(cluster):
    """{db: {relation: sorted rows as JSON text}} of every table and
    sequence of schema jobflow."""
    snap = {}
    for db in DATABASES:
        rels = cluster.query("SELECT c.relname, c.relkind::text FROM pg_class c"
                             "  JOIN pg_namespace n ON n.oid = c.relnamespace"
                             " WHERE n.nspname = 'jobflow' AND c.relkind IN ('r', 'p', 'S')"
                             " ORDER BY 1", dbname=db)
        snap[db] = {}
        for name, kind in rels:
            cols = "last_value, is_called" if kind == "S" else "*"
            rows = cluster.query("SELECT to_jsonb(x)::text FROM (SELECT %s FROM jobflow.%s) x"
                                 % (cols, name), dbname=db)
            snap[db][name] = sorted(r[0] for r in rows)
    return snap


def compare(before, after):
    """Every row of before is in after, unchanged but for MOVING columns
    of rows the worker may have moved on (unfinished tasks, timers);
    sequences only move forward; nothing else changed."""
    assert sorted(before) == sorted(after), "databases differ"
    for db in before:
        assert sorted(before[db]) == sorted(after[db]), "%s: relations differ" % db
        for rel, rows in before[db].items():
            new_rows = after[db][rel]
            if rel.endswith("_seq"):
                old_v, new_v = json.loads(rows[0]), json.loads(new_rows[0])
                assert new_v["last_value"] >= old_v["last_value"], (db, rel)
            elif rel == "task_log":
                missing = set(rows) - set(new_rows)
                assert not missing, "%s: log rows lost: %s" % (db, sorted(missing)[:3])
            elif rel in MOVING:
                old_by_id = {json.loads(r)["id"]: json.loads(r) for r in rows}
                new_by_id = {json.loads(r)["id"]: json.loads(r) for r in new_rows}
                for key, old_row in old_by_id.items():
                    assert key in new_by_id, "%s: %s row %s lost" % (db, rel, key)
                    new_row = new_by_id[key]
                    if rel == "tasks" and old_row["state"] in FINAL:
                        assert new_row == old_row, "%s: finished task %s changed" % (db, key)
                    else:
                        strip = lambda r: {k: v for k, v in r.items() if k not in MOVING[rel]}
                        assert strip(new_row) == strip(old_row), "%s: %s row %s changed" % (
                            db, rel, key)
            else:
                assert new_rows == rows, "%s: jobflow.%s changed" % (db, rel)


def tasks_of(cluster, db):
    """{id: row dict} of every task of db."""
    rows = cluster.query("SELECT id, state::text, attempts, url, cron_id,"
                         "       extract(epoch FROM cron_at)::float8,"
                         "       extract(epoch FROM run_at)::float8"
                         "  FROM jobflow.tasks", dbname=db)
    return {r[0]: dict(id=r[0], state=r[1], attempts=r[2], url=r[3], cron_id=r[4],
                       cron_at=r[5], run_at=r[6]) for r in rows}


def test_pg_upgrade_keeps_and_resumes_everything(upgrade_case, clusters, receiver, workdir):
    old_install, new_install, mode = upgrade_case
    old, new = clusters
    tag = uuid.uuid4().hex
    origin = "http://127.0.0.1:%d" % receiver.port
    url = lambda db, kind, path="/ok": "%s%s?t=%s&db=%s&k=%s" % (origin, path, tag, db, kind)
    mine = lambda r: ("t=" + tag) in r["query"]
    kind_of = lambda r: dict(p.split("=", 1) for p in r["query"].split("&"))["k"]
    db_of = lambda r: dict(p.split("=", 1) for p in r["query"].split("&"))["db"]
    secret_value = "Bearer up-%s" % uuid.uuid4().hex
    timings = {}

    # ---- the old cluster, with jobflow in two databases --------------------
    t = time.time()
    old.initdb(checksums=False)
    old.configure(["jobflow.retry_backoff_base = '200ms'"])
    old.start()
    for db in DATABASES:
        old.query("CREATE DATABASE %s" % db)
        old.query("CREATE EXTENSION jobflow", dbname=db)
    for role in (ROLE, OTHER):
        old.query("CREATE ROLE %s NOLOGIN" % role)
        old.query("GRANT jobflow_user TO %s" % role)
    timings["old cluster"] = time.time() - t

    one, two = DATABASES
    as_app(old, one, "SELECT jobflow.set_secret('hdr', %s, ARRAY[%s])", (secret_value, origin))
    whsec = as_app(old, one, "SELECT jobflow.create_signing_secret()")
    as_app(old, one, "SELECT jobflow.set_queue('mail', max_concurrent => 2, max_per_second => 50,"
                     " priority => 5, retention => interval '30 days')")
    as_app(old, one, "SELECT jobflow.pause_queue('held')")
    as_app(old, two, "SELECT jobflow.set_queue('slow', max_per_second => 20)")
    secret_headers = json.dumps({"Authorization": {"secret": "hdr"}})
    held = as_app(old, one, "SELECT jobflow.schedule(%s, queue => 'held')", (url(one, "held"),))

    # fired before the upgrade: a success, a retried success, a failure
    fired = {
        one: [as_app(old, one, "SELECT jobflow.schedule(%s)", (url(one, "done"),)),
              as_app(old, one, "SELECT jobflow.schedule(%s, max_attempts => 3)",
                     (url(one, "flaky", "/flaky/1"),)),
              as_app(old, one, "SELECT jobflow.schedule(%s, max_attempts => 2)",
                     (url(one, "fail", "/status/500"),))],
        two: [as_app(old, two, "SELECT jobflow.schedule(%s, body => '{\"n\": 2}')",
                     (url(two, "done"),))],
    }
    # the other tenant: a failed task and a paused timer (on 14, the views
    # that show them are made differently: src/install_pg14.sql)
    fired[one].append(as_app(old, one, "SELECT jobflow.schedule(%s, max_attempts => 1)",
                             (url(one, "other", "/status/500"),), role=OTHER))
    as_app(old, one, "SELECT jobflow.schedule_cron('other', '0 0 1 1 *', %s, active => false)",
           (url(one, "other"),), role=OTHER)
    # cron timers: every second (signed, with the header secret; missed
    # occurrences skipped) and every two seconds (missed: fired once)
    as_app(old, one, "SELECT jobflow.schedule_cron('tick', '* * * * * *', %s, "
                     " body => '{\"tick\": true}', headers => %s, queue => 'mail')",
           (url(one, "tick"), secret_headers))
    as_app(old, two, "SELECT jobflow.schedule_cron('tock', 'every 2 seconds', %s,"
                     " queue => 'slow', missed => 'once')", (url(two, "tock"),))

    def fired_enough():
        for db, ids in fired.items():
            rows = old.query("SELECT state::text, attempts FROM jobflow.tasks"
                             " WHERE id = ANY(%s)", (ids,), dbname=db)
            if any(s not in FINAL for s, _ in rows):
                return False
        ticks = {db: old.value("SELECT count(*) FROM jobflow.tasks WHERE cron_id IS NOT NULL"
                               " AND state = 'succeeded'", dbname=db) for db in DATABASES}
        return ticks[one] >= 2 and ticks[two] >= 1
    wait_until(fired_enough, 30, "the first tasks and cron occurrences to fire")
    flaky_log = old.query("SELECT attempt, outcome, http_status FROM jobflow.task_log"
                          " WHERE task_id = %s ORDER BY attempt", (fired[one][1],), dbname=one)
    assert len(flaky_log) == 2 and flaky_log[-1][2] == 200, flaky_log

    # pending: due while the servers are down or pg_upgrade runs, and due
    # after the new server's start; some with the secret, some signed
    pending = {}
    for db in DATABASES:
        pending[db] = [r[0] for r in old.query(
            "SET ROLE %s; SELECT jobflow.schedule(%%s || '&n=' || g, run_at => now()"
            "   + make_interval(secs => 2 + g), headers => %%s::jsonb, queue => 'mail')"
            "  FROM generate_series(0, 11) g" % ROLE,
            (url(db, "during"), secret_headers if db == one else "{}"), dbname=db)]
        pending[db] += [r[0] for r in old.query(
            "SET ROLE %s; SELECT jobflow.schedule(%%s || '&n=' || g, run_at => now()"
            "   + make_interval(secs => %%s + g * 0.5), body => '{\"after\": true}',"
            "   headers => %%s::jsonb)"
            "  FROM generate_series(0, 3) g" % ROLE,
            (url(db, "after"), DOWNTIME_ESTIMATE + MARGIN,
             secret_headers if db == one else "{}"), dbname=db)]

    # ---- stop; what the tables hold, read with jobflow not loaded ----------
    t = time.time()
    old.stop()
    t_stopped = time.time()
    phases = [("stopped", t_stopped)]
    old.start(options="-c shared_preload_libraries=")
    before = snapshot(old)
    checksums = old.value("SHOW data_checksums") == "on"
    ext_version = old.value("SELECT extversion FROM pg_extension WHERE extname = 'jobflow'",
                            dbname=one)
    old.stop()
    timings["snapshot"] = time.time() - t

    # ---- pg_upgrade --------------------------------------------------------
    t = time.time()
    phases.append(("new initdb", t))
    new.initdb(checksums=checksums)
    new.configure()
    timings["new initdb"] = time.time() - t
    cmd = [new_install.bin("pg_upgrade"),
           "-b", old_install.bindir, "-B", new_install.bindir,
           "-d", old.data, "-D", new.data, "-p", str(old.port), "-P", str(new.port),
           "-U", "postgres", "--no-sync"]
    cmd.append("--link" if mode == "link" else "--copy")
    t = time.time()
    phases.append(("pg_upgrade --check", t))
    check = as_server_user(cmd + ["--check"], cwd=workdir)
    assert "Clusters are compatible" in check.stdout, check.stdout
    timings["pg_upgrade --check"] = time.time() - t
    t = time.time()
    phases.append(("pg_upgrade", t))
    as_server_user(cmd, cwd=workdir)
    timings["pg_upgrade"] = time.time() - t

    # ---- the new server, started as an operator would ----------------------
    t_start = time.time()
    new.start()
    timings["downtime"] = t_start - t_stopped
    after = snapshot(new)
    compare(before, after)

    # the worker of each database started by itself
    for db in DATABASES:
        wait_until(lambda: new.value("SELECT pid FROM jobflow.worker_status()", dbname=db),
                   30, "the worker of %s on the new server" % db)
    assert new.value("SELECT extversion FROM pg_extension WHERE extname = 'jobflow'",
                     dbname=one) == ext_version

    # nothing fired from the old server's stop to the new one's start
    quiet = [r for r in receiver.requests(mine) if t_stopped + 0.5 <= r["time"] < t_start]
    phase = lambda at: [name for name, t in phases if t <= at][-1]
    assert not quiet, "fired while the servers were down or pg_upgrade ran: %s" % (
        json.dumps([(db_of(r), kind_of(r), r["headers"].get("x-jobflow-task-id"),
                     phase(r["time"]), round(r["time"] - t_stopped, 2)) for r in quiet[:10]]))

    # every pending task fires once, never early; the held one stays
    last_due = max(t["run_at"] for db in DATABASES for t in tasks_of(new, db).values()
                   if t["id"] in pending[db])
    wait_until(lambda: all(all(t["state"] in FINAL for i, t in tasks_of(new, db).items()
                               if i in pending[db]) for db in DATABASES),
               max(last_due - time.time(), 0) + 30, "the pending tasks to finish")
    for db in DATABASES:
        tasks = tasks_of(new, db)
        for task_id in pending[db]:
            assert tasks[task_id]["state"] == "succeeded", tasks[task_id]
            got = [r for r in receiver.requests(mine) if db_of(r) == db
                   and kind_of(r) in ("during", "after")
                   and int(r["headers"]["x-jobflow-task-id"]) == task_id]
            assert len(got) == 1, "task %d of %s reached the receiver %d times" % (
                task_id, db, len(got))
            assert got[0]["time"] >= tasks[task_id]["run_at"], "task %d fired early" % task_id
    assert tasks_of(new, one)[held]["state"] == "pending"
    assert not [r for r in receiver.requests(mine) if kind_of(r) == "held"]

    # each tenant still sees its own timers and failed tasks, and only those
    for role, timers, failed in ((ROLE, "tick", fired[one][2]), (OTHER, "other", fired[one][3])):
        assert as_app(new, one, "SELECT string_agg(name, ',') FROM jobflow.cron",
                      role=role) == timers
        assert as_app(new, one, "SELECT array_agg(id) FROM jobflow.failed_tasks",
                      role=role) == [failed]

    # the cron timers go on: new occurrences, none twice
    def new_occurrences():
        done = {}
        for db, kind in ((one, "tick"), (two, "tock")):
            got = [r for r in receiver.requests(mine) if db_of(r) == db and kind_of(r) == kind]
            tasks = tasks_of(new, db)
            done[db] = [tasks[int(r["headers"]["x-jobflow-task-id"])]["cron_at"] for r in got]
        later = {db: [c for c in done[db] if c > t_start] for db in done}
        return done if len(later[one]) >= 3 and len(later[two]) >= 2 else None
    done = wait_until(new_occurrences, 30, "cron occurrences after the upgrade")
    for db, slots in done.items():
        assert len(slots) == len(set(slots)), "%s: a cron occurrence fired twice" % db

    # the secrets made before the upgrade still work
    after_ones = [r for r in receiver.requests(mine) if db_of(r) == one and r["time"] >= t_start
                  and kind_of(r) in ("tick", "during", "after")]
    assert after_ones
    for r in after_ones:
        assert r["headers"].get("authorization") == secret_value, r["headers"]
        assert python_verify(whsec, r), "not signed with the secret made before: %s" % r
    unsigned = [r for r in receiver.requests(mine) if db_of(r) == two and r["time"] >= t_start]
    assert unsigned and not any("webhook-signature" in r["headers"] for r in unsigned)

    timings["after start"] = time.time() - t_start
    print("\n%s -> %s (%s): %s" % (old_install.version, new_install.version, mode,
                                    ", ".join("%s %.1f s" % kv for kv in timings.items())))

