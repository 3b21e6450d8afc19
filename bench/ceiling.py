# -------------------------------------------------------------------------
#
# ceiling.py
#     The ceiling phase of bench/dispatcher.py (BENCH_PHASES=ceiling): how
#     far W2 and jobflow's HTTP layer are from what the machine's HTTP
#     allows, in the same run, against the same nginx, at the same
#     concurrency (the default per-host cap, 64, at which W2's default
#     burst runs):
#
#       wrk        the Debian package's load generator: -c CONC
#                  connections, -t BENCH_WRK_THREADS (1), for
#                  BENCH_WRK_SECONDS (5), POST with a small JSON body as
#                  bench_http sends;
#       layer      bench/bench_http: src/http/ (libcurl multi) alone in a
#                  plain process, BURST_TASKS requests, CONC at a time;
#       W2         the burst (BURST_TASKS due at one instant, caps
#                  512/64) through the worker, with its statements per
#                  callback.
#
#     One thread for wrk: the machine has two cores, and nginx's one
#     worker takes one of them; jobflow's worker and bench_http are single
#     threads too, so each client gets the other core.  A second wrk
#     thread would only contend with nginx.
#
#     Plain HTTP, and HTTPS when the build trusts the test CA
#     (BENCH_CEILING_SCHEMES, default http,https; wrk speaks no HTTP/2).
#     Rounds (BENCH_CEILING_ROUNDS, 2) alternate the order of the three.
#     Each client's CPU time per request (rusage of the child, or /proc
#     of the worker) and nginx's are printed too: who is saturated.
#
# -------------------------------------------------------------------------

import os
import re
import resource
import subprocess
import time

from schemes import median, ratio

WRK_SCRIPT = """wrk.method = "POST"
wrk.body = '{"bench": true}'
wrk.headers["Content-Type"] = "application/json"
"""


def nginx_workers(b):
    pid = int(os.environ["NGINX_PID"])
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def nginx_cpu(b):
    return sum(b.cpu_seconds(p) for p in nginx_workers(b))


def run_wrk(b, scheme, conc, seconds, threads):
    script = os.path.join(b.NGINX_DIR, "wrk-post.lua")
    with open(script, "w") as f:
        f.write(WRK_SCRIPT)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(["wrk", "-t%d" % threads, "-c%d" % conc, "-d%ds" % seconds, "-s", script,
                          b.base_url(scheme) + "/wrk/" + scheme],
                         capture_output=True, text=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out.stdout)
    total = re.search(r"(\d+) requests in", out.stdout)
    if out.returncode != 0 or rate is None or total is None:
        print("wrk failed: %s %s" % (out.stdout.strip(), out.stderr.strip()))
        return None
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out.stdout)
    errs = re.search(r"Socket errors: (.*)", out.stdout)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    n = int(total.group(1))
    return {"rate": round(float(rate.group(1))), "n": n, "cpu_us": round(cpu * 1e6 / n) if n else None,
            "non2xx": int(bad.group(1)) if bad else 0, "socket_errors": errs.group(1) if errs else ""}


def run_ceiling(b):
    """b: the dispatcher module (burst, http_alone, q, table, ...)."""
    schemes = [s for s in os.environ.get("BENCH_CEILING_SCHEMES", "http,https").split(",") if s]
    rounds = int(os.environ.get("BENCH_CEILING_ROUNDS", "2"))
    threads = int(os.environ.get("BENCH_WRK_THREADS", "1"))
    seconds = int(os.environ.get("BENCH_WRK_SECONDS", "5"))
    notes = []
    if "h2" in schemes:
        raise SystemExit("BENCH_CEILING_SCHEMES: wrk speaks HTTP/1.1 only (http, https)")
    if not b.has_setting("jobflow.tls_ca_file") or not b.CA_FILE:
        if schemes != ["http"]:
            notes.append("https: n/a (this build has no jobflow.tls_ca_file to trust the test CA)")
        schemes = ["http"]
    mc, conc = b.BURST_CONFIGS[0]
    b.warm_up()
    runs = []
    for i in range(rounds):
        for scheme in (schemes if i % 2 == 0 else schemes[::-1]):
            r = {"scheme": scheme, "round": i + 1}
            order = ("wrk", "layer", "w2") if i % 2 == 0 else ("w2", "layer", "wrk")
            for what in order:
                n0 = nginx_cpu(b)
                if what == "wrk":
                    b.progress("ceiling %s round %d: wrk -t%d -c%d -d%ds" % (scheme, i + 1, threads, conc, seconds))
                    got = run_wrk(b, scheme, conc, seconds, threads)
                    n = got["n"] if got else 0
                elif what == "layer":
                    b.progress("ceiling %s round %d: bench_http, %d requests, %d at a time"
                               % (scheme, i + 1, b.BURST_TASKS, conc))
                    got = b.http_alone(conc, scheme)
                    n = b.BURST_TASKS
                else:
                    b.q("VACUUM jobflow.tasks")
                    b.q("VACUUM jobflow.task_log")
                    n0 = nginx_cpu(b)
                    got = b.burst("ceil-%s-%d" % (scheme, i + 1), mc, conc, False, scheme)
                    n = got["arrived"]
                r[what] = got
                r[what + "_nginx_us"] = round((nginx_cpu(b) - n0) * 1e6 / n) if got and n else None
                time.sleep(1)
            runs.append(r)
    for name in ("max_concurrent_requests", "max_requests_per_host"):
        b.q("ALTER SYSTEM RESET jobflow.%s" % name)
    b.q("SELECT pg_reload_conf()")

    def fig(r):
        wrk, layer, w2 = r.get("wrk"), r.get("layer"), r.get("w2")
        return {"wrk": wrk["rate"] if wrk else None,
                "layer": layer["rate"] if layer else None,
                "w2": w2["rate"] if w2 else None,
                "stmt_per_cb": w2["stmt_per_cb"] if w2 else None,
                "wrk_cpu": wrk["cpu_us"] if wrk else None,
                "layer_cpu": layer["cpu_us"] if layer else None,
                "w2_cpu": w2["cpu_us_per_cb"] if w2 else None,
                "wrk_nginx": r["wrk_nginx_us"], "layer_nginx": r["layer_nginx_us"],
                "w2_nginx": r["w2_nginx_us"]}

    def row(label, rnd, f):
        return [label, rnd, f["wrk"], f["layer"], ratio(f["layer"], f["wrk"]), f["w2"],
                ratio(f["w2"], f["layer"]), f["stmt_per_cb"], ratio(f["w2"], f["wrk"])]

    rows = []
    summary = {}
    for r in runs:
        rows.append(row(r["scheme"], r["round"], fig(r)))
    for scheme in schemes:
        mine = [fig(r) for r in runs if r["scheme"] == scheme]
        m = {k: median([f[k] for f in mine]) for k in mine[0]}
        summary[scheme] = m
        rows.append(row("median " + scheme, "", m))
    rows.append(["[goal]", "", "", "", ">=0.5", "", ">=0.7", "<=0.01", ""])
    b.table("7. Toward the ceiling, same run, same nginx, concurrency %d: wrk vs the HTTP layer vs W2"
            % conc,
            ["scheme", "round", "wrk req/s", "layer req/s", "layer / wrk", "W2 cb/s", "W2 / layer",
             "stmt/cb", "W2 / wrk"], rows,
            notes + ["wrk: -t%d -c%d -d%ds, POST with a 15-byte JSON body (one thread: 2 cores,"
                     " nginx's worker on the other); layer: bench/bench_http (src/http/, no database),"
                     " %d requests, %d at a time" % (threads, conc, seconds, b.BURST_TASKS, conc),
                     "W2: %d tasks due at one instant, caps %d/%d, cb/s = arrivals / (last - first);"
                     " stmt/cb: the worker's statements per callback (worker_status())"
                     % (b.BURST_TASKS, mc, conc)])

    rows = []
    for r in runs:
        f = fig(r)
        rows.append([r["scheme"], r["round"], f["wrk_cpu"], f["wrk_nginx"], f["layer_cpu"], f["layer_nginx"],
                     f["w2_cpu"], f["w2_nginx"]])
    b.table("7b. CPU time per request (us): each client, and nginx serving it",
            ["scheme", "round", "wrk", "nginx", "layer", "nginx", "W2 worker", "nginx"], rows,
            ["clients: user+system from rusage (wrk, bench_http) or /proc (the worker);"
             " nginx: its worker process over the same interval"])
    for r in runs:
        if r.get("wrk") and (r["wrk"]["non2xx"] or r["wrk"]["socket_errors"]):
            print("  wrk %s round %d: %d non-2xx, socket errors: %s"
                  % (r["scheme"], r["round"], r["wrk"]["non2xx"], r["wrk"]["socket_errors"] or "none"))
        if r.get("layer") and r["layer"]["failed"]:
            print("  bench_http %s round %d: %d failed" % (r["scheme"], r["round"], r["layer"]["failed"]))
        if r.get("w2"):
            for outcome, st, err, c in r["w2"]["errors"]:
                print("  W2 %s round %d: %d attempt(s) %s, status %s: %s"
                      % (r["scheme"], r["round"], c, outcome, st, err))
    b.RESULTS["ceiling"] = {"concurrency": conc, "wrk_threads": threads, "median": summary,
                            "runs": [dict(fig(r), scheme=r["scheme"], round=r["round"]) for r in runs]}
