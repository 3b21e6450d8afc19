# -------------------------------------------------------------------------
#
# test_metrics.py
#     Metrics (issue 10, item 4): jobflow.metrics() is Prometheus text that
#     Prometheus' own parser (prometheus_client) reads, with the lateness
#     histogram and outcomes by class moving with real callbacks; the view
#     jobflow.stats shows the same figures; jobflow_monitor (and so
#     pg_monitor) reads them and no task contents; the real
#     prometheus-postgres-exporter, given prometheus/jobflow_queries.yaml,
#     serves each figure of the test cluster as its own idiomatic series
#     (counters, gauges, histograms, labelled by database).
#     Outcomes of names that do not resolve count as dns and TLS failures
#     as tls (the test never asks a DNS server: the worker resolves through
#     jobflow.test_doh_url, a loopback port that answers nothing).  The
#     busiest origins show their requests in flight and queued, labelled
#     by origin alone.
#
# -------------------------------------------------------------------------

import http.server
import socket
import ssl
import subprocess
import threading
import time
import uuid

import psycopg2
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import query, schedule, wait_final
from promstack import Exporter


def one(conn, sql, args=None):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchone()[0]


def families(conn):
    """jobflow.metrics() parsed by Prometheus' parser: {name: family}."""
    return {f.name: f for f in text_string_to_metric_families(one(conn, "SELECT jobflow.metrics()"))}


def value(fams, family, sample, **labels):
    for s in fams[family].samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise KeyError((family, sample, labels))


def closed_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_metrics_follow_callbacks(db, receiver):
    """Three 2xx, one 4xx, one 5xx and one refused connection move the
    outcome classes and the lateness histogram by exactly that much."""
    before = families(db)
    ok, _ = receiver.unique_url("/ok")
    gone, _ = receiver.unique_url("/status/404")
    broken, _ = receiver.unique_url("/status/503")
    ids = [schedule(db, ok) for _ in range(3)]
    ids.append(schedule(db, gone, max_attempts=1))
    ids.append(schedule(db, broken, max_attempts=1))
    ids.append(schedule(db, "http://127.0.0.1:%d/x" % closed_port(), max_attempts=1))
    wait_final(db, ids)
    time.sleep(0.2)
    after = families(db)

    for cls, n in (("2xx", 3), ("4xx", 1), ("5xx", 1), ("connect", 1)):
        delta = (value(after, "jobflow_outcomes", "jobflow_outcomes_total", **{"class": cls})
                 - value(before, "jobflow_outcomes", "jobflow_outcomes_total", **{"class": cls}))
        assert delta == n, (cls, delta)

    assert after["jobflow_lateness_seconds"].type == "histogram"
    count = value(after, "jobflow_lateness_seconds", "jobflow_lateness_seconds_count")
    assert count - value(before, "jobflow_lateness_seconds", "jobflow_lateness_seconds_count") == 6
    buckets = [(s.labels["le"], s.value) for s in after["jobflow_lateness_seconds"].samples
               if s.name == "jobflow_lateness_seconds_bucket"]
    assert buckets[-1] == ("+Inf", count)
    assert [v for _, v in buckets] == sorted(v for _, v in buckets), buckets
    # the callbacks were due now: none of them more than 5 s late
    assert value(after, "jobflow_lateness_seconds", "jobflow_lateness_seconds_bucket", le="5.0") \
        - value(before, "jobflow_lateness_seconds", "jobflow_lateness_seconds_bucket", le="5.0") == 6
    for h in ("jobflow_claim_duration_seconds", "jobflow_flush_duration_seconds",
              "jobflow_loop_turn_seconds"):
        assert value(after, h, h + "_count") > value(before, h, h + "_count"), h
    assert value(after, "jobflow_fired", "jobflow_fired_total") \
        - value(before, "jobflow_fired", "jobflow_fired_total") == 6
    assert value(after, "jobflow_worker_up", "jobflow_worker_up") == 1


def test_workers_up_gauge_keeps_its_name(db):
    """The gauge of the running workers is jobflow_workers_up, as the
    operations guide names it: its value is jobflow.workers_per_database
    when all of them run."""
    per_db = int(one(db, "SHOW jobflow.workers_per_database"))
    deadline = time.time() + 10
    while True:
        fams = families(db)
        if "jobflow_workers_up" in fams and \
                value(fams, "jobflow_workers_up", "jobflow_workers_up") == per_db:
            break
        assert time.time() < deadline, sorted(n for n in fams if "up" in n)
        time.sleep(0.2)
    assert "jf_workers_up" not in fams


def outcome_deltas(before, after):
    return {s.labels["class"]: s.value - value(before, "jobflow_outcomes", "jobflow_outcomes_total",
                                               **{"class": s.labels["class"]})
            for s in after["jobflow_outcomes"].samples if s.name == "jobflow_outcomes_total"}


def test_unresolvable_name_counts_as_dns(db, server, receiver):
    """A host name that does not resolve is a dns outcome, not connect: the
    worker resolves through a DNS-over-HTTPS URL on a closed loopback port,
    so the lookup fails without any DNS server being asked."""
    server.set_guc(db, "jobflow.test_doh_url", "http://127.0.0.1:%d/dns-query" % closed_port())
    try:
        time.sleep(0.5)            # the worker applies it on its next turn
        before = families(db)
        tid = schedule(db, "http://no-such-host.invalid:%d/x" % receiver.port, max_attempts=1)
        wait_final(db, tid)
        time.sleep(0.2)
        after = families(db)
    finally:
        server.set_guc(db, "jobflow.test_doh_url", None)
        time.sleep(0.5)
    deltas = outcome_deltas(before, after)
    assert deltas["dns"] == 1, deltas
    assert sum(deltas.values()) == 1, deltas
    assert query(db, "SELECT state FROM jobflow.tasks WHERE id = %s", (tid,))[0]["state"] == "failed"


@pytest.fixture
def tls_server(tmp_path):
    """An HTTPS server on 127.0.0.1 with a self-signed certificate made for
    the test; yields (port, list of paths it served)."""
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-keyout", key, "-out", cert],
                   check=True, capture_output=True)
    served = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            served.append(self.path)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1], served
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_tls_failures_count_as_tls(db, receiver, tls_server):
    """https:// to a plain-HTTP server (no TLS handshake possible) and to a
    server whose certificate nobody signed are both tls outcomes."""
    tls_port, served = tls_server
    before = families(db)
    ids = [schedule(db, "https://127.0.0.1:%d/plain" % receiver.port, max_attempts=1),
           schedule(db, "https://127.0.0.1:%d/self-signed" % tls_port, max_attempts=1)]
    wait_final(db, ids)
    time.sleep(0.2)
    after = families(db)
    deltas = outcome_deltas(before, after)
    assert deltas["tls"] == 2, deltas
    assert sum(deltas.values()) == 2, deltas
    assert served == []
    errors = [r["last_error"] for r in
              query(db, "SELECT last_error FROM jobflow.tasks WHERE id = ANY(%s) ORDER BY id", (ids,))]
    assert "certificate" in errors[1].lower(), errors


def test_stats_view_has_the_same_figures(db, receiver):
    url, _ = receiver.unique_url("/ok")
    wait_final(db, schedule(db, url))
    time.sleep(0.2)
    fams = families(db)
    rows = {(r["metric"], r["labels"]): r["value"] for r in
            query(db, "SELECT metric, labels, value FROM jobflow.stats")}
    assert rows[("fired_total", None)] == value(fams, "jobflow_fired", "jobflow_fired_total")
    assert rows[("outcomes_total", 'class="2xx"')] == \
        value(fams, "jobflow_outcomes", "jobflow_outcomes_total", **{"class": "2xx"})
    assert rows[("lateness_seconds_count", None)] == \
        value(fams, "jobflow_lateness_seconds", "jobflow_lateness_seconds_count")
    # a bucket bound (infinity when an earlier test left tasks over 5 min late)
    assert rows[("lateness_seconds_p99", None)] in (
        0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300,
        float("inf"))
    assert all(r["description"] for r in query(db, "SELECT description FROM jobflow.stats"))


def test_monitor_reads_figures_not_tasks(db, monitor):
    """A pg_monitor member reads metrics(), stats and worker_status(), and
    no task contents: not tasks, task_log, failed_tasks or cron timers."""
    with db.cursor() as cur:
        cur.execute("SET ROLE %s" % monitor)
        try:
            cur.execute("SELECT jobflow.metrics()")
            assert "jobflow_lateness_seconds_bucket" in cur.fetchone()[0]
            cur.execute("SELECT count(*) FROM jobflow.stats")
            assert cur.fetchone()[0] > 10
            cur.execute("SELECT pid FROM jobflow.worker_status()")
            for sql in ("SELECT url FROM jobflow.tasks", "SELECT response FROM jobflow.task_log",
                        "SELECT url FROM jobflow.failed_tasks", "SELECT url FROM jobflow.cron_timers",
                        "SELECT jobflow.schedule('http://127.0.0.1:9/x')"):
                with pytest.raises(psycopg2.errors.InsufficientPrivilege):
                    cur.execute(sql)
        finally:
            cur.execute("RESET ROLE")


def host_gauges(fams):
    """{(family, origin label): value} of the busiest-origin gauges."""
    out = {}
    for fam in ("jobflow_host_requests_in_flight", "jobflow_host_requests_queued"):
        assert fams[fam].type == "gauge"
        for s in fams[fam].samples:
            assert set(s.labels) == {"origin"}, s.labels
            out[(fam, s.labels["origin"])] = s.value
    return out


def test_busiest_hosts_in_flight_and_queued(db, server, receiver, monitor):
    """With jobflow.max_requests_per_host = 3, eight hanging callbacks to one
    origin show as 3 in flight and 5 queued there, two to another origin as
    2 and 0; labels are origins (no path, query or tag); a pg_monitor member
    sees the same in jobflow.stats; once everything ended the origins go."""
    server.set_guc(db, "jobflow.max_requests_per_host", 3)
    time.sleep(0.5)
    busy = "http://127.0.0.1:%d" % receiver.port
    other = "http://localhost:%d" % receiver.port
    want = {("jobflow_host_requests_in_flight", busy): 3, ("jobflow_host_requests_queued", busy): 5,
            ("jobflow_host_requests_in_flight", other): 2, ("jobflow_host_requests_queued", other): 0}
    try:
        hang, tag = receiver.unique_url("/hang")
        ids = [schedule(db, hang, timeout_ms=4000, max_attempts=1) for _ in range(8)]
        hang2, _ = receiver.unique_url("/hang", host="localhost")
        ids += [schedule(db, hang2, timeout_ms=4000, max_attempts=1) for _ in range(2)]
        seen = None
        deadline = time.time() + 3.5
        while time.time() < deadline:
            text = one(db, "SELECT jobflow.metrics()")
            seen = host_gauges({f.name: f for f in text_string_to_metric_families(text)})
            if seen == want:
                break
            time.sleep(0.1)
        assert seen == want, seen
        assert tag not in text and "/hang" not in text
        # the busier origin first, in the text as in the view
        assert text.index('jobflow_host_requests_in_flight{origin="%s"}' % busy) < \
            text.index('jobflow_host_requests_in_flight{origin="%s"}' % other)
        with db.cursor() as cur:
            cur.execute("SET ROLE %s" % monitor)
            try:
                rows = {(r["metric"], r["labels"]): r["value"] for r in query(
                    db, "SELECT metric, labels, value FROM jobflow.stats WHERE metric LIKE 'host\\_%'")}
            finally:
                cur.execute("RESET ROLE")
        assert rows.get(("host_requests_in_flight", 'origin="%s"' % busy)) in (3, 2, 1, 0), rows
        assert rows.get(("host_requests_queued", 'origin="%s"' % busy)) in (5, 4, 3, 2), rows
    finally:
        server.set_guc(db, "jobflow.max_requests_per_host", None)
    wait_final(db, ids, timeout=20)
    deadline = time.time() + 5
    while time.time() < deadline and seen:
        seen = {k: v for k, v in host_gauges(families(db)).items() if k[1] in (busy, other)}
        time.sleep(0.2)
    assert seen == {}, seen


def exported(body):
    """{(sample name, frozenset of labels): (value, family type)} of the
    exporter's jobflow series, parsed by Prometheus' own parser."""
    out = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            if s.name.startswith("jobflow_"):
                out[(s.name, frozenset(s.labels.items()))] = (s.value, fam.type)
    return out


def test_exporter_serves_idiomatic_series(db, receiver, monitor, tmp_path):
    """The Debian package's prometheus-postgres-exporter, run against the
    test cluster as a pg_monitor member with prometheus/jobflow_queries.yaml,
    serves one series per figure of jobflow.stats, named and labelled as
    jobflow.metrics() names them plus database: counters as counters,
    gauges as gauges (per queue, per origin, per worker, by reason), the
    four histograms as histograms with cumulative buckets whose +Inf is
    their _count; no packed jobflow_counter_value/jobflow_gauge_value."""
    ok, _ = receiver.unique_url("/ok")
    broken, _ = receiver.unique_url("/status/503")
    queue = "q_%s" % uuid.uuid4().hex[:8]
    wait_final(db, [schedule(db, ok), schedule(db, broken, max_attempts=1)])
    one(db, "SELECT jobflow.pause_queue(%s)", (queue,))
    late = schedule(db, ok, queue=queue, run_at_sql="now() - interval '1 minute'")
    with db.cursor() as cur:
        cur.execute("ALTER ROLE %s LOGIN" % monitor)
    dbname = one(db, "SELECT current_database()")
    try:
        with Exporter(monitor, tmp_path) as exporter:
            # the queue's backlog is in the figures once the exporter has it
            body = exporter.scrape(until='queue="%s"' % queue)
            rows = query(db, "SELECT metric, label_set, value FROM jobflow.stats")
    finally:
        one(db, "SELECT jobflow.cancel(%s)", (late,))
        one(db, "SELECT jobflow.drop_queue(%s)", (queue,))
    series = exported(body)
    assert not any(name.startswith(("jobflow_counter", "jobflow_gauge")) for name, _ in series)

    def labels(name):
        return [dict(k) for n, k in series if n == name]

    def get(name, **want):
        hits = [v for (n, k), v in series.items() if n == name and
                all(dict(k).get(a) == b for a, b in want.items())]
        assert len(hits) == 1, (name, want, hits)
        return hits[0]

    # every series carries the database; the exporter adds its server
    assert all(dict(k)["database"] == dbname and "server" in dict(k) for _, k in series)
    assert '# TYPE jobflow_lateness_seconds histogram' in body
    assert '# TYPE jobflow_fired_total counter' in body
    assert get("jobflow_fired_total")[1] == "counter"
    assert get("jobflow_fired_total")[0] >= 2
    assert get("jobflow_outcomes_total", **{"class": "5xx"}) >= (1, "counter")
    assert get("jobflow_worker_up") == (1, "gauge")
    assert get("jobflow_worker_held", reason="update") == (0, "gauge")
    assert get("jobflow_worker_last_turn_timestamp_seconds", worker="0")[0] > time.time() - 60
    assert get("jobflow_queue_paused", queue=queue) == (1, "gauge")
    assert get("jobflow_queue_overdue", queue=queue) == (1, "gauge")
    assert get("jobflow_queue_oldest_overdue_seconds", queue=queue)[0] >= 59
    assert get("jobflow_queue_pending", queue=queue)[0] == 1
    assert {"database", "server", "owner", "queue"} == set(labels("jobflow_queue_dead_letters")[0])
    for h in ("jobflow_lateness_seconds", "jobflow_claim_duration_seconds",
              "jobflow_flush_duration_seconds", "jobflow_loop_turn_seconds"):
        assert "# TYPE %s histogram" % h in body, h
        buckets = sorted((float(dict(k)["le"]), v) for (n, k), (v, _) in series.items()
                         if n == h + "_bucket")
        assert [le for le, _ in buckets] == [0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                             0.5, 1, 2.5, 5, 10, 30, 60, 300, float("inf")], h
        counts = [v for _, v in buckets]
        assert counts == sorted(counts), (h, counts)
        assert counts[-1] == get(h + "_count")[0] and get(h + "_sum")[0] >= 0, h
    assert get("jobflow_lateness_seconds_count")[0] >= 2

    # one series per row of jobflow.stats (its p50/p99 rows are the
    # histogram's, for psql), with the same labels
    want = set()
    for r in rows:
        if r["metric"].endswith(("_p50", "_p99")):
            continue
        lab = dict(r["label_set"], database=dbname)
        if "le" in lab:
            lab["le"] = float(lab["le"])
        want.add(("jobflow_" + r["metric"], frozenset(lab.items())))
    got = set()
    for name, k in series:
        lab = {a: b for a, b in k if a != "server"}
        if "le" in lab:
            lab["le"] = float(lab["le"])
        got.add((name, frozenset(lab.items())))
    assert got == want, (sorted(got - want), sorted(want - got))
    stats = {r["metric"]: r["value"] for r in rows if not r["label_set"]}
    assert get("jobflow_fired_total")[0] == stats["fired_total"]
