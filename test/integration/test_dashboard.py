# -------------------------------------------------------------------------
#
# test_dashboard.py
#     prometheus/jobflow-dashboard.json and prometheus/alerts.yml against a
#     real Prometheus (Debian's prometheus, scraping every second) that
#     scrapes the real prometheus-postgres-exporter (Debian's, with
#     prometheus/jobflow_queries.yaml) pointed at the suite's cluster under
#     load: a few hundred callbacks to the receiver, some answered 503
#     (dead letters), some hanging (origins in flight), a paused queue
#     with overdue tasks, a moment of jobflow.dispatch = off.  Every
#     panel's query, with the dashboard's variables substituted, returns
#     data; the alert rules load and evaluate without error, and the
#     figures they watch are those of this cluster.
#
#     With JOBFLOW_DASHBOARD_SCREENSHOT=<png> (scripts/dashboard-screenshot.sh)
#     it keeps the load up longer and renders the panels into that PNG
#     with headless chromium (test/integration/dashboard_render.py).
#
# -------------------------------------------------------------------------

import json
import os
import time
import uuid


from conftest import call, schedule, wait_final
from promstack import ALERTS, Exporter, Prometheus

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BOARD = os.path.join(REPO, "prometheus", "jobflow-dashboard.json")
SHOT = os.environ.get("JOBFLOW_DASHBOARD_SCREENSHOT")


def panel_targets(board):
    for panel in board["panels"]:
        for t in panel.get("targets", []):
            yield panel, t


def substitute(expr):
    """The expression as Grafana sends it: every database, and a rate
    window of a few scrape intervals."""
    return expr.replace("$database", ".*").replace("$__rate_interval", "15s")


def load(db, receiver, server, queue, rounds):
    """Callbacks for `rounds` seconds: 40 ok and 8 answered 503 (failed
    for good) a second, 3 hanging ones each second, and two overdue tasks
    in the paused queue; dispatch off for 2 s in the middle."""
    ids = []
    for i in range(rounds):
        started = time.time()
        ok, _ = receiver.unique_url("/ok")
        broken, _ = receiver.unique_url("/status/503")
        hang, _ = receiver.unique_url("/hang")
        ids += [schedule(db, ok, queue="jf_dash_ok") for _ in range(40)]
        ids += [schedule(db, broken, queue=queue + "_dl", max_attempts=1) for _ in range(8)]
        ids += [schedule(db, hang, queue=queue + "_dl", timeout_ms=2500, max_attempts=1) for _ in range(3)]
        if i % 4 == 0:
            schedule(db, ok, queue=queue, run_at_sql="now() - interval '%d seconds'" % (30 + i))
        if i == rounds // 2:
            server.set_guc(db, "jobflow.dispatch", "off")
        if i == rounds // 2 + 2:
            server.set_guc(db, "jobflow.dispatch", None)
        time.sleep(max(0.0, 1.0 - (time.time() - started)))
    return ids


def test_dashboard_panels_and_alerts_on_a_real_prometheus(db, server, receiver, monitor, tmp_path):
    board = json.load(open(BOARD))
    queue = "jf_dash_%s" % uuid.uuid4().hex[:6]
    call(db, "SELECT jobflow.pause_queue(%s)", (queue,))
    try:
        with Exporter(monitor, tmp_path) as exporter:
            exporter.scrape()
            with Prometheus(["127.0.0.1:%d" % exporter.port], tmp_path,
                            rule_files=[ALERTS]) as prom:
                start = time.time()
                ids = load(db, receiver, server, queue, 90 if SHOT else 8)
                wait_final(db, ids, timeout=60)
                time.sleep(3)           # a few more scrapes after the last outcome
                end = time.time()

                empty = []
                for panel, t in panel_targets(board):
                    expr = substitute(t["expr"])
                    result = prom.query_range(expr, start, end, 1)
                    values = [float(v) for r in result for _, v in r["values"]]
                    if not [v for v in values if v == v]:        # all NaN or none
                        empty.append((panel["title"], expr))
                assert not empty, empty

                # the figures come from this cluster's database, per queue
                dbname = call(db, "SELECT current_database()")
                paused = prom.query('jobflow_queue_paused{queue="%s"}' % queue)
                assert [r["metric"]["database"] for r in paused] == [dbname]
                assert paused[0]["value"][1] == "1"
                dead = prom.query('jobflow_queue_dead_letters{queue="%s_dl"}' % queue)
                assert float(dead[0]["value"][1]) > 0
                held = prom.query_range('jobflow_worker_held{reason="dispatch off"} == 1', start, end, 1)
                assert held, "dispatch off was not seen as held"

                # alerts.yml is loaded, every rule evaluates without error;
                # the backlog of the paused queue alerts nobody
                rules = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
                names = {r["name"] for r in rules}
                assert {"JobflowWorkerDown", "JobflowLatenessHigh", "JobflowBacklogOld",
                        "JobflowDeadLettersGrowing", "JobflowPruningBehind",
                        "JobflowWaitsForUpdate"} <= names, names
                deadline = time.time() + 10
                while any(r.get("lastEvaluation", "").startswith("0001") for r in rules):
                    assert time.time() < deadline, rules
                    time.sleep(0.5)
                    rules = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
                bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
                assert not bad, bad
                firing = {r["name"] for r in rules if r["state"] == "firing"}
                assert not firing & {"JobflowFiguresAbsent", "JobflowWorkerDown",
                                     "JobflowBacklogOld", "JobflowBacklogVeryOld"}, firing
                # the condition of the backlog alerts holds for no queue
                # here (the paused queue's is excluded), while the
                # oldest overdue figure itself is there
                assert prom.query("jobflow_queue_oldest_overdue_seconds > 20")
                assert not prom.query(
                    "jobflow_queue_oldest_overdue_seconds > 20 and jobflow_queue_paused == 0")

                if SHOT:
                    import dashboard_render
                    dashboard_render.render(board, prom, start, end, substitute, SHOT,
                                            str(tmp_path / "dashboard.html"))
    finally:
        server.set_guc(db, "jobflow.dispatch", None)
        call(db, "SELECT jobflow.resume_queue(%s)", (queue,))
        call(db, "DELETE FROM jobflow.tasks WHERE queue IN (%s, %s)", (queue, queue + "_dl"))
        call(db, "SELECT jobflow.drop_queue(%s)", (queue,))
