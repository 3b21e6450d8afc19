# -------------------------------------------------------------------------
#
# test_pooler.py
#     jobflow behind PgBouncer: applications schedule through a pooler in
#     transaction pooling mode, and what one pooled client leaves on a
#     server connection reaches neither the next client nor the worker.
#
# Each test starts its own pgbouncer (as the server's OS user) on
# 127.0.0.1 and a free port, in front of the suite's cluster (its unix
# socket), with pools of one server connection: every client of one login
# role really runs on the same backend in turn, which the tests check
# (pg_backend_pid()).  pgbouncer is stopped when the test ends.  Three
# database aliases select the pool mode: "jobflow" (transaction),
# "jobflow_session" and "jobflow_statement".
#
# What is covered (see docs/operations.md, "Connection poolers"):
# schedule, cancel, reschedule and idempotency keys through transaction
# pooling; a rolled-back schedule fires nothing; outcome notifications
# (LISTEN cannot work through transaction pooling, and what does); the
# backend-local state of jobflow's SQL functions (the announcements of
# commit_wake.c, the owner check's cache of tenant_api.c) and the session
# state of the client (SET ROLE, SET LOCAL ROLE) across pooled clients;
# a restore's COPY through the pooler; separate pools per login role;
# statement pooling.
#
# The tests skip when pgbouncer is not installed (Debian's package
# pgbouncer; scripts/test.sh installs it).
#
# -------------------------------------------------------------------------

import io
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid

import psycopg2
import pytest

from conftest import _connect, call, query, schedule, task_row, wait_final

PGBOUNCER = shutil.which("pgbouncer") or (
    "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None)
RUN_USER = os.environ.get("JOBFLOW_RUN_USER", "postgres")

pytestmark = pytest.mark.skipif(
    PGBOUNCER is None,
    reason="pgbouncer is not installed (Debian package pgbouncer; "
           "scripts/test.sh installs it)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Bouncer:
    """A running pgbouncer: connect() opens a client connection through
    it; every one is closed when the test ends."""

    def __init__(self, port, app, other, tenants, superuser):
        self.port = port
        self.app = app              # login role of the application
        self.other = other          # a second application's login role
        self.tenants = tenants      # NOLOGIN roles app may SET ROLE to
        self.superuser = superuser
        self.opened = []

    def connect(self, user=None, db="jobflow", autocommit=True):
        conn = psycopg2.connect(host="127.0.0.1", port=self.port,
                                user=user or self.app, dbname=db)
        conn.autocommit = autocommit
        self.opened.append(conn)
        return conn

    def admin(self, sql):
        """A command of pgbouncer's admin console: rows as dicts."""
        conn = self.connect(self.superuser, "pgbouncer")
        with conn.cursor() as cur:
            cur.execute(sql)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r)) for r in cur.fetchall()]


def backend(conn):
    """The server process a client runs on now.  A client outside
    autocommit ends the transaction this opens: with pools of one, an open
    transaction would hold the only server connection."""
    pid = call(conn, "SELECT pg_backend_pid()")
    if not conn.autocommit:
        conn.rollback()
    return pid


@pytest.fixture
def bouncer():
    """pgbouncer in front of the suite's cluster (see the header), with an
    application login role (and two NOLOGIN tenant roles it may SET ROLE
    to) and a second application's login role, all granted jobflow_user;
    their rows are deleted and they are dropped at the end."""
    suffix = uuid.uuid4().hex[:8]
    app, other = "jfp_app_" + suffix, "jfp_other_" + suffix
    ta, tb = "jfp_ta_" + suffix, "jfp_tb_" + suffix
    roles = [app, other, ta, tb]
    superuser = os.environ.get("PGUSER", "postgres")
    admin = _connect()
    with admin.cursor() as cur:
        for name, attr in ((app, "LOGIN"), (other, "LOGIN"), (ta, "NOLOGIN"), (tb, "NOLOGIN")):
            cur.execute("CREATE ROLE %s %s" % (name, attr))
            cur.execute("GRANT jobflow_user TO %s" % name)
        cur.execute("GRANT %s, %s TO %s" % (ta, tb, app))

    top = tempfile.mkdtemp(prefix="jobflow-pooler-")
    port = free_port()
    target = "host=%s port=%s dbname=%s" % (os.environ["PGHOST"], os.environ["PGPORT"],
                                            os.environ.get("PGDATABASE", "jobflow"))
    with open(os.path.join(top, "pgbouncer.ini"), "w") as f:
        f.write("\n".join([
            "[databases]",
            "jobflow = %s" % target,
            "jobflow_session = %s pool_mode=session" % target,
            "jobflow_statement = %s pool_mode=statement" % target,
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            "listen_port = %d" % port,
            "unix_socket_dir =",
            # loopback only, and the cluster trusts its socket: no passwords
            "auth_type = trust",
            "auth_file = %s" % os.path.join(top, "users.txt"),
            "admin_users = %s" % superuser,
            "pool_mode = transaction",
            # one server connection per (database, user): clients share it
            "default_pool_size = 1",
            "max_client_conn = 50",
            "server_login_retry = 1",
            ""]))
    with open(os.path.join(top, "users.txt"), "w") as f:
        for name in (superuser, app, other):
            f.write('"%s" ""\n' % name)
    log = open(os.path.join(top, "pgbouncer.log"), "w")
    kwargs = {}
    if os.geteuid() == 0:
        shutil.chown(top, RUN_USER)
        kwargs = {"user": RUN_USER, "group": RUN_USER, "extra_groups": []}
    proc = None
    b = Bouncer(port, app, other, (ta, tb), superuser)
    try:
        proc = subprocess.Popen([PGBOUNCER, os.path.join(top, "pgbouncer.ini")],
                                stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, **kwargs)
        deadline = time.time() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    log.flush()
                    with open(os.path.join(top, "pgbouncer.log")) as f:
                        pytest.fail("pgbouncer did not start: %s" % f.read())
                time.sleep(0.05)
        yield b
    finally:
        for conn in b.opened:
            try:
                conn.close()
            except psycopg2.Error:
                pass
        if proc is not None:
            proc.send_signal(signal.SIGTERM)    # immediate shutdown
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        log.close()
        shutil.rmtree(top, ignore_errors=True)
        with admin.cursor() as cur:
            for name in roles:
                cur.execute("DELETE FROM jobflow.task_log WHERE owner = %s::regrole", (name,))
                cur.execute("DELETE FROM jobflow.tasks WHERE owner = %s::regrole", (name,))
                cur.execute("DROP ROLE %s" % name)
        admin.close()


def tagged(receiver, tag):
    return lambda r: ("t=" + tag) in r["query"]


def wakeup_ranges(db):
    return query(db, "SELECT ranges FROM jobflow.wakeups()")[0]["ranges"]


# -------------------------------------------------------------------------
# What applications do, through transaction pooling
# -------------------------------------------------------------------------

@pytest.mark.smoke
def test_schedule_cancel_reschedule(bouncer, receiver, db):
    """Two clients of one login role share one server connection: a task
    scheduled through it fires and belongs to the application's role;
    one client cancels and reschedules what the other scheduled; a
    schedule rolled back fires nothing."""
    c1, c2 = bouncer.connect(), bouncer.connect()
    assert backend(c1) == backend(c2), "the pool of one should be shared"

    url1, tag1 = receiver.unique_url("/ok")
    id1 = schedule(c1, url1)
    receiver.wait_for(tagged(receiver, tag1), timeout=15)
    assert wait_final(db, id1) == "succeeded"
    assert task_row(db, id1)["owner"] == bouncer.app

    url2, tag2 = receiver.unique_url("/ok")
    id2 = schedule(c1, url2, run_at_sql="now() + interval '1 hour'")
    assert call(c2, "SELECT jobflow.cancel(%s)", (id2,)) is True
    assert task_row(db, id2)["state"] == "cancelled"

    url3, tag3 = receiver.unique_url("/ok")
    id3 = schedule(c2, url3, run_at_sql="now() + interval '1 hour'")
    rolled = bouncer.connect(autocommit=False)
    url4, tag4 = receiver.unique_url("/ok")
    id4 = schedule(rolled, url4)
    rolled.rollback()
    call(c1, "SELECT jobflow.reschedule(%s, now())", (id3,))
    receiver.wait_for(tagged(receiver, tag3), timeout=15)
    assert wait_final(db, id3) == "succeeded"
    time.sleep(1.0)
    assert receiver.tagged(tag2) == [] and receiver.tagged(tag4) == []
    assert task_row(db, id4) is None
    assert backend(c1) == backend(c2) == backend(rolled)


def test_idempotency_keys_across_pooled_clients(bouncer, receiver, db):
    """The same key through two pooled clients gives one task; keys are
    per owner, so two tenants (SET LOCAL ROLE) sharing the server
    connection each get their own; a keyed schedule rolled back leaves
    the key free."""
    c1, c2 = bouncer.connect(), bouncer.connect()
    key = "order-" + uuid.uuid4().hex
    url, tag = receiver.unique_url("/ok")
    id1 = schedule(c1, url, key=key, run_at_sql="now() + interval '1 second'")
    id2 = schedule(c2, url, key=key, run_at_sql="now() + interval '1 second'")
    assert id1 == id2
    assert call(db, "SELECT count(*) FROM jobflow.tasks WHERE key = %s", (key,)) == 1

    def as_tenant(conn, tenant, url, key):
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("SET LOCAL ROLE %s" % tenant)
        try:
            return schedule(conn, url, key=key)
        finally:
            call(conn, "COMMIT")

    ta, tb = bouncer.tenants
    ua, taga = receiver.unique_url("/ok")
    ub, tagb = receiver.unique_url("/ok")
    ida = as_tenant(c1, ta, ua, key)
    idb = as_tenant(c2, tb, ub, key)
    assert ida != idb
    assert task_row(db, ida)["owner"] == ta and task_row(db, idb)["owner"] == tb

    # tenant a's keyed schedule, rolled back, then the same key again
    key2 = "order-" + uuid.uuid4().hex
    tx = bouncer.connect(autocommit=False)
    with tx.cursor() as cur:
        cur.execute("SET LOCAL ROLE %s" % ta)
    ur, tagr = receiver.unique_url("/ok")
    gone = schedule(tx, ur, key=key2)
    tx.rollback()
    ua2, taga2 = receiver.unique_url("/ok")
    ida2 = as_tenant(c2, ta, ua2, key2)
    assert ida2 != gone

    for t in (tag, taga, tagb, taga2):
        receiver.wait_for(tagged(receiver, t), timeout=15)
    assert wait_final(db, [id1, ida, idb, ida2]) == {
        id1: "succeeded", ida: "succeeded", idb: "succeeded", ida2: "succeeded"}
    assert len(receiver.tagged(tag)) == 1
    assert receiver.tagged(tagr) == [] and task_row(db, gone) is None
    assert backend(c1) == backend(c2) == backend(tx)


# -------------------------------------------------------------------------
# Outcome notifications
# -------------------------------------------------------------------------

def drain(conn, seconds):
    """Notifications conn has received, waiting up to seconds for more."""
    got = []
    deadline = time.time() + seconds
    while True:
        conn.poll()
        while conn.notifies:
            got.append(conn.notifies.pop(0))
        if time.time() >= deadline:
            return got
        time.sleep(0.05)


def test_listen_through_transaction_pooling_does_not_work(bouncer, receiver, db):
    """listen_outcomes() through transaction pooling: the LISTEN stays on
    the server connection, not with the client.  The listener never hears
    its outcome; the client whose transaction holds the server connection
    when the notification comes gets it instead, here another tenant.
    (What docs/operations.md says, "Connection poolers".)"""
    ta, tb = bouncer.tenants
    listener = bouncer.connect(autocommit=False)
    with listener.cursor() as cur:
        cur.execute("SET LOCAL ROLE %s" % ta)
        cur.execute("SELECT jobflow.listen_outcomes()")
        channel = cur.fetchone()[0]
    listener.commit()

    sched = bouncer.connect(autocommit=False)
    with sched.cursor() as cur:
        cur.execute("SET LOCAL ROLE %s" % ta)
    url, tag = receiver.unique_url("/ok")
    # due once tenant b's transaction below holds the server connection
    task = schedule(sched, url, notify=True, run_at_sql="now() + interval '1.5 seconds'")
    sched.commit()

    # tenant b's transaction holds the (only) server connection meanwhile
    other = bouncer.connect(autocommit=False)
    with other.cursor() as cur:
        cur.execute("SET LOCAL ROLE %s" % tb)
        cur.execute("SELECT 1")
    assert wait_final(db, task) == "succeeded"
    time.sleep(0.5)     # the notification follows the outcome's commit
    other.commit()
    heard = [(n.channel, n.payload) for n in drain(other, 0)]
    assert (channel, "%d:succeeded" % task) in heard
    assert drain(listener, 0.5) == []
    assert backend(listener) == backend(sched) == backend(other)


def test_listen_in_session_pooling_or_directly(bouncer, receiver, connect):
    """What works: a listener in session pooling mode, or on a direct
    connection, hears the outcome of a task scheduled through transaction
    pooling (the channel is the role's, not the connection's)."""
    session = bouncer.connect(db="jobflow_session")
    direct = connect(user=bouncer.app)
    channel = call(session, "SELECT jobflow.listen_outcomes()")
    assert call(direct, "SELECT jobflow.listen_outcomes()") == channel

    pooled = bouncer.connect()
    url, tag = receiver.unique_url("/ok")
    task = schedule(pooled, url, notify=True)
    receiver.wait_for(tagged(receiver, tag), timeout=15)
    want = (channel, "%d:succeeded" % task)
    for conn in (session, direct):
        deadline = time.time() + 10
        heard = []
        while want not in heard and time.time() < deadline:
            heard += [(n.channel, n.payload) for n in drain(conn, 0.2)]
        assert want in heard


# -------------------------------------------------------------------------
# Nothing a pooled client leaves on the server connection
# -------------------------------------------------------------------------

@pytest.mark.smoke
def test_roles_and_aborted_transactions_leave_nothing(bouncer, receiver, db):
    """Client A's transactions (SET LOCAL ROLE committed; SET ROLE and a
    schedule aborted by an error half-way) leave nothing on the shared
    server connection: client B acts as the login role, its tasks are its
    own, it cannot see A's, A's aborted task neither fires nor publishes a
    wake-up, and B's commit publishes only its own."""
    ta, tb = bouncer.tenants
    a, b = bouncer.connect(autocommit=False), bouncer.connect(autocommit=False)

    with a.cursor() as cur:
        cur.execute("SET LOCAL ROLE %s" % ta)
    ua, taga = receiver.unique_url("/ok")
    ida = schedule(a, ua, run_at_sql="now() + interval '1 hour'")
    a.commit()
    with b.cursor() as cur:
        cur.execute("SELECT current_user, session_user")
        assert cur.fetchone() == (bouncer.app, bouncer.app)
        cur.execute("SET LOCAL ROLE %s" % tb)
        cur.execute("SELECT count(*) FROM jobflow.tasks WHERE id = %s", (ida,))
        assert cur.fetchone()[0] == 0, "tenant b sees tenant a's task"
    b.commit()

    # B: a task due later (which publishes no wake-up)
    before = wakeup_ranges(db)
    ul, tagl = receiver.unique_url("/ok")
    idl = schedule(b, ul, run_at_sql="now() + interval '1 day'")
    b.commit()
    # A: SET ROLE (not LOCAL), a due task, then a statement that fails
    # half-way: its first row (due now) has been announced when its
    # second fails the row check
    with a.cursor() as cur:
        cur.execute("SET ROLE %s" % ta)
    ux, tagx = receiver.unique_url("/ok")
    idx = schedule(a, ux)
    with pytest.raises(psycopg2.errors.InvalidParameterValue, match="absolute http"):
        call(a, "INSERT INTO jobflow.tasks (url) VALUES (%s), ('ftp://x/')", (ux,))
    a.rollback()
    assert wakeup_ranges(db) == before, "an aborted transaction published a wake-up"

    with b.cursor() as cur:
        cur.execute("SELECT current_user, session_user")
        assert cur.fetchone() == (bouncer.app, bouncer.app)
    # B's statement writes no pending row: it announces nothing of A's
    assert call(b, "SELECT jobflow.cancel(%s)", (idl,)) is True
    b.commit()
    assert wakeup_ranges(db) == before, "B's commit published A's announcement"
    ub, tagb = receiver.unique_url("/ok")
    idb = schedule(b, ub)
    b.commit()
    assert wakeup_ranges(db) == before + 1, "B's commit published more than its statement"
    receiver.wait_for(tagged(receiver, tagb), timeout=15)
    assert wait_final(db, idb) == "succeeded"
    assert task_row(db, idb)["owner"] == bouncer.app
    time.sleep(1.0)
    assert receiver.tagged(tagx) == [] and task_row(db, idx) is None
    assert task_row(db, ida)["state"] == "pending"
    assert backend(a) == backend(b)
    a.rollback()
    b.rollback()

    # the caveat: a SET ROLE that commits stays with the server
    # connection, as every session setting does in transaction pooling
    a.autocommit = b.autocommit = True
    call(a, "SET ROLE %s" % ta)
    try:
        assert call(b, "SELECT current_user") == ta
    finally:
        call(b, "RESET ROLE")


def test_owner_check_cache_does_not_outlive_an_aborted_transaction(bouncer, db, role):
    """tenant_api.c keeps the last owner that passed its check while no
    role changes.  A role every tenant holds (jobflow_monitor is a member
    of it) may not own tasks.  Client A revokes that membership, schedules
    as the role (it passes) and rolls back; client B, on the same server
    connection, is refused again."""
    shared = role()
    with db.cursor() as cur:
        cur.execute("GRANT %s TO jobflow_monitor" % shared)
    su = bouncer.superuser
    a, b = bouncer.connect(su, autocommit=False), bouncer.connect(su, autocommit=False)
    with a.cursor() as cur:
        cur.execute("REVOKE %s FROM jobflow_monitor" % shared)
        cur.execute("SET LOCAL ROLE %s" % shared)
    schedule(a, "http://127.0.0.1:9/x", run_at_sql="now() + interval '1 hour'")
    a.rollback()
    with b.cursor() as cur:
        cur.execute("SET LOCAL ROLE %s" % shared)
    with pytest.raises(psycopg2.errors.InsufficientPrivilege, match="cannot own jobflow tasks"):
        schedule(b, "http://127.0.0.1:9/x", run_at_sql="now() + interval '1 hour'")
    b.rollback()
    assert backend(a) == backend(b)
    with db.cursor() as cur:
        cur.execute("REVOKE %s FROM jobflow_monitor" % shared)


def test_restore_copy_through_transaction_pooling(bouncer, receiver, db):
    """A restore's COPY marks its session until DISCARD ALL or the end of
    the session (docs/operations.md, "Backup and restore").  Through
    transaction pooling that session is pgbouncer's server connection:
    the worker claims nothing in the database until a DISCARD ALL runs on
    it (what session pooling does when a client leaves)."""
    su = bouncer.superuser
    a, b = bouncer.connect(su), bouncer.connect(su)
    with a.cursor() as cur:
        cur.copy_expert("COPY jobflow.tasks (id) FROM STDIN", io.StringIO(""))
    url, tag = receiver.unique_url("/ok")
    try:
        task = schedule(b, url)
        time.sleep(1.5)
        assert receiver.tagged(tag) == [], "the worker claimed during a restore"
    finally:
        call(b, "DISCARD ALL")
    receiver.wait_for(tagged(receiver, tag), timeout=15)
    assert wait_final(db, task) == "succeeded"
    assert backend(a) == backend(b)

    # session pooling runs DISCARD ALL when the client leaves
    s = bouncer.connect(su, db="jobflow_session")
    with s.cursor() as cur:
        cur.copy_expert("COPY jobflow.tasks (id) FROM STDIN", io.StringIO(""))
    s.close()
    url, tag = receiver.unique_url("/ok")
    task = schedule(bouncer.connect(su, db="jobflow_session"), url)
    receiver.wait_for(tagged(receiver, tag), timeout=15)


# -------------------------------------------------------------------------
# Pools per role, statement pooling
# -------------------------------------------------------------------------

def test_two_roles_get_separate_pools(bouncer, receiver, db):
    """pgbouncer pools per (database, user): two applications never share
    a server connection, and each one's tasks are its own."""
    a, o = bouncer.connect(bouncer.app), bouncer.connect(bouncer.other)
    assert backend(a) != backend(o)
    assert call(a, "SELECT session_user") == bouncer.app
    assert call(o, "SELECT session_user") == bouncer.other
    pools = {(p["database"], p["user"]) for p in bouncer.admin("SHOW POOLS")}
    assert {("jobflow", bouncer.app), ("jobflow", bouncer.other)} <= pools

    ua, taga = receiver.unique_url("/ok")
    uo, tago = receiver.unique_url("/ok")
    ida, ido = schedule(a, ua), schedule(o, uo)
    receiver.wait_for(tagged(receiver, taga), timeout=15)
    receiver.wait_for(tagged(receiver, tago), timeout=15)
    assert task_row(db, ida)["owner"] == bouncer.app
    assert task_row(db, ido)["owner"] == bouncer.other
    later = schedule(a, ua, run_at_sql="now() + interval '1 hour'")
    assert call(o, "SELECT count(*) FROM jobflow.tasks WHERE id IN (%s, %s)", (ida, later)) == 0
    assert call(o, "SELECT jobflow.cancel(%s)", (later,)) is not True
    assert task_row(db, later)["state"] == "pending"


def test_statement_pooling(bouncer, receiver, db):
    """Statement pooling: schedule() in autocommit works; a transaction
    block is refused by pgbouncer."""
    c = bouncer.connect(db="jobflow_statement")
    url, tag = receiver.unique_url("/ok")
    task = schedule(c, url)
    receiver.wait_for(tagged(receiver, tag), timeout=15)
    assert task_row(db, task)["owner"] == bouncer.app
    # pgbouncer closes the client at its BEGIN ("transaction blocks not
    # allowed in statement pooling mode", in its log)
    tx = bouncer.connect(db="jobflow_statement", autocommit=False)
    url, tag = receiver.unique_url("/ok")
    with pytest.raises(psycopg2.OperationalError):
        schedule(tx, url)
    assert call(db, "SELECT count(*) FROM jobflow.tasks WHERE url = %s", (url,)) == 0
