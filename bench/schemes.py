# -------------------------------------------------------------------------
#
# schemes.py
#     The schemes phase of bench/dispatcher.py (BENCH_PHASES=schemes): W1
#     (100 tasks/s, scheduled by one INSERT ... SELECT 3 s ahead) and W2
#     (BURST_TASKS due at one instant, default caps) over plain HTTP, over
#     HTTPS and over HTTPS offering HTTP/2, against the one nginx of the run
#     (bench/nginx.sh: three listeners, a test CA the cluster trusts with
#     jobflow.tls_ca_file).  Rounds alternate the order (http https h2, then
#     h2 https http, ...) so that a drift of the machine weighs on every
#     scheme alike; each W2 starts after a VACUUM of the tables, and an
#     unmeasured burst comes first when none has run yet.  The
#     tables print each run, then the medians with every HTTPS figure next
#     to plain HTTP's and W2's ratio to it.
#
#     BENCH_SCHEMES (default http,https,h2), BENCH_SCHEME_ROUNDS (2).  A
#     build without jobflow.tls_ca_file (0.1.0) runs plain HTTP only.
#
# -------------------------------------------------------------------------

import os
import statistics
import time


def median(vals):
    """The median, as an int when it is one (the printed tables' format
    tells ints from ratios)."""
    vals = [v for v in vals if v is not None and not isinstance(v, str)]
    if not vals:
        return None
    m = statistics.median(vals)
    if isinstance(m, float) and m.is_integer() and all(isinstance(v, int) for v in vals):
        return int(m)
    return round(m, 1) if abs(m) >= 10 else round(m, 3)


def ratio(a, b):
    return round(a / b, 2) if a is not None and b else None


def run_schemes(b):
    """b: the dispatcher module (steady_set, burst, q, table, ...)."""
    schemes = [s for s in os.environ.get("BENCH_SCHEMES", "http,https,h2").split(",") if s]
    rounds = int(os.environ.get("BENCH_SCHEME_ROUNDS", "2"))
    notes = []
    unknown = [s for s in schemes if s not in ("http", "https", "h2")]
    if unknown:
        raise SystemExit("unknown scheme(s) %s (BENCH_SCHEMES: http, https, h2)" % ", ".join(unknown))
    if not b.has_setting("jobflow.tls_ca_file") or not b.CA_FILE:
        if schemes != ["http"]:
            notes.append("https, h2: n/a (this build has no jobflow.tls_ca_file to trust the test CA)")
        schemes = ["http"]
    mc, ph = b.BURST_CONFIGS[0]
    b.warm_up()
    runs = []
    for i in range(rounds):
        for scheme in (schemes if i % 2 == 0 else schemes[::-1]):
            b.q("VACUUM jobflow.tasks")
            b.q("VACUUM jobflow.task_log")
            tag = "w1-%s-%d" % (scheme, i + 1)
            b.progress("%s: W1, %d tasks/s for %d s" % (tag, b.STEADY_RATE, b.STEADY_SECONDS))
            n, entries, states, note = b.steady_set(tag, scheme)
            w1 = dict(b.steady_figures(entries), **b.conn_figures(entries))
            w1["succeeded"] = states["succeeded"]
            b.q("VACUUM jobflow.tasks")
            b.q("VACUUM jobflow.task_log")
            w2 = b.burst("w2-%s-%d" % (scheme, i + 1), mc, ph, False, scheme)
            runs.append({"scheme": scheme, "round": i + 1, "w1": w1, "w2": w2})
            time.sleep(1)
    for name in ("max_concurrent_requests", "max_requests_per_host"):
        b.q("ALTER SYSTEM RESET jobflow.%s" % name)
    b.q("SELECT pg_reload_conf()")

    def http_w2(rnd):
        for r in runs:
            if r["scheme"] == "http" and r["round"] == rnd:
                return r["w2"]["rate"]
        return None

    rows = []
    for r in runs:
        w = r["w1"]
        rows.append([r["scheme"], r["round"], w["arrived"], w["succeeded"], w["p50"], w["p90"], w["p99"],
                     w["max"], w["conns"], w["new_conns"], w["resumed"], w["retried"], w["non200"],
                     ",".join(w["protocols"])])
    b.table("6a. W1 by scheme: %d tasks/s for %d s, one INSERT ... SELECT 3 s ahead; lateness (ms)"
            % (b.STEADY_RATE, b.STEADY_SECONDS),
            ["scheme", "round", "arrived", "succeeded", "p50", "p90", "p99", "max", "conns", "new",
             "resumed", "retried", "non-200", "protocol"], rows,
            ["new: connections first seen in this run (a TCP, and for https a TLS, handshake);"
             " resumed: of those, TLS sessions resumed ($ssl_session_reused)",
             "retried: arrivals of an attempt after the first"])

    rows = []
    for r in runs:
        w = r["w2"]
        rows.append([r["scheme"], r["round"], w["arrived"], w["succeeded"], w["first"], w["last"], w["rate"],
                     ratio(w["rate"], http_w2(r["round"])) if r["scheme"] != "http" else "",
                     w["final_ms"], w["conns"], w["new_conns"], w["resumed"], w["retried"],
                     w["stmt_per_cb"], w["cpu_us_per_cb"], ",".join(w["protocols"])])
    b.table("6b. W2 by scheme: %d tasks due at one instant, caps %d/%d" % (b.BURST_TASKS, mc, ph),
            ["scheme", "round", "arrived", "succeeded", "first ms", "last ms", "cb/s", "/ http",
             "all final ms", "conns", "new", "resumed", "retried", "stmt/cb", "cpu us/cb", "protocol"], rows,
            ["cb/s = arrivals / (last - first); / http: cb/s over plain HTTP's in the same round;"
             " new: connections first seen in this burst",
             "cpu: the worker process's user+system time per callback"])
    for r in runs:
        for outcome, st, err, c in r["w2"]["errors"]:
            print("  W2 %s round %d: %d attempt(s) %s, status %s: %s"
                  % (r["scheme"], r["round"], c, outcome, st, err))

    rows = []
    summary = {}
    for scheme in schemes:
        mine = [r for r in runs if r["scheme"] == scheme]
        m = {k: median([r["w1"][k] for r in mine]) for k in ("p50", "p99", "max", "retried")}
        m.update({"w2_" + k: median([r["w2"][k] for r in mine])
                  for k in ("rate", "new_conns", "resumed", "retried", "cpu_us_per_cb")})
        summary[scheme] = m
    base = summary.get("http", {})
    for scheme in schemes:
        m = summary[scheme]
        rows.append([scheme, m["p50"], m["p99"], m["max"], m["retried"],
                     base.get("p50"), base.get("p99"), base.get("max"),
                     m["w2_rate"], base.get("w2_rate"),
                     ratio(m["w2_rate"], base.get("w2_rate")),
                     m["w2_new_conns"], m["w2_resumed"], m["w2_retried"], m["w2_cpu_us_per_cb"]])
    rows.append(["[goal]", "", "<=3", "<=10", "0", "", "", "", "", "", ">=0.8", "", "", "0", ""])
    b.table("6. HTTPS vs plain HTTP in the same run: medians of %d round(s)" % rounds,
            ["scheme", "W1 p50", "W1 p99", "W1 max", "W1 retried", "http p50", "http p99", "http max",
             "W2 cb/s", "http cb/s", "W2 / http", "W2 new conns", "resumed", "W2 retried",
             "W2 cpu us/cb"], rows,
            notes + ["W1 lateness in ms at the receiver (p50, p99, max) next to plain HTTP's;"
                     " W2 / http: HTTPS cb/s over plain HTTP cb/s",
                     "h2: https to the listener offering HTTP/2 (ALPN); new conns: connections"
                     " first seen in the burst; resumed: of those, TLS sessions resumed"])
    b.RESULTS["schemes"] = {"rounds": rounds, "median": summary,
                            "runs": [{"scheme": r["scheme"], "round": r["round"], "w1": r["w1"],
                                      "w2": {k: r["w2"][k] for k in
                                             ("rate", "retried", "new_conns", "conns", "resumed",
                                              "cpu_us_per_cb", "stmt_per_cb", "final_ms")}}
                                     for r in runs]}
