# -------------------------------------------------------------------------
#
# test_signing.py
#     Standard Webhooks signatures (issue 11, item 2) on real callbacks:
#     verified with the standardwebhooks reference library (Node, installed
#     by scripts/test.sh into test/node) and with Python's hmac module;
#     webhook-id the same on every attempt; rotation signs with both
#     secrets; revocation stops signing; a tampered body fails; tenants can
#     never read a secret back; admins manage any role's secrets.
#
# -------------------------------------------------------------------------

import base64
import hashlib
import hmac
import json
import os
import subprocess
import time
import uuid

import psycopg2
import pytest

from conftest import REPO, query, wait_final, as_role
from signatures import python_verify

NODE_VERIFY = os.path.join(REPO, "test", "node", "verify.js")


@pytest.fixture
def tenant(db):
    """A fresh application role; its secrets and pending tasks go at the end."""
    name = "jf_sig_%s" % uuid.uuid4().hex[:8]
    with db.cursor() as cur:
        cur.execute("CREATE ROLE %s" % name)
        cur.execute("GRANT jobflow_user TO %s" % name)
    yield name
    with db.cursor() as cur:
        cur.execute("RESET ROLE")
        cur.execute("DELETE FROM jobflow.signing_secrets WHERE owner::text = %s", (name,))
        cur.execute("UPDATE jobflow.tasks SET state = 'cancelled' WHERE state = 'pending'"
                    " AND owner::text = %s", (name,))


def fire(db, receiver, role, body, path="/ok"):
    """As role, schedule a callback with body (jsonb); wait for it; return
    (task id, the request the receiver got)."""
    url, tag = receiver.unique_url(path)
    task = as_role(db, role, "SELECT jobflow.schedule(%s, body => %s::jsonb)", (url, json.dumps(body)))
    wait_final(db, [task])
    got = receiver.wait_for(lambda r: ("t=" + tag) in r["query"])
    return task, got[-1]


def node_verify(secret, headers, body):
    """The standardwebhooks reference library: (ok, result)."""
    out = subprocess.run(["node", NODE_VERIFY],
                         input=json.dumps({"secret": secret, "headers": headers,
                                           "body_b64": base64.b64encode(body.encode()).decode()}),
                         capture_output=True, text=True, timeout=60)
    res = json.loads(out.stdout)
    return res["ok"], res


def webhook_headers(req):
    return {k: req["headers"][k] for k in ("webhook-id", "webhook-timestamp", "webhook-signature")}


@pytest.mark.smoke
def test_specification_test_vector(db):
    """The example of the Standard Webhooks specification."""
    sig = query(db, "SELECT jobflow._webhook_signature(%s, %s, %s, convert_to(%s, 'UTF8')) AS s",
                ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek",
                 1614265330, '{"test": 2432232314}'))[0]["s"]
    assert sig == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_unsigned_without_secret(db, receiver, tenant):
    _, req = fire(db, receiver, tenant, {"n": 0})
    assert "webhook-signature" not in req["headers"]


@pytest.mark.smoke
def test_signed_callback_verifies(db, receiver, tenant):
    secret = as_role(db, tenant, "SELECT jobflow.create_signing_secret()")
    assert secret.startswith("whsec_") and len(base64.b64decode(secret[6:])) == 32
    task, req = fire(db, receiver, tenant, {"order": 42, "note": "ünïcode"})
    h = req["headers"]
    installation = query(db, "SELECT id FROM jobflow.installation ORDER BY created_at, id LIMIT 1")[0]["id"]
    assert h["webhook-id"] == "jf_%s_%d" % (installation, task)
    assert abs(int(h["webhook-timestamp"]) - time.time()) < 60
    assert len(h["webhook-signature"].split(" ")) == 1
    assert python_verify(secret, req)
    ok, res = node_verify(secret, webhook_headers(req), req["body"])
    assert ok, res
    assert res["payload"] == {"order": 42, "note": "ünïcode"}
    # a tampered body, or another secret, does not verify
    ok, res = node_verify(secret, webhook_headers(req), req["body"].replace("42", "43"))
    assert not ok and "signature" in res["error"].lower()
    other = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    assert not node_verify(other, webhook_headers(req), req["body"])[0]
    assert not python_verify(other, req)


def test_webhook_id_same_on_every_attempt(db, receiver, tenant):
    secret = as_role(db, tenant, "SELECT jobflow.create_signing_secret()")
    url, tag = receiver.unique_url("/flaky/2")
    task = as_role(db, tenant, "SELECT jobflow.schedule(%s, body => '{\"a\": 1}')", (url,))
    wait_final(db, [task], timeout=30)
    got = receiver.wait_for(lambda r: ("t=" + tag) in r["query"], n=3)
    assert [r["headers"]["x-jobflow-attempt"] for r in got] == ["1", "2", "3"]
    assert len({r["headers"]["webhook-id"] for r in got}) == 1
    for r in got:
        assert node_verify(secret, webhook_headers(r), r["body"])[0]


def test_rotation_signs_with_both_then_revoke(db, receiver, tenant):
    old = as_role(db, tenant, "SELECT jobflow.create_signing_secret()")
    new = as_role(db, tenant, "SELECT jobflow.create_signing_secret(grace => interval '1 hour')")
    assert new != old
    _, req = fire(db, receiver, tenant, {"rotate": 1})
    assert len(req["headers"]["webhook-signature"].split(" ")) == 2
    assert node_verify(old, webhook_headers(req), req["body"])[0]
    assert node_verify(new, webhook_headers(req), req["body"])[0]
    assert python_verify(old, req) and python_verify(new, req)
    keys = query(db, "SELECT expires_at IS NULL AS newest FROM jobflow.signing_keys"
                     " WHERE owner::text = %s ORDER BY created_at", (tenant,))
    assert [k["newest"] for k in keys] == [False, True]

    # ending the grace at once: only the new secret signs
    assert as_role(db, tenant, "SELECT jobflow.revoke_signing_secret(only_previous => true)") == 1
    _, req = fire(db, receiver, tenant, {"rotate": 2})
    assert len(req["headers"]["webhook-signature"].split(" ")) == 1
    assert node_verify(new, webhook_headers(req), req["body"])[0]
    assert not node_verify(old, webhook_headers(req), req["body"])[0]

    # revoked: unsigned again
    assert as_role(db, tenant, "SELECT jobflow.revoke_signing_secret()") == 1
    _, req = fire(db, receiver, tenant, {"rotate": 3})
    assert "webhook-signature" not in req["headers"]


def test_grace_period_ends(db, receiver, tenant):
    old = as_role(db, tenant, "SELECT jobflow.create_signing_secret()")
    new = as_role(db, tenant, "SELECT jobflow.create_signing_secret(grace => interval '0')")
    _, req = fire(db, receiver, tenant, {"grace": 0})
    assert len(req["headers"]["webhook-signature"].split(" ")) == 1
    assert node_verify(new, webhook_headers(req), req["body"])[0]
    assert not node_verify(old, webhook_headers(req), req["body"])[0]


def test_secrets_are_never_readable(db, tenant):
    secret = as_role(db, tenant, "SELECT jobflow.create_signing_secret()")
    with db.cursor() as cur:
        cur.execute("SET ROLE %s" % tenant)
        with pytest.raises(psycopg2.errors.InsufficientPrivilege):
            cur.execute("SELECT * FROM jobflow.signing_secrets")
        cur.execute("RESET ROLE")
    # nor by the jobflow roles themselves
    for role in ("jobflow_user", "jobflow_admin"):
        assert not query(db, "SELECT has_table_privilege(%s, 'jobflow.signing_secrets', 'SELECT')"
                             " AS p", (role,))[0]["p"]
    # what a tenant may see carries no value
    cols = [r["attname"] for r in query(
        db, "SELECT attname FROM pg_attribute WHERE attrelid = 'jobflow.signing_keys'::regclass"
            " AND attnum > 0")]
    assert sorted(cols) == ["created_at", "expires_at", "owner"]
    # the secret is in no statement text, no task row, no log row
    raw = base64.b64decode(secret[6:])
    assert not query(db, "SELECT 1 FROM pg_stat_activity WHERE query LIKE %s"
                         " AND pid <> pg_backend_pid()",
                     ("%" + secret[6:16] + "%",))
    assert not query(db, "SELECT 1 FROM jobflow.tasks t WHERE t::text LIKE %s",
                     ("%" + secret[6:16] + "%",))
    assert query(db, "SELECT count(*) AS n FROM jobflow.signing_secrets WHERE secret = %s",
                 (raw,))[0]["n"] == 1


def test_only_the_role_or_an_admin_manages_secrets(db, tenant):
    other = "jf_sig_%s" % uuid.uuid4().hex[:8]
    ops = "jf_sig_%s" % uuid.uuid4().hex[:8]
    with db.cursor() as cur:
        cur.execute("CREATE ROLE %s" % other)
        cur.execute("GRANT jobflow_user TO %s" % other)
        cur.execute("CREATE ROLE %s" % ops)
        cur.execute("GRANT jobflow_admin TO %s" % ops)
    try:
        with db.cursor() as cur:
            cur.execute("SET ROLE %s" % other)
            with pytest.raises(psycopg2.errors.InsufficientPrivilege):
                cur.execute("SELECT jobflow.create_signing_secret(%s)", (tenant,))
            with pytest.raises(psycopg2.errors.InsufficientPrivilege):
                cur.execute("SELECT jobflow.revoke_signing_secret(%s)", (tenant,))
            cur.execute("RESET ROLE")
        assert as_role(db, ops, "SELECT jobflow.create_signing_secret(%s)", (tenant,)).startswith("whsec_")
        assert query(db, "SELECT count(*) AS n FROM jobflow.signing_secrets WHERE owner::text = %s",
                     (tenant,))[0]["n"] == 1
        assert as_role(db, ops, "SELECT jobflow.revoke_signing_secret(%s)", (tenant,)) == 1
    finally:
        with db.cursor() as cur:
            cur.execute("RESET ROLE")
            cur.execute("DROP ROLE %s" % other)
            cur.execute("DROP ROLE %s" % ops)


def test_webhook_headers_are_reserved(db):
    for name in ("webhook-id", "Webhook-Signature", "webhook-timestamp"):
        with pytest.raises(psycopg2.errors.InvalidParameterValue):
            db.cursor().execute("SELECT jobflow.schedule('http://127.0.0.1:9/x', headers => %s::jsonb)",
                                (json.dumps({name: "x"}),))


def test_new_incarnation_new_webhook_ids(connect):
    """DROP/CREATE EXTENSION restarts task ids; the installation token in
    webhook-id changes, so ids of the two incarnations cannot collide."""
    admin = connect(dbname="postgres")
    name = "jf_sig_inc_%s" % uuid.uuid4().hex[:8]
    with admin.cursor() as cur:
        cur.execute("CREATE DATABASE %s" % name)
    try:
        conn = connect(dbname=name)
        tokens = []
        with conn.cursor() as cur:
            cur.execute("SET client_min_messages = error")
            for _ in range(2):
                cur.execute("CREATE EXTENSION jobflow")
                cur.execute("SELECT id FROM jobflow.installation")
                tokens += [r[0] for r in cur.fetchall()]
                cur.execute("DROP EXTENSION jobflow")
        conn.close()
        assert len(tokens) == 2 and tokens[0] != tokens[1]
        assert all(len(t) == 12 and int(t, 16) >= 0 for t in tokens)
    finally:
        with admin.cursor() as cur:
            cur.execute("DROP DATABASE %s" % name)


def test_binary_body_sent_and_signed_as_is(db, receiver, tenant):
    """A bytea body goes out byte for byte, zero bytes included, with its
    content type, and the signature covers exactly those bytes."""
    secret = as_role(db, tenant, "SELECT jobflow.create_signing_secret()")
    data = bytes([0, 255, 1, 128, 0, 10, 13]) + b"png"
    url, tag = receiver.unique_url()
    task = as_role(db, tenant, "SELECT jobflow.schedule(%s, body_bytes => %s, content_type => 'image/png')",
                   (url, psycopg2.Binary(data)))
    wait_final(db, [task])
    req = receiver.wait_for(lambda r: ("t=" + tag) in r["query"])[-1]
    assert base64.b64decode(req["body_b64"]) == data
    assert req["headers"]["content-type"] == "image/png"
    assert req["headers"]["content-length"] == str(len(data))
    h = req["headers"]
    key = base64.b64decode(secret[len("whsec_"):])
    msg = ("%s.%s." % (h["webhook-id"], h["webhook-timestamp"])).encode() + data
    assert h["webhook-signature"] == "v1," + base64.b64encode(
        hmac.new(key, msg, hashlib.sha256).digest()).decode()


def test_json_content_type_header_sent_once(db, receiver):
    """pg_net's habit: a Content-Type header with a jsonb body."""
    url, tag = receiver.unique_url()
    task = query(db, "SELECT jobflow.schedule(%s, body => '{\"a\": 1}',"
                     " headers => '{\"Content-Type\": \"application/json; charset=utf-8\"}') AS id",
                 (url,))[0]["id"]
    wait_final(db, [task])
    req = receiver.wait_for(lambda r: ("t=" + tag) in r["query"])[-1]
    assert req["headers"]["content-type"] == "application/json; charset=utf-8"
    assert "content_types" not in req, req.get("content_types")
    assert task_state(db, task) == "succeeded"


def task_state(db, task):
    return query(db, "SELECT state::text AS s FROM jobflow.tasks WHERE id = %s", (task,))[0]["s"]
