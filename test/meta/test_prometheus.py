# -------------------------------------------------------------------------
#
# test_prometheus.py
#     What prometheus/ ships, checked without a server: promtool (Debian's
#     prometheus package) accepts alerts.yml and its unit tests
#     (alerts_test.yml: every alert fires when it should and not before);
#     the alerts and the Grafana dashboard name only series that
#     jobflow_queries.yaml makes prometheus-postgres-exporter serve; the
#     dashboard takes its data source and database from variables.
#     test/integration/test_dashboard.py runs the same files against a real
#     Prometheus scraping the real exporter.
#
# -------------------------------------------------------------------------

import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROM = os.path.join(REPO, "prometheus")
SERIES = re.compile(r"\bjobflow_[a-z0-9_]+")


def promtool():
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is missing (Debian package prometheus): CI must run the alert tests")
        pytest.skip("promtool is missing: apt-get install prometheus to run the alert tests")
    return path


def test_alert_rules_pass_promtool():
    """promtool check rules, then promtool test rules (alerts_test.yml)."""
    tool = promtool()
    for args in (["check", "rules", "alerts.yml"], ["test", "rules", "alerts_test.yml"]):
        run = subprocess.run([tool] + args, cwd=PROM, capture_output=True, text=True)
        assert run.returncode == 0, (args, run.stdout + run.stderr)


def test_every_alert_has_a_unit_test():
    rules = [r["alert"] for g in yaml.safe_load(open(os.path.join(PROM, "alerts.yml")))["groups"]
             for r in g["rules"]]
    tests = yaml.safe_load(open(os.path.join(PROM, "alerts_test.yml")))["tests"]
    fired, quiet = set(), set()
    for t in tests:
        for a in t["alert_rule_test"]:
            (fired if a["exp_alerts"] else quiet).add(a["alertname"])
    assert set(rules) == fired == quiet, (rules, fired, quiet)
    for r in yaml.safe_load(open(os.path.join(PROM, "alerts.yml")))["groups"][0]["rules"]:
        assert r["labels"]["severity"] in ("critical", "warning", "info"), r["alert"]
        assert r["annotations"]["summary"] and r["annotations"]["description"], r["alert"]


def exported_series():
    """The series names the exporter makes of jobflow_queries.yaml: key_column
    per non-LABEL column, and a HISTOGRAM's _bucket, _sum and _count."""
    names = set()
    for key, spec in yaml.safe_load(open(os.path.join(PROM, "jobflow_queries.yaml"))).items():
        for column in spec["metrics"]:
            (col, m), = column.items()
            if m["usage"] == "LABEL":
                continue
            name = "%s_%s" % (key, col)
            if m["usage"] == "HISTOGRAM":
                names |= {name + "_bucket", name + "_sum", name + "_count"}
            else:
                names.add(name)
    return names


def test_queries_file_makes_idiomatic_series():
    names = exported_series()
    for want in ("jobflow_fired_total", "jobflow_outcomes_total", "jobflow_host_requests_in_flight",
                 "jobflow_host_requests_queued", "jobflow_queue_oldest_overdue_seconds",
                 "jobflow_worker_held", "jobflow_worker_last_turn_timestamp_seconds",
                 "jobflow_lateness_seconds_bucket", "jobflow_prune_behind_seconds"):
        assert want in names, want
    assert not any(n.startswith(("jobflow_counter", "jobflow_gauge")) for n in names), names
    for key, spec in yaml.safe_load(open(os.path.join(PROM, "jobflow_queries.yaml"))).items():
        usages = {list(c)[0]: list(c.values())[0]["usage"] for c in spec["metrics"]}
        assert usages.get("database") == "LABEL", key
        assert "current_database() AS database" in spec["query"], key
        for col, usage in usages.items():
            if col.endswith("total"):
                assert usage == "COUNTER", (key, col)
        assert all(list(c.values())[0]["description"] for c in spec["metrics"]), key


def test_alerts_name_exported_series():
    names = exported_series()
    for group in yaml.safe_load(open(os.path.join(PROM, "alerts.yml")))["groups"]:
        for rule in group["rules"]:
            used = set(SERIES.findall(rule["expr"]))
            assert used <= names, (rule["alert"], used - names)


def dashboard():
    return json.load(open(os.path.join(PROM, "jobflow-dashboard.json")))


def panel_targets(board):
    for panel in board["panels"]:
        for inner in [panel] + panel.get("panels", []):
            for t in inner.get("targets", []):
                yield inner, t


def test_dashboard_names_exported_series_through_variables():
    board = dashboard()
    names = exported_series()
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["database"]["type"] == "query"
    targets = list(panel_targets(board))
    assert len(targets) >= 10
    for panel, t in targets:
        used = set(SERIES.findall(t["expr"]))
        assert used and used <= names, (panel["title"], used - names)
        assert 'database=~"$database"' in t["expr"], (panel["title"], t["expr"])
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]


def test_wire_script_on_debian_defaults(tmp_path):
    """scripts/wire-prometheus.sh on copies of the files Debian's packages
    install: the exporter gets one connection per database and jobflow's
    queries, Prometheus the alert rules and a job scraping the exporter,
    promtool accepts the result, and a second run changes nothing."""
    promtool()
    defaults = "/etc/default/prometheus-postgres-exporter"
    config = "/etc/prometheus/prometheus.yml"
    for f in (defaults, config):
        if not os.path.exists(f):
            if os.environ.get("CI") == "true":
                pytest.fail("%s is missing: test.sh installs prometheus and the exporter" % f)
            pytest.skip("%s is missing (packages prometheus, prometheus-postgres-exporter)" % f)
    (tmp_path / "default").mkdir()
    (tmp_path / "prometheus").mkdir()
    shutil.copy(defaults, tmp_path / "default")
    shutil.copy(config, tmp_path / "prometheus")
    env = dict(os.environ, JOBFLOW_ETC=str(tmp_path), JOBFLOW_NO_RESTART="1")
    script = os.path.join(REPO, "scripts", "wire-prometheus.sh")

    def run():
        done = subprocess.run([script, "app", "billing"], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        return {p: open(tmp_path / p).read() for p in
                ("default/prometheus-postgres-exporter", "prometheus/prometheus.yml",
                 "prometheus/jobflow_queries.yaml", "prometheus/jobflow_alerts.yml")}

    first = run()
    env_file = first["default/prometheus-postgres-exporter"]
    assert "DATA_SOURCE_NAME='user=prometheus host=/run/postgresql dbname=app'" in env_file, \
        env_file
    assert '--extend.query-path=%s/prometheus/jobflow_queries.yaml --auto-discover-databases' \
           ' --include-databases=app,billing"' % tmp_path in env_file, env_file
    conf = yaml.safe_load(first["prometheus/prometheus.yml"])
    assert "jobflow_alerts.yml" in conf["rule_files"]
    jobs = {j["job_name"]: j for j in conf["scrape_configs"]}
    assert jobs["postgres"]["static_configs"][0]["targets"] == ["localhost:9187"]
    assert first["prometheus/jobflow_alerts.yml"] == open(os.path.join(PROM, "alerts.yml")).read()
    assert run() == first
    bad = subprocess.run([script, "app; rm -rf /"], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "use letters" in bad.stderr
