# -------------------------------------------------------------------------
#
# test_boundary_review25.py
#     A review of issue 25 items 3 to 7 (cron overlap, run_cron_now and
#     cron_preview, circuits per (owner, origin), quiet logging, mutual
#     TLS) as merged, tried as a hostile tenant and a careless operator
#     would.  What the review found, each test failing on the code
#     reviewed (main at ecfa333):
#       - quiet logging lost a request that left the machine: with
#         log_attempts = failures, a first-attempt success writes no log
#         row because the task's row records it; a task deleted (or
#         otherwise no longer running) while its request was in flight
#         has no row to record it, and its success vanished without a
#         trace, where "all" logs it (log_writer.c);
#       - one tenant blinded jobflow.endpoints and explain() for every
#         other: a worker publishes 64 circuits, and a tenant whose
#         requests fail at 64 origins of its own filled all 64; another
#         tenant's open circuit, holding its tasks, was then in neither
#         (core/circuit.c, jf_circuits_list);
#       - the same tenant silenced the other's circuit notifications: a
#         worker kept 64 circuit changes between two turns and dropped
#         the rest, and 600 circuits of one tenant opening together left
#         no "circuit:open:..." for another tenant whose circuits opened
#         in the same turns (worker/dispatch.c, note_change);
#       - a tenant calling reset_circuit() in a loop (on origins of its
#         own, or any text that is an origin) filled the 16 places for
#         resets waiting for the worker, and another tenant's (or an
#         administrator's) reset_circuit() failed with "too many circuit
#         resets are waiting" (api/circuits.c);
#       - reset_circuit() quoted a text that is no origin back raw into
#         its error, newlines included: a forged line in the server log.
#     What held, tried by hand or by the tests of each item: another
#     tenant's certificate by name, or its own copy of a public certificate
#     with another key on a pooled connection (the blob carries owner and
#     key digest); origin matching with ports, case, userinfo and
#     redirects; keys in rows, views, errors, dumps; another tenant's
#     circuits, endpoints rows, resets, queues' log_attempts and timers
#     (run_cron_now answers as for a missing name, control characters
#     refused); cron_preview with n over 1000, POSIX and odd zones, days no
#     month has; the worker's own updates of a timer (skipped) run without
#     the row triggers, so a timer made invalid since cannot fail a claim.
#
# -------------------------------------------------------------------------

import socket
import threading
import time
import uuid

import psycopg2
import pytest

from conftest import call, notifications, query, schedule, task_log, wait_final
from test_circuits import as_tenant, circuits, endpoints  # noqa: F401 (a fixture)


def wait_running(conn, task_id, timeout=10.0):
    deadline = time.time() + timeout
    while call(conn, "SELECT state::text FROM jobflow.tasks WHERE id = %s",
               (task_id,)) != "running":
        assert time.time() < deadline, "task %d never ran" % task_id
        time.sleep(0.02)


@pytest.mark.parametrize("mode", ["all", "failures"])
def test_quiet_logging_keeps_a_success_whose_task_row_is_gone(db, receiver, mode):
    """A task deleted by an operator while its request is in flight: the
    request went out and was answered 200; with either log_attempts the
    attempt is in jobflow.task_log, since no task row can say it."""
    queue = "rv25-" + uuid.uuid4().hex[:10]
    call(db, "SELECT jobflow.set_queue(%s, log_attempts => %s)", (queue, mode))
    try:
        url, tag = receiver.unique_url("/delay/1500")
        task_id = schedule(db, url, queue=queue)
        wait_running(db, task_id)
        call(db, "DELETE FROM jobflow.tasks WHERE id = %s", (task_id,))
        deadline = time.time() + 10
        while not task_log(db, task_id) and time.time() < deadline:
            time.sleep(0.1)
        rows = task_log(db, task_id)
        assert [(r["attempt"], r["outcome"], r["http_status"]) for r in rows] == \
            [(1, "succeeded", 200)], rows
        assert len(receiver.tagged(tag)) == 1
    finally:
        call(db, "SELECT jobflow.drop_queue(%s)", (queue,))


def closed_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()                        # nothing listens there now
    return port


def test_a_tenant_cannot_hide_another_tenants_circuits(db, server, connect, new_role, circuits):
    """Tenant A's requests fail at 600 origins of its own (refused
    connections on loopback addresses), due at the same moment as tenant
    B's that fail at 3: 603 circuits open.  B's jobflow.endpoints shows
    B's 3 open circuits, explain() of B's held task says why it waits,
    and B hears on its outcome channel of each of its circuits opening."""
    circuits(600)                       # no probe within the test
    a, b = new_role(), new_role()
    listener = connect(user=b)
    channel = query(listener, "SELECT jobflow.listen_outcomes() AS c")[0]["c"]
    port = closed_port()
    at = call(db, "SELECT now() + interval '2 s'")
    try:
        a_ids = as_tenant(db, a, query,
                          "SELECT jobflow.schedule(pg_catalog.format('http://127.0.%%s.%%s:%%s/a',"
                          "       10 + i / 200, 1 + i %% 200, %s), run_at => %s,"
                          "       max_attempts => 1) AS id"
                          "  FROM generate_series(0, 599) o(i), generate_series(1, 3) k",
                          (port, at))
        b_origins = ["http://127.0.9.%d:%d" % (i, port) for i in (1, 2, 3)]
        b_ids = [as_tenant(db, b, schedule, "%s/b?%d" % (o, k), run_at=at, max_attempts=1)
                 for o in b_origins for k in range(3)]
        states = wait_final(db, [r["id"] for r in a_ids] + b_ids, timeout=120)
        assert set(states.values()) == {"failed"}
        held = as_tenant(db, b, schedule, b_origins[0] + "/held", max_attempts=1)
        deadline = time.time() + 10
        while True:
            mine = sorted(r["origin"] for r in endpoints(db, b) if r["state"] == "open")
            if mine == b_origins or time.time() > deadline:
                break
            time.sleep(0.2)
        said = [n.payload for n in notifications(listener, 1.5) if n.channel == channel]
        print("A's circuits shown to A: %d; B's open ones shown to B: %d; told to B: %s"
              % (len(endpoints(db, a)), len(mine), said))
        assert mine == b_origins
        reasons = as_tenant(db, b, query, "SELECT reason FROM jobflow.explain(%s)", (held,))
        assert "circuit_open" in [r["reason"] for r in reasons], reasons
        assert sorted(said) == ["circuit:open:" + o for o in b_origins]
    finally:
        # the worker forgets every circuit, the other tests' views stay clear
        server.set_guc(db, "jobflow.circuit_failures", 0)
        time.sleep(0.5)


def test_a_tenant_resetting_in_a_loop_does_not_refuse_anothers_reset(db, connect, new_role):
    """Tenant A resets circuits of 50 origins of its own as fast as it
    can, errors ignored; meanwhile every reset_circuit() of tenant B
    goes through."""
    a, b = new_role(), new_role()
    spammer = connect(user=a)
    done = threading.Event()

    def spam():
        try:
            with spammer.cursor() as cur:
                cur.execute("DO $$ BEGIN FOR i IN 1..200000 LOOP BEGIN"
                            " PERFORM jobflow.reset_circuit('http://a' || i % 50 || '.example');"
                            " EXCEPTION WHEN others THEN NULL; END; END LOOP; END $$")
        except psycopg2.Error:
            pass                        # cancelled at the end
        finally:
            done.set()
    thread = threading.Thread(target=spam, daemon=True)
    thread.start()
    refused = 0
    calls = 0
    victim = connect(user=b)
    try:
        time.sleep(0.5)
        while calls < 60 and not done.is_set():
            try:
                call(victim, "SELECT jobflow.reset_circuit('http://127.0.0.1:1')")
            except psycopg2.errors.ObjectNotInPrerequisiteState:
                refused += 1
            calls += 1
            time.sleep(0.02)
    finally:
        spammer.cancel()
        thread.join(30)
    print("B's resets refused: %d of %d" % (refused, calls))
    assert calls >= 20, "the loop of A ended too soon to tell"
    assert refused == 0


def test_reset_circuit_does_not_quote_control_characters(db, new_role):
    """An origin with a line feed and a forged log line in it: the error
    says it is no origin, without the text."""
    role = new_role()
    with db.cursor() as cur:
        cur.execute("SET ROLE %s" % role)
        try:
            for given in ("no origin\n2026-01-01 00:00:00 UTC [1] LOG:  forged",
                          "x" * 5000):
                with pytest.raises(psycopg2.errors.InvalidParameterValue) as err:
                    cur.execute("SELECT jobflow.reset_circuit(%s)", (given,))
                message = err.value.diag.message_primary
                assert "\n" not in message and "forged" not in message, message
                assert len(message) < 200, message
        finally:
            cur.execute("RESET ROLE")
