# -------------------------------------------------------------------------
#
# test_circuits.py
#     Issue 25, item 5: endpoints that heal.  After
#     jobflow.circuit_failures consecutive failures of one owner's requests
#     to one origin, the worker holds that owner's due tasks there
#     (pending, no attempt spent, no log row) but for one probe at growing
#     intervals; a success closes the circuit and the held tasks drain.
#     Circuits are per (owner, origin): another tenant's tasks to the same
#     origin are never held by them, and jobflow.endpoints shows each
#     tenant its own.  Each test runs its own endpoint on 127.0.0.1 (a
#     fresh origin), with small settings (3 failures, probes after 1 s).
#
# -------------------------------------------------------------------------

import http.server
import socket
import threading
import time

import psycopg2
import pytest

from conftest import notifications, query, schedule, stat, wait_final


class Endpoint:
    """An HTTP endpoint on 127.0.0.1 answering `status` (or, for paths
    starting with /good, 200), recording the time and path of each
    request."""

    def __init__(self):
        self.status = 503
        self.hits = []
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                endpoint.hits.append((time.time(), self.path))
                code = 200 if self.path.startswith("/good") else endpoint.status
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.origin = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path):
        return self.origin + path

    def hits_since(self, t):
        return [h for h in self.hits if h[0] >= t]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def endpoint():
    ep = Endpoint()
    try:
        yield ep
    finally:
        ep.close()


@pytest.fixture
def circuits(server, db):
    """Circuits open after 3 failures; probes after probe_min seconds
    (the test sets it), at most 2 s apart; every setting reset after."""
    names = ("jobflow.circuit_failures", "jobflow.circuit_probe_min",
             "jobflow.circuit_probe_max")

    def configure(probe_min):
        server.set_guc(db, "jobflow.circuit_failures", 3)
        server.set_guc(db, "jobflow.circuit_probe_min", probe_min)
        server.set_guc(db, "jobflow.circuit_probe_max", max(2, probe_min))
        time.sleep(0.5)         # the worker reloads
    try:
        yield configure
    finally:
        for name in names:
            server.set_guc(db, name, None)


def as_tenant(conn, role, fn, *args, **kw):
    with conn.cursor() as cur:
        cur.execute("SET ROLE %s" % role)
    try:
        return fn(conn, *args, **kw)
    finally:
        with conn.cursor() as cur:
            cur.execute("RESET ROLE")


def endpoints(conn, role):
    """jobflow.endpoints as role."""
    return as_tenant(conn, role, query, "SELECT owner::text, origin, state, failures,"
                     " held_tasks, next_probe FROM jobflow.endpoints")


def wait_circuit(conn, role, origin, state, timeout=10):
    """role's row of origin in jobflow.endpoints once in state."""
    deadline = time.time() + timeout
    while True:
        rows = [r for r in endpoints(conn, role) if r["origin"] == origin]
        if rows and rows[0]["state"] == state:
            return rows[0]
        if time.time() >= deadline:
            pytest.fail("circuit of %s to %s not %s after %s s: %s"
                        % (role, origin, state, timeout, rows))
        time.sleep(0.1)


def fail_three(conn, role, ep, path="/bad"):
    """Three tasks of role that fail once each at ep: its circuit opens."""
    ids = [as_tenant(conn, role, schedule, ep.url("%s?i=%d" % (path, i)), max_attempts=1)
           for i in range(3)]
    assert set(wait_final(conn, ids).values()) == {"failed"}
    return ids


def attempts(conn, ids):
    return {r["id"]: r["attempts"] for r in
            query(conn, "SELECT id, attempts FROM jobflow.tasks WHERE id = ANY(%s)", (ids,))}


def log_rows(conn, ids):
    return query(conn, "SELECT task_id, attempt FROM jobflow.task_log WHERE task_id = ANY(%s)",
                 (ids,))


def test_open_hold_probe_and_heal(db, connect, app_role, endpoint, circuits):
    """503s open the circuit: due tasks are held with no attempt spent
    and no log row, one probe goes out at the interval (and fails), the
    owner hears of each change on its outcome channel, explain() and the
    gauge say so; once the endpoint answers 200, a probe closes the
    circuit and every held task drains."""
    circuits(1)
    listener = connect(user=app_role)
    channel = query(listener, "SELECT jobflow.listen_outcomes() AS c")[0]["c"]

    fail_three(db, app_role, endpoint)
    row = wait_circuit(db, app_role, endpoint.origin, "open")
    assert row["failures"] == 3 and row["owner"] == app_role
    opened = time.time()
    ids = [as_tenant(db, app_role, schedule, endpoint.url("/held?i=%d" % i), max_attempts=10)
           for i in range(6)]

    time.sleep(3.5)
    spent = attempts(db, ids)
    time.sleep(0.2)                     # a probe claimed, not yet arrived
    probes = endpoint.hits_since(opened)
    print("probes in 3.5 s while open: %d" % len(probes))
    # at most a probe a second (1 s, then 2 s apart), at least one
    assert 1 <= len(probes) <= 3
    # every attempt spent is a probe the endpoint saw (the last one may
    # have come in the 0.2 s after), and only those are logged
    assert len(probes) - 1 <= sum(spent.values()) <= len(probes)
    assert len(log_rows(db, ids)) <= sum(spent.values())
    assert sum(1 for a in spent.values() if a == 0) >= 6 - len(probes)
    assert query(db, "SELECT count(*) AS n FROM jobflow.tasks WHERE id = ANY(%s)"
                 " AND state <> 'pending'", (ids,))[0]["n"] == 0

    row = wait_circuit(db, app_role, endpoint.origin, "open")
    assert row["held_tasks"] >= 1 and row["next_probe"] is not None
    held = [i for i, a in spent.items() if a == 0][0]
    reasons = as_tenant(db, app_role, query,
                        "SELECT reason, explanation FROM jobflow.explain(%s)", (held,))
    assert "circuit_open" in [r["reason"] for r in reasons], reasons
    assert stat(db, "circuits_open") >= 1

    endpoint.status = 200
    healed = time.time()
    states = wait_final(db, ids, timeout=15)
    assert set(states.values()) == {"succeeded"}
    print("held tasks drained %.1f s after the endpoint healed" % (time.time() - healed))
    assert [r for r in endpoints(db, app_role) if r["origin"] == endpoint.origin
            and r["state"] != "closed"] == []

    said = [n.payload for n in notifications(listener, 1.5) if n.channel == channel]
    assert "circuit:open:%s:%d" % ("http://127.0.0.1", endpoint.port) in said, said
    assert "circuit:closed:%s:%d" % ("http://127.0.0.1", endpoint.port) in said, said


def test_refused_connections_open_and_reset(db, app_role, endpoint, circuits):
    """Refused connections open the circuit as 5xx do; a held task waits
    with no attempt; jobflow.reset_circuit() by an administrator closes
    it at once and the task goes."""
    circuits(600)                       # no probe within the test
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()                        # nothing listens there now
    origin = "http://127.0.0.1:%d" % port
    ids = [as_tenant(db, app_role, schedule, "%s/x?i=%d" % (origin, i), max_attempts=1)
           for i in range(3)]
    assert set(wait_final(db, ids).values()) == {"failed"}
    assert all(r["error"] for r in query(db, "SELECT error FROM jobflow.task_log"
                                            " WHERE task_id = ANY(%s)", (ids,)))
    wait_circuit(db, app_role, origin, "open")

    # a task to that origin is held; one to another origin is not
    elsewhere = as_tenant(db, app_role, schedule, endpoint.url("/good"), max_attempts=1)
    other = as_tenant(db, app_role, schedule, "%s/y" % origin, max_attempts=1)
    time.sleep(1.5)
    assert attempts(db, [other]) == {other: 0}
    assert log_rows(db, [other]) == []
    assert wait_final(db, elsewhere) == "succeeded"

    with db.cursor() as cur:
        cur.execute("SELECT jobflow.reset_circuit(%s)", ("%s/anything" % origin,))
    assert wait_final(db, other, timeout=10) == "failed"    # sent: refused again
    assert attempts(db, [other]) == {other: 1}


def test_tenants_do_not_hold_each_other(db, connect, new_role, endpoint, circuits):
    """Tenant A's failing paths open A's circuit only: B's tasks to the
    same origin go at once, B's view does not show A's circuit, B cannot
    reset it, and A's tasks to the origin's good paths are held too
    (the circuit is the origin's, for A); A's own reset releases them and
    is told on A's channel."""
    circuits(600)
    a, b = new_role(), new_role()
    fail_three(db, a, endpoint)
    wait_circuit(db, a, endpoint.origin, "open")

    a_good = as_tenant(db, a, schedule, endpoint.url("/good?a"), max_attempts=1)
    b_ids = [as_tenant(db, b, schedule, endpoint.url("/good?b=%d" % i), max_attempts=1)
             for i in range(3)]
    assert set(wait_final(db, b_ids, timeout=10).values()) == {"succeeded"}
    assert attempts(db, [a_good]) == {a_good: 0}

    assert [r for r in endpoints(db, b) if r["origin"] == endpoint.origin] == []
    assert all(r["owner"] == a for r in endpoints(db, a))
    with db.cursor() as cur:
        cur.execute("SET ROLE %s" % b)
        try:
            with pytest.raises(psycopg2.errors.InsufficientPrivilege):
                cur.execute("SELECT jobflow.reset_circuit(%s, %s)", (endpoint.origin, a))
        finally:
            cur.execute("RESET ROLE")
        # B resetting its own (none) changes nothing of A's
        cur.execute("SET ROLE %s" % b)
        cur.execute("SELECT jobflow.reset_circuit(%s)", (endpoint.origin,))
        cur.execute("RESET ROLE")
    time.sleep(1.0)
    assert attempts(db, [a_good]) == {a_good: 0}

    # A resets its own circuit: its held task goes, and A hears of it
    listener = connect(user=a)
    channel = query(listener, "SELECT jobflow.listen_outcomes() AS c")[0]["c"]
    with db.cursor() as cur:
        cur.execute("SET ROLE %s" % a)
        cur.execute("SELECT jobflow.reset_circuit(%s)", (endpoint.origin,))
        cur.execute("RESET ROLE")
    assert wait_final(db, a_good, timeout=10) == "succeeded"
    said = [n.payload for n in notifications(listener, 1.0) if n.channel == channel]
    assert "circuit:closed:" + endpoint.origin in said, said
