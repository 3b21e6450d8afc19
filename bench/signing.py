# -------------------------------------------------------------------------
#
# signing.py
#     The signing phase of bench/dispatcher.py (BENCH_PHASES=signing): the
#     cost of Standard Webhooks signatures.  The W2 burst (BURST_TASKS tasks
#     due at one instant, default caps) runs alternately with signing off
#     and on (the bench role with a signing secret), twice each, in the
#     same run and cluster, each after a VACUUM of the tables (so that dead
#     rows of the earlier bursts weigh on none); the table shows throughput
#     at the receiver, the time until every outcome is written, and the
#     worker's CPU per callback.
#
# -------------------------------------------------------------------------

import time


def run_signing(b, rounds=2):
    """b: the dispatcher module (burst, q, table, BURST_CONFIGS, ...)."""
    mc, ph = b.BURST_CONFIGS[0]
    results = []
    b.q("SELECT jobflow.revoke_signing_secret()")
    for i in range(rounds):
        for signed in (False, True):
            # every burst starts from the same table: earlier bursts' dead
            # rows and index entries would slow the later ones down
            b.q("VACUUM jobflow.tasks")
            b.q("VACUUM jobflow.task_log")
            if signed:
                b.q("SELECT jobflow.create_signing_secret()")
            tag = "sign-%s-%d" % ("on" if signed else "off", i + 1)
            r = b.burst(tag, mc, ph, False)
            if signed:
                b.q("SELECT jobflow.revoke_signing_secret()")
            r["signed"] = signed
            results.append(r)
            time.sleep(1)
    q_reset = "ALTER SYSTEM RESET jobflow.%s"
    for name in ("max_concurrent_requests", "max_requests_per_host"):
        b.q(q_reset % name)
    b.q("SELECT pg_reload_conf()")

    rows = [["on" if r["signed"] else "off", r["arrived"], r["succeeded"], r["first"], r["last"],
             r["rate"], r["final_ms"], r["cpu_us_per_cb"]] for r in results]
    for signed in (False, True):
        mine = [r for r in results if r["signed"] == signed]
        rows.append(["mean " + ("on" if signed else "off"), "", "", "", "",
                     round(sum(r["rate"] or 0 for r in mine) / len(mine)),
                     round(sum(r["final_ms"] or 0 for r in mine) / len(mine)),
                     round(sum(r["cpu_us_per_cb"] or 0 for r in mine) / len(mine))])
    b.table("S. Signing: W2 burst of %d tasks (caps %d/%d), Standard Webhooks signing off vs on"
            % (b.BURST_TASKS, mc, ph),
            ["signing", "arrived", "succeeded", "first ms", "last ms", "cb/s", "all final ms",
             "cpu us/cb"], rows,
            ["alternating off/on in one run, VACUUM before each; on = one HMAC-SHA256 secret"
             " for the bench role;"
             " cb/s = arrivals / (last - first); cpu: the worker process"])
