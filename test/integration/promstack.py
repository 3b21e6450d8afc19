# -------------------------------------------------------------------------
#
# promstack.py
#     The monitoring stack of prometheus/, run for a test: Debian's
#     prometheus-postgres-exporter with prometheus/jobflow_queries.yaml
#     against the suite's cluster, and Debian's prometheus scraping it
#     every second with prometheus/alerts.yml loaded.  Both listen on a
#     free loopback port and write under the test's tmp_path; both are
#     stopped when their "with" block ends, also when the test fails.
#
# -------------------------------------------------------------------------

import json
import os
import socket
import subprocess
import time
import urllib.parse
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPORTER = "/usr/bin/prometheus-postgres-exporter"
PROMETHEUS = "/usr/bin/prometheus"
QUERIES = os.path.join(REPO, "prometheus", "jobflow_queries.yaml")
ALERTS = os.path.join(REPO, "prometheus", "alerts.yml")


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def get(url, timeout=5):
    return urllib.request.urlopen(url, timeout=timeout).read().decode()


class _Process:
    """A daemon with a log file, stopped (SIGTERM, then SIGKILL) on exit."""

    def __init__(self, argv, log_path, env=None):
        self.log_path = str(log_path)
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()

    def tail(self, n=3000):
        with open(self.log_path) as f:
            return f.read()[-n:]


class Exporter(_Process):
    """prometheus-postgres-exporter on 127.0.0.1, connected as role to the
    suite's database (PGHOST, PGPORT, PGDATABASE), with the queries file."""

    def __init__(self, role, tmp_path, queries=QUERIES):
        assert os.access(EXPORTER, os.X_OK), "prometheus-postgres-exporter is not installed"
        self.port = free_port()
        self.url = "http://127.0.0.1:%d/metrics" % self.port
        dsn = "host=%s port=%s user=%s dbname=%s sslmode=disable" % (
            os.environ.get("PGHOST"), os.environ.get("PGPORT"), role,
            os.environ.get("PGDATABASE", "jobflow"))
        super().__init__([EXPORTER, "--web.listen-address=127.0.0.1:%d" % self.port,
                          "--extend.query-path=" + queries, "--disable-settings-metrics"],
                         tmp_path / "exporter.log", env=dict(os.environ, DATA_SOURCE_NAME=dsn))

    def scrape(self, until="jobflow_worker_up", timeout=30):
        """The exporter's /metrics once it has `until` in it."""
        deadline = time.time() + timeout
        body = ""
        while time.time() < deadline:
            try:
                body = get(self.url)
                if until in body:
                    return body
            except OSError:
                pass
            time.sleep(0.3)
        raise AssertionError("no %s from the exporter: %s\n%s" % (until, body[-1000:], self.tail()))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class Prometheus(_Process):
    """prometheus scraping targets every second and evaluating rule files
    every second, with its data under tmp_path."""

    def __init__(self, targets, tmp_path, rule_files=()):
        assert os.access(PROMETHEUS, os.X_OK), "prometheus is not installed"
        self.port = free_port()
        self.base = "http://127.0.0.1:%d" % self.port
        config = tmp_path / "prometheus.yml"
        config.write_text(json.dumps({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": list(rule_files),
            "scrape_configs": [{"job_name": "postgres",
                                "static_configs": [{"targets": list(targets)}]}]}))
        super().__init__([PROMETHEUS, "--config.file=%s" % config,
                          "--storage.tsdb.path=%s" % (tmp_path / "prometheus-data"),
                          "--web.listen-address=127.0.0.1:%d" % self.port,
                          "--web.enable-lifecycle"], tmp_path / "prometheus.log")
        deadline = time.time() + 60
        while True:
            try:
                get(self.base + "/-/ready")
                break
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    self.stop()
                    raise AssertionError("prometheus did not start:\n" + self.tail())
                time.sleep(0.3)

    def api(self, path, **params):
        url = "%s/api/v1/%s?%s" % (self.base, path, urllib.parse.urlencode(params))
        reply = json.loads(get(url, timeout=30))
        assert reply["status"] == "success", reply
        return reply["data"]

    def query(self, expr, at=None):
        """Instant query: the result vector (list of {metric, value})."""
        params = {"query": expr}
        if at is not None:
            params["time"] = at
        return self.api("query", **params)["result"]

    def query_range(self, expr, start, end, step):
        return self.api("query_range", query=expr, start=start, end=end, step=step)["result"]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
