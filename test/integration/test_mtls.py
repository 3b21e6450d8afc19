# -------------------------------------------------------------------------
#
# test_mtls.py
#     TLS a bank would accept (issue 25, item 7): the CA directory the
#     worker trusts (jobflow.tls_ca_path), and client certificates for
#     mutual TLS, per queue, held as secrets and bound to origins.
#
# A real nginx on 127.0.0.1 (nginx_receiver.py) has two https ports that
# require a client certificate signed by a test client CA
# (ssl_verify_client on) and log the subject of the one presented
# ($ssl_client_s_dn) and nginx's verdict ($ssl_client_verify).  Each port
# is an origin of its own.
#
# What nginx does without a certificate, or with one of another CA, is an
# HTTP answer, not a failed handshake: its verify callback accepts every
# certificate, so that it can answer "400 No required SSL certificate was
# sent" or "400 The SSL certificate error" (495 and 496 inside nginx) over
# TLS 1.2 and 1.3 alike; no nginx setting (ssl_verify_depth,
# ssl_client_certificate, ssl_trusted_certificate) changes that, and its
# stream module closes the connection after the handshake instead.  Such a
# callback fails as class 4xx, and the tests say so.  A receiver that does
# refuse in the handshake (OpenSSL's SSL_VERIFY_FAIL_IF_NO_PEER_CERT, as
# Apache's "SSLVerifyClient require" or HAProxy's "verify required" set)
# fails as class tls: a small server of Python's ssl module shows it.
#
# -------------------------------------------------------------------------

import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import uuid

import psycopg2
import pytest

from conftest import _connect, as_role, query, wait_final
from nginx_receiver import Nginx


def openssl(*args):
    subprocess.run(("openssl",) + args, check=True, capture_output=True)


def make_client_pki(d):
    """Two client CAs (ours and another) and client certificates: a and b
    of ours, x of the other.  EC keys: quick to make."""
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    for ca in ("client-ca", "other-ca"):
        openssl("req", "-x509", *ec, "-days", "2", "-subj", "/CN=jobflow test %s" % ca,
                "-keyout", os.path.join(d, ca + ".key"), "-out", os.path.join(d, ca + ".pem"))
    ext = os.path.join(d, "client.ext")
    with open(ext, "w") as f:
        f.write("extendedKeyUsage = clientAuth\n")
    out = {}
    for name, ca in (("a", "client-ca"), ("b", "client-ca"), ("x", "other-ca")):
        key, csr, pem = (os.path.join(d, "client-%s.%s" % (name, e)) for e in ("key", "csr", "pem"))
        openssl("req", *ec, "-subj", "/O=jobflow/CN=client-%s" % name, "-keyout", key, "-out", csr)
        openssl("x509", "-req", "-in", csr, "-CA", os.path.join(d, ca + ".pem"),
                "-CAkey", os.path.join(d, ca + ".key"), "-CAcreateserial", "-days", "2",
                "-extfile", ext, "-out", pem)
        out[name] = (open(pem).read(), open(key).read())
    for f in os.listdir(d):
        os.chmod(os.path.join(d, f), 0o644)
    return out


@pytest.fixture(scope="module")
def pki():
    d = tempfile.mkdtemp(prefix="jobflow-mtls-")
    os.chmod(d, 0o755)
    try:
        certs = make_client_pki(d)
        yield dict(dir=d, certs=certs, client_ca=os.path.join(d, "client-ca.pem"))
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def nginx(server, pki):
    n = Nginx(keepalive_timeout="30s", client_ca=pki["client_ca"])
    conn = _connect()
    try:
        n.start()
        server.set_guc(conn, "jobflow.tls_ca_file", n.ca)
        time.sleep(0.5)
        yield n
    finally:
        n.stop()
        try:
            server.set_guc(conn, "jobflow.tls_ca_file", None)
        finally:
            conn.close()


@pytest.fixture
def tenants(db):
    names = ["jf_mtls_%s" % uuid.uuid4().hex[:8] for _ in range(2)]
    with db.cursor() as cur:
        for n in names:
            cur.execute("CREATE ROLE %s" % n)
            cur.execute("GRANT jobflow_user TO %s" % n)
    yield names
    with db.cursor() as cur:
        cur.execute("RESET ROLE")
        cur.execute("UPDATE jobflow.tasks SET state = 'cancelled' WHERE state = 'pending'"
                    " AND owner::text = ANY(%s)", (names,))
        for table in ("queues", "client_certificates"):
            cur.execute("DELETE FROM jobflow.%s WHERE owner::text = ANY(%%s)" % table, (names,))


def mtls_url(nginx, i, path):
    return "https://127.0.0.1:%d%s" % (nginx.mtls_ports[i], path)


def origin(nginx, i):
    return "https://127.0.0.1:%d" % nginx.mtls_ports[i]


def set_cert(db, role, name, cert, key, origins):
    # bind parameters: neither PEM is in any statement text
    as_role(db, role, "SELECT jobflow.set_client_certificate(%s, %s, %s, %s)",
            (name, cert, key, origins))


def classes(db):
    """jobflow_outcomes_total by class."""
    return {r["c"]: r["value"] for r in query(
        db, "SELECT label_set->>'class' AS c, value FROM jobflow.stats"
            " WHERE metric = 'outcomes_total'")}


def fire(db, role, url, queue="default"):
    """One attempt of a task of role to url in queue: (its log row, the
    nginx log rows of it, the outcome classes it moved)."""
    tag = uuid.uuid4().hex
    url = url + ("&" if "?" in url else "?") + "t=" + tag
    before = classes(db)
    task = as_role(db, role, "SELECT jobflow.schedule(%s, queue => %s, max_attempts => 1)",
                   (url, queue))
    wait_final(db, [task])
    (row,) = query(db, "SELECT * FROM jobflow.task_log WHERE task_id = %s", (task,))
    deadline = time.time() + 5
    while True:
        after = classes(db)
        moved = {c: v - before.get(c, 0) for c, v in after.items() if v != before.get(c, 0)}
        if moved or time.time() > deadline:
            break
        time.sleep(0.05)
    return task, row, moved, tag


def seen(nginx, tag):
    return [r for r in nginx.log() if tag in r["uri"]]


def key_lines(key):
    """The base64 lines of a PEM key: what must show nowhere."""
    return [ln for ln in key.splitlines() if ln and not ln.startswith("-----")]


def test_the_right_certificate_is_presented_and_its_key_stays_secret(db, server, nginx, pki,
                                                                    tenants):
    """A queue's client certificate goes out in the handshake to an origin
    it is bound to: nginx verifies it and logs its subject.  The key shows
    in no row, log row, server log line or message, and nobody reads it
    back; the view shows the name and origins only."""
    alice = tenants[0]
    cert, key = pki["certs"]["a"]
    set_cert(db, alice, "bank", cert, key, [origin(nginx, 0)])
    as_role(db, alice, "SELECT jobflow.set_queue_client_certificate('payments', 'bank')")
    task, row, moved, tag = fire(db, alice, mtls_url(nginx, 0, "/pay"), queue="payments")
    got = seen(nginx, tag)
    assert row["http_status"] == 200 and row["outcome"] == "succeeded", row
    assert [(r["status"], r["client_verify"], r["client_subject"]) for r in got] == \
        [(200, "SUCCESS", "CN=client-a,O=jobflow")]
    assert moved == {"2xx": 1}

    # names and origins only, to its own role
    with db.cursor() as cur:
        cur.execute("SET ROLE %s" % alice)
        cur.execute("SELECT name, origins FROM jobflow.client_certificate_names")
        names = cur.fetchall()
        cur.execute("RESET ROLE")
    assert names == [("bank", [origin(nginx, 0)])]
    for who in (alice, "jobflow_admin"):
        with db.cursor() as cur:
            cur.execute("SET ROLE %s" % who)
            try:
                with pytest.raises(psycopg2.errors.InsufficientPrivilege):
                    cur.execute("SELECT private_key FROM jobflow.client_certificates")
            finally:
                cur.execute("ROLLBACK")
                cur.execute("RESET ROLE")
    # an encrypted key is refused without quoting it (a made-up one: psycopg2
    # puts parameters into the statement text, which the server logs with
    # the error; an application passes real bind parameters, not logged)
    enc_line = "MIIFHDBOBgkqhkiG9w0BBQ0wQTApBgkqhkiG9w0BBQwwHAQI" + uuid.uuid4().hex
    with pytest.raises(psycopg2.errors.FeatureNotSupported) as err:
        set_cert(db, alice, "enc", cert,
                 "-----BEGIN ENCRYPTED PRIVATE KEY-----\n" + enc_line
                 + "\n-----END ENCRYPTED PRIVATE KEY-----\n", [origin(nginx, 0)])
    assert enc_line not in str(err.value)
    # a key that does not fit its certificate fails in the handshake, as tls
    other_key = pki["certs"]["b"][1]
    set_cert(db, alice, "mismatch", cert, other_key, [origin(nginx, 0)])
    as_role(db, alice, "SELECT jobflow.set_queue_client_certificate('broken', 'mismatch')")
    _, bad, moved, tag = fire(db, alice, mtls_url(nginx, 0, "/pay"), queue="broken")
    assert bad["outcome"] != "succeeded" and moved == {"tls": 1}, (bad, moved)
    assert seen(nginx, tag) == []

    texts = [str(err.value), str(bad["error"]), str(bad["response"])]
    texts += [r["r"] for r in query(db, "SELECT t::text AS r FROM jobflow.tasks t"
                                        " WHERE owner = %s::regrole", (alice,))]
    texts += [r["r"] for r in query(db, "SELECT l::text AS r FROM jobflow.task_log l"
                                        " WHERE owner = %s::regrole", (alice,))]
    texts += [r["r"] for r in query(db, "SELECT q::text AS r FROM jobflow.queues q"
                                        " WHERE owner = %s::regrole", (alice,))]
    with open(server.logfile, errors="replace") as f:
        texts.append(f.read())
    for k in (key, other_key):
        for line in key_lines(k):
            assert not [t for t in texts if line in t], "a line of a private key leaked"


def test_without_a_certificate_or_with_another_cas_nginx_answers_400(db, nginx, pki, tenants):
    """nginx with ssl_verify_client on completes the handshake and answers
    400 (class 4xx) to a request without a client certificate, or with one
    of a CA it does not trust: it names the reason in its page."""
    alice = tenants[0]
    cert, key = pki["certs"]["x"]
    set_cert(db, alice, "foreign", cert, key, [origin(nginx, 0)])
    as_role(db, alice, "SELECT jobflow.set_queue_client_certificate('foreign', 'foreign')")
    _, none, moved_none, tag_none = fire(db, alice, mtls_url(nginx, 0, "/none"))
    _, other, moved_other, tag_other = fire(db, alice, mtls_url(nginx, 0, "/other"),
                                            queue="foreign")
    print("without a certificate:", none["outcome"], none["http_status"], moved_none)
    print("another CA's:", other["outcome"], other["http_status"], moved_other)
    assert none["http_status"] == 400 and moved_none == {"4xx": 1}
    assert "No required SSL certificate was sent" in (none["response"] or "")
    assert [(r["client_verify"], r["client_subject"]) for r in seen(nginx, tag_none)] == \
        [("NONE", "-")]
    assert other["http_status"] == 400 and moved_other == {"4xx": 1}
    assert "The SSL certificate error" in (other["response"] or "")
    (logged,) = seen(nginx, tag_other)
    assert logged["client_verify"].startswith("FAILED") and \
        logged["client_subject"] == "CN=client-x,O=jobflow"


def test_a_certificate_goes_only_to_its_origins(db, server, nginx, pki, tenants):
    """A certificate bound to origin A is not presented to origin B, even by
    the queue that presents it to A; a cross-origin redirect does not
    take it there either."""
    alice = tenants[0]
    cert, key = pki["certs"]["a"]
    set_cert(db, alice, "bank", cert, key, [origin(nginx, 0)])
    as_role(db, alice, "SELECT jobflow.set_queue_client_certificate('payments', 'bank')")
    _, to_a, _, tag_a = fire(db, alice, mtls_url(nginx, 0, "/a"), queue="payments")
    _, to_b, moved_b, tag_b = fire(db, alice, mtls_url(nginx, 1, "/b"), queue="payments")
    assert [r["client_subject"] for r in seen(nginx, tag_a)] == ["CN=client-a,O=jobflow"]
    assert to_a["http_status"] == 200
    assert [(r["client_verify"], r["client_subject"]) for r in seen(nginx, tag_b)] == \
        [("NONE", "-")]
    assert to_b["http_status"] == 400 and moved_b == {"4xx": 1}
    # a redirect to B is not followed, even where cross-origin redirects
    # are: its handshake would present the certificate
    server.set_guc(db, "jobflow.follow_cross_origin_redirects", "on")
    try:
        time.sleep(0.5)
        _, hop, moved, tag = fire(db, alice, mtls_url(nginx, 0, "/to-other"), queue="payments")
    finally:
        server.set_guc(db, "jobflow.follow_cross_origin_redirects", None)
        time.sleep(0.5)
    assert [(r["port"], r["status"]) for r in seen(nginx, tag)] == [(nginx.mtls_ports[0], 307)]
    assert moved == {"redirect": 1} and "client certificate" in hop["error"], (hop, moved)
    # origins of a client certificate are https ones
    with pytest.raises(psycopg2.errors.InvalidParameterValue):
        set_cert(db, alice, "plain", cert, key, ["http://127.0.0.1:1"])


def test_another_tenant_cannot_use_the_certificate(db, nginx, pki, tenants):
    """Another tenant naming the certificate meets the error of a name
    nobody has; its own tasks to the same origin, right after the owner's,
    go out without it (no pooled connection of the owner's carries them)."""
    alice, bob = tenants
    cert, key = pki["certs"]["a"]
    set_cert(db, alice, "bank", cert, key, [origin(nginx, 0)])
    as_role(db, alice, "SELECT jobflow.set_queue_client_certificate('payments', 'bank')")
    errors = []
    for name in ("bank", "no-such-certificate"):
        with pytest.raises(psycopg2.Error) as err:
            as_role(db, bob, "SELECT jobflow.set_queue_client_certificate('payments', %s)",
                    (name,))
        errors.append((err.value.pgcode, err.value.diag.message_primary.replace(name, "N")))
    assert errors[0] == errors[1] == ("42704", 'client certificate "N" does not exist')
    with pytest.raises(psycopg2.Error):
        as_role(db, bob, "SELECT jobflow.set_queue_client_certificate('payments', 'bank',"
                " owner => %s::regrole)", (alice,))
    _, mine, _, tag_a = fire(db, alice, mtls_url(nginx, 0, "/a"), queue="payments")
    _, theirs, _, tag_b = fire(db, bob, mtls_url(nginx, 0, "/b"), queue="payments")
    assert mine["http_status"] == 200 and theirs["http_status"] == 400
    assert [r["client_subject"] for r in seen(nginx, tag_a)] == ["CN=client-a,O=jobflow"]
    assert [r["client_subject"] for r in seen(nginx, tag_b)] == ["-"]
    # the certificate is public: bob stores it with a key of his own, and
    # fires right after alice, while her authenticated connection (and TLS
    # session) is pooled.  libcurl matches connections on the certificate,
    # not the key: without the owner and key digest in the blob, bob's
    # request would go out on alice's connection, as her.
    set_cert(db, bob, "copied", cert, pki["certs"]["b"][1], [origin(nginx, 0)])
    as_role(db, bob, "SELECT jobflow.set_queue_client_certificate('payments', 'copied')")
    _, mine, _, tag_a = fire(db, alice, mtls_url(nginx, 0, "/a2"), queue="payments")
    _, theirs, moved, tag_b = fire(db, bob, mtls_url(nginx, 0, "/b2"), queue="payments")
    assert mine["http_status"] == 200
    assert theirs["outcome"] != "succeeded" and moved == {"tls": 1}, (theirs, moved)
    assert seen(nginx, tag_b) == []


def test_connections_are_never_shared_between_certificates(db, nginx, pki, tenants):
    """Requests with certificate a, certificate b and none, interleaved to
    one origin while each one's connection stays pooled: each presents its
    own, and no nginx connection carries two subjects."""
    alice = tenants[0]
    for name in ("a", "b"):
        cert, key = pki["certs"][name]
        set_cert(db, alice, "cert-" + name, cert, key, [origin(nginx, 0)])
        as_role(db, alice, "SELECT jobflow.set_queue_client_certificate(%s, %s)",
                ("q-" + name, "cert-" + name))
    want = {"q-a": "CN=client-a,O=jobflow", "q-b": "CN=client-b,O=jobflow", "default": "-"}
    tags = []
    for _ in range(3):
        for queue in ("q-a", "q-b", "default"):
            _, row, _, tag = fire(db, alice, mtls_url(nginx, 0, "/r"), queue=queue)
            tags.append((queue, tag, row["http_status"]))
    subjects_of = {}
    for queue, tag, status in tags:
        (r,) = seen(nginx, tag)
        assert r["client_subject"] == want[queue], (queue, r)
        assert status == (400 if queue == "default" else 200)
        subjects_of.setdefault(r["connection"], set()).add(r["client_subject"])
    assert all(len(s) == 1 for s in subjects_of.values()), subjects_of
    print("connections per subject:",
          {s: sum(1 for v in subjects_of.values() if s in v) for s in want.values()})


class HandshakeRefuser:
    """A TLS server (Python's ssl module) that requires a client certificate
    of the client CA in the handshake itself (CERT_REQUIRED), at most TLS
    1.2 or 1.3; it answers 200 to whatever gets through."""

    def __init__(self, cert, key, client_ca, max_version):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        self.ctx.load_verify_locations(client_ca)
        self.ctx.verify_mode = ssl.CERT_REQUIRED
        self.ctx.maximum_version = max_version
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)       # stop() is seen within 0.1 s
        self.port = self.sock.getsockname()[1]
        self.refused = []
        self.stopping = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            c.settimeout(5)
            try:
                t = self.ctx.wrap_socket(c, server_side=True)
                t.recv(65536)
                t.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
                t.close()
            except (ssl.SSLError, OSError) as e:
                self.refused.append(str(e))
                c.close()

    def stop(self):
        self.stopping = True
        self.thread.join(5)
        self.sock.close()


@pytest.mark.parametrize("version", ["1.2", "1.3"])
def test_a_receiver_that_refuses_in_the_handshake(db, nginx, pki, tenants, version):
    """Against a receiver that refuses in the handshake, a callback without
    a certificate or with another CA's fails; over TLS 1.2 as class tls.
    Over TLS 1.3 the client's part of the handshake is over before the
    server's verdict, which comes as an alert while the request is sent:
    the figures print what it counts as."""
    alice = tenants[0]
    srv = HandshakeRefuser(nginx.cert, nginx.key, pki["client_ca"],
                           ssl.TLSVersion.TLSv1_2 if version == "1.2" else ssl.TLSVersion.TLSv1_3)
    try:
        url = "https://127.0.0.1:%d/h" % srv.port
        for name in ("a", "x"):
            cert, key = pki["certs"][name]
            set_cert(db, alice, "h-" + name, cert, key, ["https://127.0.0.1:%d" % srv.port])
            as_role(db, alice, "SELECT jobflow.set_queue_client_certificate(%s, %s)",
                    ("h-" + name, "h-" + name))
        _, good, _, _ = fire(db, alice, url, queue="h-a")
        _, none, moved_none, _ = fire(db, alice, url)
        _, other, moved_other, _ = fire(db, alice, url, queue="h-x")
        print("TLS %s: without %s %s (%s), another CA's %s %s (%s)" % (
            version, none["outcome"], moved_none, none["error"],
            other["outcome"], moved_other, other["error"]))
        assert good["http_status"] == 200
        assert none["outcome"] != "succeeded" and other["outcome"] != "succeeded"
        assert len(srv.refused) >= 2
        if version == "1.2":
            assert moved_none == {"tls": 1} and moved_other == {"tls": 1}
        else:
            # the alert, when curl reads it; a reset, when it comes first
            assert set(moved_none) | set(moved_other) <= {"tls", "other"}
    finally:
        srv.stop()


def test_tls_ca_path_names_a_directory_the_worker_trusts(db, server, nginx, tenants):
    """jobflow.tls_ca_path takes an absolute path only; a directory that
    holds the receiver's CA under its hashed name (openssl rehash) is
    trusted without jobflow.tls_ca_file, and one without it is not."""
    with db.cursor() as cur:
        with pytest.raises(psycopg2.Error) as err:
            cur.execute("ALTER SYSTEM SET jobflow.tls_ca_path = 'certs'")
    assert err.value.pgcode == "22023"
    good, empty = tempfile.mkdtemp(prefix="jobflow-capath-"), tempfile.mkdtemp(prefix="jobflow-capath-")
    try:
        for d in (good, empty):
            os.chmod(d, 0o755)
        shutil.copy(nginx.ca, os.path.join(good, "receiver-ca.pem"))
        os.chmod(os.path.join(good, "receiver-ca.pem"), 0o644)
        openssl("rehash", good)
        server.set_guc(db, "jobflow.tls_ca_file", None)
        results = {}
        for name, d in (("good", good), ("empty", empty)):
            server.set_guc(db, "jobflow.tls_ca_path", d)
            time.sleep(0.5)
            _, row, moved, _ = fire(db, tenants[0], nginx.url("https", "/capath-" + name))
            results[name] = (row["http_status"], moved)
        print(results)
        assert results["good"] == (200, {"2xx": 1})
        assert results["empty"][1] == {"tls": 1}
    finally:
        server.set_guc(db, "jobflow.tls_ca_path", None)
        server.set_guc(db, "jobflow.tls_ca_file", nginx.ca)
        time.sleep(0.5)
        shutil.rmtree(good, ignore_errors=True)
        shutil.rmtree(empty, ignore_errors=True)


def test_a_dropped_roles_certificates_go_with_it(db, pki):
    """DROP OWNED BY and DROP ROLE delete the role's client certificates
    (and with the queues that named them)."""
    cert, key = pki["certs"]["a"]
    roles = ["jf_mtls_drop_%s" % uuid.uuid4().hex[:8] for _ in range(2)]
    with db.cursor() as cur:
        for r in roles:
            cur.execute("CREATE ROLE %s" % r)
            cur.execute("GRANT jobflow_user TO %s" % r)
    for r in roles:
        set_cert(db, r, "bank", cert, key, ["https://127.0.0.1:1"])
        as_role(db, r, "SELECT jobflow.set_queue_client_certificate('payments', 'bank')")

    def left(r):
        return query(db, "SELECT (SELECT count(*) FROM jobflow.client_certificates c"
                         "         WHERE c.owner::text = %s) AS certs,"
                         "       (SELECT count(*) FROM jobflow.queues q"
                         "         WHERE q.owner::text = %s) AS queues", (r, r))[0]
    assert left(roles[0]) == {"certs": 1, "queues": 1}
    with db.cursor() as cur:
        cur.execute("DROP OWNED BY %s" % roles[0])
        assert left(roles[0]) == {"certs": 0, "queues": 0}
        oid = query(db, "SELECT oid FROM pg_roles WHERE rolname = %s", (roles[1],))[0]["oid"]
        cur.execute("DROP ROLE %s" % roles[1])
        assert query(db, "SELECT count(*) AS n FROM jobflow.client_certificates"
                         " WHERE owner::oid = %s", (oid,))[0]["n"] == 0
        cur.execute("DROP ROLE %s" % roles[0])
