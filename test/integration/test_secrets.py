# -------------------------------------------------------------------------
#
# test_secrets.py
#     Secrets that stay secret (issue 11, item 3): a header refers to a
#     named secret ({"secret": "name"}); the worker sends its value; task
#     rows, the log and errors never hold it; no tenant reads it back; a
#     missing secret fails at schedule time; a secret in use cannot be
#     dropped, even by a transaction racing with the one scheduling.
#
# -------------------------------------------------------------------------

import json
import threading
import uuid

import psycopg2
import pytest

from conftest import query, wait_final


@pytest.fixture
def tenants(db):
    names = ["jf_sec_%s" % uuid.uuid4().hex[:8] for _ in range(2)]
    with db.cursor() as cur:
        for n in names:
            cur.execute("CREATE ROLE %s" % n)
            cur.execute("GRANT jobflow_user TO %s" % n)
    yield names
    with db.cursor() as cur:
        cur.execute("RESET ROLE")
        cur.execute("UPDATE jobflow.tasks SET state = 'cancelled' WHERE state = 'pending'"
                    " AND owner::text = ANY(%s)", (names,))
        cur.execute("DELETE FROM jobflow.secrets WHERE owner::text = ANY(%s)", (names,))


def as_role(conn, role, sql, args=None):
    with conn.cursor() as cur:
        cur.execute("SET ROLE %s" % role)
        try:
            cur.execute(sql, args)
            return cur.fetchone()[0] if cur.description else None
        finally:
            cur.execute("RESET ROLE")


AUTH = json.dumps({"Authorization": {"secret": "stripe"}, "X-Test": "plain"})
# where the tasks below that need no receiver are sent (a closed port)
NOWHERE = "http://127.0.0.1:9"


def origin_of(url):
    """scheme://host:port of a receiver URL, as secrets are bound to."""
    return "/".join(url.split("/")[:3])


def test_secret_is_substituted_and_never_stored(db, receiver, tenants):
    alice = tenants[0]
    value = "Bearer sk_test_%s" % uuid.uuid4().hex
    url, tag = receiver.unique_url()
    # a bind parameter: the value is in no statement text
    as_role(db, alice, "SELECT jobflow.set_secret('stripe', %s, ARRAY[%s])", (value, origin_of(url)))
    task = as_role(db, alice, "SELECT jobflow.schedule(%s, headers => %s::jsonb)", (url, AUTH))
    wait_final(db, [task])
    req = receiver.wait_for(lambda r: ("t=" + tag) in r["query"])[-1]
    assert req["headers"]["authorization"] == value
    assert req["headers"]["x-test"] == "plain"
    row = query(db, "SELECT t::text AS r, headers FROM jobflow.tasks t WHERE id = %s", (task,))[0]
    assert value not in row["r"]
    assert row["headers"] == {"Authorization": {"secret": "stripe"}, "X-Test": "plain"}
    assert not query(db, "SELECT 1 FROM jobflow.task_log l WHERE l::text LIKE %s",
                     ("%" + value + "%",))
    # replaced: the next callback sends the new value
    value2 = value + "-2"
    as_role(db, alice, "SELECT jobflow.set_secret('stripe', %s, ARRAY[%s])", (value2, origin_of(url)))
    url, tag = receiver.unique_url()
    task = as_role(db, alice, "SELECT jobflow.schedule(%s, headers => %s::jsonb)", (url, AUTH))
    wait_final(db, [task])
    assert receiver.wait_for(lambda r: ("t=" + tag) in r["query"])[-1]["headers"]["authorization"] == value2


def test_nobody_reads_a_secret_back(db, tenants):
    alice = tenants[0]
    as_role(db, alice, "SELECT jobflow.set_secret('k', 'v-secret-value', ARRAY[%s])", (NOWHERE,))
    with db.cursor() as cur:
        cur.execute("SET ROLE %s" % alice)
        with pytest.raises(psycopg2.errors.InsufficientPrivilege):
            cur.execute("SELECT value FROM jobflow.secrets")
        cur.execute("RESET ROLE")
    for role in ("jobflow_user", "jobflow_admin"):
        assert not query(db, "SELECT has_table_privilege(%s, 'jobflow.secrets', 'SELECT') AS p",
                         (role,))[0]["p"]
    assert as_role(db, alice, "SELECT array_agg(name)::text FROM jobflow.secret_names") == "{k}"
    cols = [r["attname"] for r in query(
        db, "SELECT attname FROM pg_attribute WHERE attrelid = 'jobflow.secret_names'::regclass"
            " AND attnum > 0")]
    assert "value" not in cols


def test_missing_or_foreign_secret_fails_at_schedule(db, tenants):
    alice, bob = tenants
    as_role(db, alice, "SELECT jobflow.set_secret('stripe', 'a', ARRAY[%s])", (NOWHERE,))
    with pytest.raises(psycopg2.errors.UndefinedObject) as e:
        as_role(db, bob, "SELECT jobflow.schedule('http://127.0.0.1:9/x', headers => %s::jsonb)", (AUTH,))
    assert 'secret "stripe" does not exist' in str(e.value)
    db.cursor().execute("RESET ROLE")
    with pytest.raises(psycopg2.errors.InvalidParameterValue):
        as_role(db, alice, "SELECT jobflow.schedule('http://127.0.0.1:9/x',"
                           " headers => '{\"A\": {\"secret\": \"stripe\", \"x\": 1}}')")
    db.cursor().execute("RESET ROLE")
    with pytest.raises(psycopg2.errors.InvalidParameterValue) as e:
        as_role(db, alice, "SELECT jobflow.set_secret('bad', %s, ARRAY[%s])",
                ("line\r\nX-Injected: 1", NOWHERE))
    assert "X-Injected" not in str(e.value)
    db.cursor().execute("RESET ROLE")
    with pytest.raises(psycopg2.errors.InsufficientPrivilege):
        as_role(db, bob, "SELECT jobflow.set_secret('stripe', 'b', ARRAY[%s], %s)", (NOWHERE, alice))


def test_secret_in_use_cannot_be_dropped(db, tenants):
    alice = tenants[0]
    as_role(db, alice, "SELECT jobflow.set_secret('stripe', 'a', ARRAY[%s])", (NOWHERE,))
    task = as_role(db, alice, "SELECT jobflow.schedule('http://127.0.0.1:9/x',"
                              " run_at => now() + interval '1 hour', headers => %s::jsonb)", (AUTH,))
    with pytest.raises(psycopg2.errors.ObjectInUse):
        as_role(db, alice, "SELECT jobflow.drop_secret('stripe')")
    db.cursor().execute("RESET ROLE")
    as_role(db, alice, "SELECT jobflow.cancel(%s)", (task,))
    assert as_role(db, alice, "SELECT jobflow.drop_secret('stripe')") is True
    assert as_role(db, alice, "SELECT jobflow.drop_secret('stripe')") is False


def test_drop_racing_with_schedule(connect, tenants):
    """A drop_secret() racing with an uncommitted schedule() that uses the
    secret waits for it, then refuses."""
    alice = tenants[0]
    first = connect(autocommit=False)
    second = connect()
    as_role(second, alice, "SELECT jobflow.set_secret('stripe', 'a', ARRAY[%s])", (NOWHERE,))
    task = as_role(first, alice, "SELECT jobflow.schedule('http://127.0.0.1:9/x',"
                                 " run_at => now() + interval '1 hour', headers => %s::jsonb)", (AUTH,))
    result = {}

    def drop():
        try:
            result["dropped"] = as_role(second, alice, "SELECT jobflow.drop_secret('stripe')")
        except Exception as e:  # reported below
            result["error"] = e

    t = threading.Thread(target=drop)
    t.start()
    t.join(1.0)
    assert t.is_alive(), "drop_secret did not wait for the scheduling transaction"
    first.commit()
    t.join(20)
    assert isinstance(result.get("error"), psycopg2.errors.ObjectInUse), result
    second.cursor().execute("RESET ROLE")
    assert query(second, "SELECT count(*) AS n FROM jobflow.secret_names WHERE owner::text = %s",
                 (alice,))[0]["n"] == 1
    as_role(second, alice, "SELECT jobflow.cancel(%s)", (task,))
