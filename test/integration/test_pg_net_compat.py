# -------------------------------------------------------------------------
#
# test_pg_net_compat.py
#     Extension jobflow_net: application code written for pg_net runs
#     unchanged on it, and gives what real pg_net gives where
#     docs/pg-net.md says the two match.
#
# The test builds its own server (test/pgnode.py) next to the suite's
# cluster, with shared_preload_libraries = 'jobflow,pg_net' and two
# databases: "pgnet" with pg_net (built from the peers' source archive by
# scripts/peers.sh and installed into the PostgreSQL under test; its
# worker serves pg_net.database_name), and "jfnet" with jobflow_net.  The
# same application (APP: a table whose trigger calls net.http_post with a
# jsonb body and headers, then net.http_get with params, net.http_delete,
# a request that times out, one answered 404, one to a closed port, and a
# row inserted and rolled back) runs in both; it polls net._http_response
# and collects with net._http_collect_response, as pg_net's users do.
# Then, per request: what the receiver got (method, path, query, body,
# the headers the application set), and what the application reads back
# (status code, body, timed_out, whether error_msg is set, the collected
# status, message and response) must be the same.  What docs/pg-net.md
# lists as different is checked as different: response headers (NULL
# here), the text of error_msg, net.http_collect_response (pg_net's fails
# with "query has no destination for result data").
#
# The other tests: each extension refuses to be created beside the other;
# a request is sent once unless jobflow.net_max_attempts asks for more;
# a tenant sees and collects only its own responses, and a role without
# jobflow_user cannot call net.http_*; every object of schema net has a
# row in the table of docs/user-guide.md ("Who may do what", which
# test_privileges.py checks against the catalog, as test_hostile.py takes
# every path it allows), every function runs as its caller with
# search_path pinned and every object has a comment; a tenant that planted
# functions and operators shadowing pg_catalog's on its search_path calls
# every net object and none of them runs what it planted.
#
# Without pg_net installed the comparison is skipped, unless JOBFLOW_PG_NET
# is set (scripts/test.sh sets it once it has installed pg_net): then it
# fails.
#
# -------------------------------------------------------------------------

import json
import os
import re
import subprocess
import uuid

import psycopg2
import pytest

import pgnode
from pgnode import wait_until

BASE_PORT = int(os.environ.get("PGPORT", "54329")) + 30

# the application: plain pg_net usage, run as it is in both databases
APP = """
CREATE TABLE app_config (base text NOT NULL);
CREATE TABLE orders (
    id serial PRIMARY KEY,
    item text NOT NULL,
    request_id bigint
);
CREATE FUNCTION order_webhook() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.request_id := net.http_post(
        url := (SELECT base FROM app_config) || '/echo',
        body := jsonb_build_object('order', NEW.id, 'item', NEW.item),
        params := jsonb_build_object('source', 'orders'),
        headers := jsonb_build_object('Content-Type', 'application/json',
                                      'Authorization', 'Bearer app-token'),
        timeout_milliseconds := 2000);
    RETURN NEW;
END
$$;
CREATE TRIGGER order_webhook BEFORE INSERT ON orders
    FOR EACH ROW EXECUTE FUNCTION order_webhook();
"""

# name -> the call the application makes (base is the receiver's url)
CALLS = [
    ("get_params", "SELECT net.http_get(url := %(base)s || '/echo',"
                   " params := '{\"q\": \"a b&c\", \"lang\": \"fr-\u00e9\", \"none\": null}',"
                   " headers := '{\"X-Api-Key\": \"k1\"}')"),
    ("delete", "SELECT net.http_delete(url := %(base)s || '/ok', params := '{\"id\": \"7\"}')"),
    ("delete_body", "SELECT net.http_delete(%(base)s || '/echo', body := '{\"why\": \"gone\"}')"),
    ("timeout", "SELECT net.http_get(%(base)s || '/delay/3000', timeout_milliseconds := 300)"),
    ("not_found", "SELECT net.http_get(%(base)s || '/status/404')"),
    ("post_default", "SELECT net.http_post(%(base)s || '/echo')"),
    ("refused", "SELECT net.http_get('http://127.0.0.1:1/ok')"),
]


def pg_net_available(node):
    return node.value("SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_net'",
                      dbname="postgres") > 0


@pytest.fixture(scope="module")
def node():
    """A server with jobflow and pg_net preloaded; databases pgnet (pg_net
    there, or None without pg_net) and jfnet (jobflow_net); stopped at the
    end."""
    with pgnode.scratch_dir("jobflow-pgnet-") as top:
        n = pgnode.Node(top, "pgnet", BASE_PORT)
        try:
            n.initdb()
            n.configure()
            have = os.path.exists(os.path.join(
                subprocess_out([n.bin("pg_config"), "--pkglibdir"]), "pg_net.so"))
            if have:
                pgnode.append_as_server_user(os.path.join(n.data, "postgresql.conf"),
                                             "shared_preload_libraries = 'jobflow,pg_net'\n"
                                             "pg_net.database_name = 'pgnet'\n"
                                             "max_worker_processes = 16\n")
            n.start()
            n.query("CREATE DATABASE jfnet")
            n.query("CREATE EXTENSION jobflow_net CASCADE", dbname="jfnet")
            n.have_pg_net = have
            if have:
                n.query("CREATE DATABASE pgnet")
                n.query("CREATE EXTENSION pg_net", dbname="pgnet")
            yield n
        finally:
            n.stop_quietly()


def subprocess_out(cmd):
    """What cmd prints, stripped."""
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()


def need_pg_net(node):
    if not node.have_pg_net:
        if os.environ.get("JOBFLOW_PG_NET"):
            pytest.fail("JOBFLOW_PG_NET is set but pg_net is not installed in %s" % node.bindir)
        pytest.skip("pg_net is not installed (scripts/peers.sh installs it)")


def run_app(node, dbname, receiver):
    """The application, in dbname: its schema, two orders (and one rolled
    back), then CALLS; waits, as pg_net users do, until net._http_response
    has a row for every request; returns {name: request id}."""
    base = receiver.url("")
    conn = node.connect(dbname)
    try:
        with conn.cursor() as cur:
            cur.execute(APP)
            cur.execute("INSERT INTO app_config VALUES (%s)", (base,))
        ids = {}
        conn.autocommit = False
        with conn.cursor() as cur:
            cur.execute("INSERT INTO orders (item) VALUES ('apple'), ('pear') RETURNING item, request_id")
            for item, rid in cur.fetchall():
                ids["order_" + item] = rid
        conn.commit()
        with conn.cursor() as cur:
            cur.execute("INSERT INTO orders (item) VALUES ('ghost') RETURNING request_id")
            ghost = cur.fetchone()[0]
        conn.rollback()
        conn.autocommit = True
        with conn.cursor() as cur:
            for name, sql in CALLS:
                cur.execute(sql, {"base": base})
                ids[name] = cur.fetchone()[0]

        def all_there():
            with conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM net._http_response WHERE id = ANY(%s)",
                            (list(ids.values()),))
                return cur.fetchone()[0] == len(ids)
        wait_until(all_there, 30, "net._http_response rows in %s" % dbname)
        return ids, ghost
    finally:
        conn.close()


def read_back(node, dbname, ids):
    """What the application reads: per request, its net._http_response
    row and net._http_collect_response()."""
    out = {}
    conn = node.connect(dbname)
    try:
        with conn.cursor() as cur:
            for name, rid in ids.items():
                cur.execute("SELECT status_code, content, timed_out, error_msg, headers"
                            "  FROM net._http_response WHERE id = %s", (rid,))
                status, content, timed_out, error_msg, headers = cur.fetchone()
                cur.execute("SELECT (c).status::text, (c).message, ((c).response).status_code,"
                            "       ((c).response).body"
                            "  FROM net._http_collect_response(%s) AS c", (rid,))
                c_status, c_message, c_code, c_body = cur.fetchone()
                out[name] = {
                    "status_code": status, "content": content, "timed_out": timed_out,
                    "error": error_msg is not None, "error_msg": error_msg, "headers": headers,
                    "collected": (c_status, c_message if c_status == "SUCCESS" else None,
                                  c_code, c_body),
                }
    finally:
        conn.close()
    return out


@pytest.mark.smoke
def test_pg_net_application_runs_unchanged_and_matches_pg_net(node, receiver):
    need_pg_net(node)
    results = {}
    for dbname in ("pgnet", "jfnet"):
        ids, ghost = run_app(node, dbname, receiver)
        results[dbname] = (ids, ghost, read_back(node, dbname, ids))

    pg_ids, pg_ghost, pg = results["pgnet"]
    jf_ids, jf_ghost, jf = results["jfnet"]
    print("pg_net:      %s" % json.dumps(pg, default=str, indent=1))
    print("jobflow_net: %s" % json.dumps(jf, default=str, indent=1))

    # the same requests, read back the same
    assert set(pg) == set(jf)
    for name in pg:
        for key in ("status_code", "content", "timed_out", "error", "collected"):
            assert jf[name][key] == pg[name][key], (name, key, pg[name], jf[name])

    # and what they say is right (so that both being wrong the same way fails)
    assert jf["order_apple"]["status_code"] == 200
    assert json.loads(jf["order_apple"]["content"]) == {"order": 1, "item": "apple"}
    assert jf["order_apple"]["collected"][:2] == ("SUCCESS", "ok")
    assert jf["not_found"]["status_code"] == 404 and not jf["not_found"]["error"]
    assert jf["timeout"]["timed_out"] is True and jf["timeout"]["status_code"] is None
    assert jf["timeout"]["collected"][0] == "ERROR"
    assert jf["refused"]["error"] and not jf["refused"]["timed_out"]
    assert json.loads(jf["post_default"]["content"]) == {}
    assert json.loads(jf["delete_body"]["content"]) == {"why": "gone"}

    # a call rolled back with its row sent nothing and left no response
    for dbname, ghost in (("pgnet", pg_ghost), ("jfnet", jf_ghost)):
        assert node.value("SELECT count(*) FROM net._http_response WHERE id = %s",
                          (ghost,), dbname=dbname) == 0
    assert len(pg_ids) == len(jf_ids)

    # documented differences: no response headers; error texts are curl's own
    assert pg["order_apple"]["headers"] is not None
    assert jf["order_apple"]["headers"] is None


def test_requests_reach_the_receiver_as_pg_net_sends_them(node, receiver):
    need_pg_net(node)
    sent = {}
    for dbname in ("pgnet", "jfnet"):
        conn = node.connect(dbname)
        tag = uuid.uuid4().hex
        try:
            with conn.cursor() as cur:
                url = receiver.url("/echo?run=%s" % tag)
                cur.execute("SELECT net.http_post(url := %s,"
                            " body := jsonb_build_object('n', 1, 's', 'x y'),"
                            " params := '{\"q\": \"a b&c/\u00e9~\", \"k\": \"\"}',"
                            " headers := jsonb_build_object('Authorization', 'Bearer t',"
                            "                               'X-Api-Key', 'k'))", (url,))
                cur.execute("SELECT net.http_get(url := %s, params := '{\"p\": \"1 2\", \"n\": null}',"
                            " headers := '{\"X-Test\": \"get\"}')",
                            (receiver.url("/ok?run=%s" % tag),))
                cur.execute("SELECT net.http_delete(%s, params := '{\"id\": \"7\"}')",
                            (receiver.url("/ok?run=%s" % tag),))
            reqs = receiver.wait_for(lambda r: ("run=" + tag) in r["query"], n=3, timeout=20)
        finally:
            conn.close()
        sent[dbname] = sorted(
            (r["method"], r["path"], r["query"].replace(tag, "TAG"), r["body"],
             r["headers"].get("authorization"), r["headers"].get("x-api-key"),
             r["headers"].get("x-test"), r["headers"].get("content-type") if r["body"] else None)
            for r in reqs)
    print(json.dumps(sent, indent=1))
    assert sent["jfnet"] == sent["pgnet"]
    assert ("GET", "/ok", "run=TAG&p=1%202", "", None, None, "get", None) in sent["jfnet"]
    post = [s for s in sent["jfnet"] if s[0] == "POST"][0]
    assert post[2] == "run=TAG&k=&q=a%20b%26c%2f%c3%a9~"
    assert json.loads(post[3]) == {"n": 1, "s": "x y"}
    assert post[4:6] == ("Bearer t", "k") and post[7] == "application/json"


def test_rolled_back_calls_send_nothing_in_either(node, receiver):
    dbs = ["jfnet"] + (["pgnet"] if node.have_pg_net else [])
    for dbname in dbs:
        tag = uuid.uuid4().hex
        conn = node.connect(dbname)
        try:
            conn.autocommit = False
            with conn.cursor() as cur:
                cur.execute("SELECT net.http_get(%s)", (receiver.url("/ok?rb=%s" % tag),))
            conn.rollback()
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SELECT net.http_get(%s)", (receiver.url("/ok?rb=%s&after=1" % tag),))
            receiver.wait_for(lambda r: ("rb=" + tag) in r["query"] and "after=1" in r["query"],
                              timeout=20)
        finally:
            conn.close()
        assert [r["query"] for r in receiver.requests(lambda r: ("rb=" + tag) in r["query"])] \
            == ["rb=%s&after=1" % tag], dbname
    need_pg_net(node)


def test_collect_response_deprecated_name(node, receiver):
    """pg_net's net.http_collect_response() fails on every call (its
    plpgsql SELECT has no INTO); jobflow_net's returns what
    net._http_collect_response() does, with pg_net's notice."""
    conn = node.connect("jfnet")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT net.http_get(%s)", (receiver.url("/ok?c=%s" % uuid.uuid4().hex),))
            rid = cur.fetchone()[0]
            cur.execute("SELECT (c).status::text, ((c).response).status_code"
                        "  FROM net.http_collect_response(%s, async := false) AS c", (rid,))
            assert cur.fetchone() == ("SUCCESS", 200)
            assert any("deprecated" in n for n in conn.notices)
            cur.execute("SELECT (c).status::text, (c).message"
                        "  FROM net._http_collect_response(-1) AS c")
            assert cur.fetchone() == ("ERROR", "request matching request_id not found")
    finally:
        conn.close()
    need_pg_net(node)
    conn = node.connect("pgnet")
    try:
        with conn.cursor() as cur:
            with pytest.raises(psycopg2.Error) as err:
                cur.execute("SELECT net.http_collect_response(1)")
            assert "no destination" in str(err.value)
    finally:
        conn.close()


@pytest.mark.smoke
def test_not_beside_pg_net(node):
    """CREATE EXTENSION jobflow_net where pg_net is refuses with 42P06 and
    says why, and so where a schema net holds objects, or belongs to a role
    that is no superuser, or grants more than USAGE to jobflow's roles; an
    empty one, as DROP EXTENSION jobflow_net leaves it, is used.  pg_net
    where jobflow_net is fails on schema net."""
    node.query("DROP DATABASE IF EXISTS besides")
    node.query("CREATE DATABASE besides")
    try:
        node.query("CREATE SCHEMA net", dbname="besides")
        node.query("CREATE TABLE net._http_response (id bigint)", dbname="besides")
        with pytest.raises(psycopg2.Error) as err:
            node.query("CREATE EXTENSION jobflow_net CASCADE", dbname="besides")
        assert err.value.pgcode == "42P06"
        assert 'schema "net" already exists and contains objects' in err.value.pgerror
        assert err.value.diag.message_hint
        node.query("DROP TABLE net._http_response", dbname="besides")
        # an empty schema of a superuser, as DROP EXTENSION jobflow_net
        # leaves it, is used
        node.query("CREATE EXTENSION jobflow_net CASCADE", dbname="besides")
        node.query("DROP EXTENSION jobflow_net", dbname="besides")
        node.query("CREATE EXTENSION jobflow_net", dbname="besides")
        node.query("DROP EXTENSION jobflow_net", dbname="besides")
        node.query("CREATE ROLE net_owner_%s" % os.getpid())
        node.query("ALTER SCHEMA net OWNER TO net_owner_%s" % os.getpid(), dbname="besides")
        with pytest.raises(psycopg2.Error) as err:
            node.query("CREATE EXTENSION jobflow_net", dbname="besides")
        assert err.value.pgcode == "42501" and "not to a superuser" in err.value.pgerror
        node.query("ALTER SCHEMA net OWNER TO postgres", dbname="besides")
        node.query("DROP ROLE net_owner_%s" % os.getpid())
        node.query("GRANT CREATE ON SCHEMA net TO PUBLIC", dbname="besides")
        with pytest.raises(psycopg2.Error) as err:
            node.query("CREATE EXTENSION jobflow_net", dbname="besides")
        assert err.value.pgcode == "42501" and "grants privileges" in err.value.pgerror
        if node.have_pg_net:
            node.query("DROP SCHEMA net", dbname="besides")
            node.query("CREATE EXTENSION pg_net", dbname="besides")
            with pytest.raises(psycopg2.Error) as err:
                node.query("CREATE EXTENSION jobflow_net CASCADE", dbname="besides")
            assert err.value.pgcode == "42P06"
            assert 'extension "pg_net" is installed' in err.value.pgerror
            assert "DROP EXTENSION pg_net" in err.value.diag.message_hint
        with pytest.raises(psycopg2.Error) as err:
            node.query("CREATE EXTENSION pg_net", dbname="jfnet")
        # pg_net's script meets jobflow_net's schema (or, without pg_net,
        # there is no pg_net to create)
        if node.have_pg_net:
            assert 'schema net is not a member of extension "pg_net"' in err.value.pgerror
        assert node.value("SELECT extversion FROM pg_extension WHERE extname = 'jobflow_net'",
                          dbname="jfnet") == "0.3.0"
    finally:
        node.query("DROP DATABASE besides")
    need_pg_net(node)


def test_needs_jobflow_0_3_0(node):
    """jobflow_net uses jobflow 0.3.0's objects, which the control file
    cannot require: on a database whose jobflow is still 0.2.0 it refuses
    with 55000 and says to update, and goes in once updated."""
    node.query("DROP DATABASE IF EXISTS older")
    node.query("CREATE DATABASE older")
    try:
        node.query("CREATE EXTENSION jobflow VERSION '0.2.0'", dbname="older")
        with pytest.raises(psycopg2.Error) as err:
            node.query("CREATE EXTENSION jobflow_net", dbname="older")
        assert err.value.pgcode == "55000"
        assert "jobflow_net needs jobflow 0.3.0 or later" in err.value.pgerror
        assert "ALTER EXTENSION jobflow UPDATE" in err.value.diag.message_hint
        node.query("ALTER EXTENSION jobflow UPDATE", dbname="older")
        node.query("CREATE EXTENSION jobflow_net", dbname="older")
        assert node.value("SELECT extversion FROM pg_extension WHERE extname = 'jobflow_net'",
                          dbname="older") == "0.3.0"
    finally:
        node.query("DROP DATABASE older")


def test_sent_once_unless_asked(node, receiver):
    """pg_net never retries: neither does net.http_*, unless
    jobflow.net_max_attempts asks."""
    conn = node.connect("jfnet")
    tag = uuid.uuid4().hex
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT net.http_get(%s)", (receiver.url("/status/503?once=%s" % tag),))
            once = cur.fetchone()[0]
            cur.execute("SET jobflow.net_max_attempts = 2")
            cur.execute("SELECT net.http_get(%s)", (receiver.url("/status/503?twice=%s" % tag),))
            twice = cur.fetchone()[0]
            cur.execute("RESET jobflow.net_max_attempts")
            wait_until(lambda: node.value(
                "SELECT count(*) FROM net._http_response WHERE id IN (%s, %s)",
                (once, twice), dbname="jfnet") == 2, 30, "both responses")
            cur.execute("SELECT id, max_attempts, attempts FROM jobflow.tasks"
                        " WHERE id IN (%s, %s) ORDER BY id", (once, twice))
            assert cur.fetchall() == [(once, 1, 1), (twice, 2, 2)]
            cur.execute("SELECT status_code FROM net._http_response WHERE id = %s", (twice,))
            assert cur.fetchone()[0] == 503
    finally:
        conn.close()
    assert len(receiver.requests(lambda r: ("once=" + tag) in r["query"])) == 1
    assert len(receiver.requests(lambda r: ("twice=" + tag) in r["query"])) == 2


@pytest.mark.smoke
def test_tenants_see_their_own_responses_only(node, receiver):
    """net._http_response and the collect functions show a role its own
    requests only; a role without jobflow_user may not call net.http_*."""
    suffix = uuid.uuid4().hex[:8]
    alice, bob, eve = "alice_" + suffix, "bob_" + suffix, "eve_" + suffix
    for r in (alice, bob, eve):
        node.query("CREATE ROLE %s LOGIN" % r)
    node.query("GRANT jobflow_user TO %s, %s" % (alice, bob))
    conn = node.connect("jfnet")
    try:
        with conn.cursor() as cur:
            cur.execute("SET ROLE %s" % alice)
            cur.execute("SELECT net.http_post(%s, '{\"secret\": 1}')",
                        (receiver.url("/echo?tenant=%s" % suffix),))
            rid = cur.fetchone()[0]
            wait_until(lambda: node.value("SELECT count(*) FROM net._http_response WHERE id = %s",
                                          (rid,), dbname="jfnet") == 1, 20, "alice's response")
            cur.execute("SELECT content FROM net._http_response WHERE id = %s", (rid,))
            assert json.loads(cur.fetchone()[0]) == {"secret": 1}
            cur.execute("RESET ROLE")
            cur.execute("SET ROLE %s" % bob)
            cur.execute("SELECT count(*) FROM net._http_response")
            assert cur.fetchone()[0] == 0
            cur.execute("SELECT (c).status::text, (c).message, (c).response"
                        "  FROM net._http_collect_response(%s) AS c", (rid,))
            assert cur.fetchone() == ("ERROR", "request matching request_id not found", None)
            cur.execute("RESET ROLE")
            cur.execute("SET ROLE %s" % eve)
            for sql in ("SELECT net.http_get('http://127.0.0.1:1/')",
                        "SELECT count(*) FROM net._http_response",
                        "SELECT net._http_collect_response(1)"):
                with pytest.raises(psycopg2.Error) as err:
                    cur.execute(sql)
                assert err.value.pgcode == "42501", sql
            cur.execute("RESET ROLE")
    finally:
        conn.close()


def doc_table_functions():
    """The objects of schema net that the table of docs/user-guide.md,
    "Who may do what", has a row for (by name)."""
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "user-guide.md")) as f:
        text = f.read()
    section = text.split("### Who may do what", 1)[1].split("\n### ", 1)[0]
    return {re.match(r"\| `(net\.[a-z_]+)", line).group(1)
            for line in section.splitlines() if line.startswith("| `net.")}


def test_privileges_comments_and_pins_as_documented(node):
    """Every function of schema net: in the table of docs/user-guide.md,
    executable by jobflow_user and jobflow_admin only (not PUBLIC), run as
    the caller with search_path pinned, commented; the view selectable by
    the same two roles only; the schema usable by them only."""
    funcs = node.query(
        "SELECT p.oid::regprocedure::text, p.proname, p.prosecdef, p.proconfig,"
        "       array(SELECT a.grantee::regrole::text || ':' || a.privilege_type"
        "               FROM aclexplode(p.proacl) a WHERE a.grantee <> p.proowner ORDER BY 1),"
        "       obj_description(p.oid, 'pg_proc')"
        "  FROM pg_proc p WHERE p.pronamespace = 'net'::regnamespace ORDER BY 1", dbname="jfnet")
    assert len(funcs) == 9
    documented = doc_table_functions()
    for sig, name, secdef, config, acl, comment in funcs:
        assert "net." + name in documented, sig
        assert secdef is False, sig
        assert "search_path=pg_catalog, pg_temp" in (config or []), sig
        assert acl == ["jobflow_admin:EXECUTE", "jobflow_user:EXECUTE"], (sig, acl)
        assert comment, sig
    assert documented == {"net." + f[1] for f in funcs} | {
        "net._http_response", "net.http_response", "net.http_response_result",
        "net.request_status"}
    rels = node.query(
        "SELECT c.relname, c.relkind::text,"
        "       array(SELECT a.grantee::regrole::text || ':' || a.privilege_type"
        "               FROM aclexplode(c.relacl) a WHERE a.grantee <> c.relowner ORDER BY 1),"
        "       obj_description(c.oid, 'pg_class')"
        "  FROM pg_class c WHERE c.relnamespace = 'net'::regnamespace AND c.relkind <> 'c'",
        dbname="jfnet")
    assert rels == [("_http_response", "v", ["jobflow_admin:SELECT", "jobflow_user:SELECT"],
                     rels[0][3])] and rels[0][3]
    types = node.query(
        "SELECT t.typname, obj_description(t.oid, 'pg_type') FROM pg_type t"
        " WHERE t.typnamespace = 'net'::regnamespace AND t.typname NOT LIKE '\\_%%'"
        "   AND t.typname <> '_http_response' ORDER BY 1", dbname="jfnet")
    assert [t[0] for t in types] == ["http_response", "http_response_result", "request_status"]
    assert all(t[1] for t in types), types
    schema_acl = node.value(
        "SELECT array(SELECT a.grantee::regrole::text || ':' || a.privilege_type"
        "               FROM aclexplode(n.nspacl) a WHERE a.grantee <> n.nspowner ORDER BY 1)"
        "  FROM pg_namespace n WHERE n.nspname = 'net'", dbname="jfnet")
    assert schema_acl == ["jobflow_admin:USAGE", "jobflow_user:USAGE"]


def test_planted_objects_never_run(node, receiver):
    """A tenant that planted functions and operators shadowing
    pg_catalog's, first on its search_path, calls every net object: none
    of them runs what it planted."""
    suffix = uuid.uuid4().hex[:8]
    mallory = "mallory_" + suffix
    node.query("CREATE ROLE %s LOGIN" % mallory)
    node.query("GRANT jobflow_user TO %s" % mallory)
    node.query("GRANT CREATE ON DATABASE jfnet TO %s" % mallory)
    conn = node.connect("jfnet")
    try:
        with conn.cursor() as cur:
            cur.execute("SET ROLE %s" % mallory)
            cur.execute("CREATE SCHEMA evil")
            cur.execute("CREATE TABLE evil.caught (what text, who text)")
            plant = [
                ("upper(text)", "text", "pg_catalog.upper($1)"),
                ("lower(text)", "text", "pg_catalog.lower($1)"),
                ("strpos(text, text)", "integer", "pg_catalog.strpos($1, $2)"),
                ("jsonb_build_object(VARIADIC \"any\")", None, None),
                ("to_hex(integer)", "text", "pg_catalog.to_hex($1)"),
                ("lpad(text, integer, text)", "text", "pg_catalog.lpad($1, $2, $3)"),
                ("current_setting(text, boolean)", "text", "pg_catalog.current_setting($1, $2)"),
                ("pg_has_role(oid, text)", "boolean", "pg_catalog.pg_has_role($1, $2)"),
                ("pg_has_role(name, text)", "boolean", "pg_catalog.pg_has_role($1, $2)"),
            ]
            for sig, ret, body in plant:
                if ret is None:
                    continue
                cur.execute(
                    "CREATE FUNCTION evil.%s RETURNS %s LANGUAGE plpgsql AS $f$"
                    " BEGIN INSERT INTO evil.caught VALUES (%s, current_user::text);"
                    " RETURN %s; END $f$" % (sig, ret, "'" + sig.replace("'", "") + "'", body))
            cur.execute(
                "CREATE FUNCTION evil.texteq(text, text) RETURNS boolean LANGUAGE plpgsql AS $f$"
                " BEGIN INSERT INTO evil.caught VALUES ('=', current_user::text);"
                " RETURN pg_catalog.texteq($1, $2); END $f$")
            cur.execute("CREATE OPERATOR evil.= (FUNCTION = evil.texteq, LEFTARG = text,"
                        " RIGHTARG = text)")
            cur.execute(
                "CREATE FUNCTION evil.textcat(text, text) RETURNS text LANGUAGE plpgsql AS $f$"
                " BEGIN INSERT INTO evil.caught VALUES ('||', current_user::text);"
                " RETURN pg_catalog.textcat($1, $2); END $f$")
            cur.execute("CREATE OPERATOR evil.|| (FUNCTION = evil.textcat, LEFTARG = text,"
                        " RIGHTARG = text)")
            cur.execute("SET search_path = evil, pg_catalog")
            base = receiver.url("/echo?planted=%s" % suffix)
            cur.execute("SELECT net.http_post(%s, '{\"a\": 1}', '{\"p\": \"x y\"}',"
                        " '{\"X-Test\": \"1\"}')", (base,))
            rid = cur.fetchone()[0]
            cur.execute("SELECT net.http_get(%s, '{\"p\": \"1\"}')", (base,))
            cur.execute("SELECT net.http_delete(%s, '{\"p\": \"1\"}', body := '{}')", (base,))
            cur.execute("SELECT net.jobflow_request('post', %s, '{\"q\": \"\u00e9\"}')", (base,))
            cur.execute("SELECT (net._http_collect_response(%s, async := false)).status::text",
                        (rid,))
            assert cur.fetchone()[0] == "SUCCESS"
            cur.execute("SELECT (net.http_collect_response(%s)).status::text", (rid,))
            cur.execute("SELECT count(*) FROM net._http_response WHERE id = %s", (rid,))
            assert cur.fetchone()[0] == 1
            cur.execute("SELECT net._urlencode('a b')")
            cur.execute("SELECT what, who FROM evil.caught")
            assert cur.fetchall() == []
            # the planted objects work when called by name (so the test
            # would see them run)
            cur.execute("SELECT upper('x'), 'a' = 'a'")
            cur.execute("SELECT count(*) FROM evil.caught")
            assert cur.fetchone()[0] == 2
            cur.execute("RESET search_path")
            cur.execute("RESET ROLE")
    finally:
        conn.close()


def test_dump_and_restore(node):
    """pg_dump writes schema net (not a member of the extension) before
    CREATE EXTENSION jobflow_net: the restore must accept it, and brings
    back the requests, which are jobflow's tasks."""
    node.query("DROP DATABASE IF EXISTS dumpsrc")
    node.query("DROP DATABASE IF EXISTS dumpdst")
    node.query("CREATE DATABASE dumpsrc")
    node.query("CREATE DATABASE dumpdst")
    try:
        node.query("CREATE EXTENSION jobflow_net CASCADE", dbname="dumpsrc")
        rid = node.value("SELECT net.http_get('http://127.0.0.1:1/dumped')", dbname="dumpsrc")
        conn = ["-h", node.sock, "-p", str(node.port), "-U", "postgres"]
        dump = subprocess.run([node.bin("pg_dump")] + conn + ["dumpsrc"], capture_output=True,
                              text=True, check=True).stdout
        assert dump.index("CREATE SCHEMA net;") < dump.index("CREATE EXTENSION IF NOT EXISTS"
                                                             " jobflow_net")
        subprocess.run([node.bin("psql")] + conn + ["-X", "-q", "-v", "ON_ERROR_STOP=1",
                                                    "-d", "dumpdst"],
                       input=dump, capture_output=True, text=True, check=True)
        assert node.value("SELECT extversion FROM pg_extension WHERE extname = 'jobflow_net'",
                          dbname="dumpdst") == "0.3.0"
        assert node.value("SELECT url FROM jobflow.tasks WHERE id = %s", (rid,),
                          dbname="dumpdst") == "http://127.0.0.1:1/dumped"
    finally:
        node.query("DROP DATABASE dumpsrc WITH (FORCE)")
        node.query("DROP DATABASE dumpdst WITH (FORCE)")


def test_quiet_logging_keeps_the_status(node, receiver):
    """A queue "net" that logs failures only: a first-attempt success has
    no log row, and net._http_response still gives its status (without
    content), as docs/pg-net.md says."""
    conn = node.connect("jfnet")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT jobflow.set_queue('net', log_attempts => 'failures')")
            try:
                cur.execute("SELECT net.http_get(%s)", (receiver.url("/ok?quiet=%s" % uuid.uuid4().hex),))
                rid = cur.fetchone()[0]
                cur.execute("SELECT (c).status::text, ((c).response).status_code, ((c).response).body"
                            "  FROM net._http_collect_response(%s, async := false) AS c", (rid,))
                assert cur.fetchone() == ("SUCCESS", 200, None)
                cur.execute("SELECT count(*) FROM jobflow.task_log WHERE task_id = %s", (rid,))
                assert cur.fetchone()[0] == 0
            finally:
                cur.execute("SELECT jobflow.drop_queue('net')")
    finally:
        conn.close()


def test_a_cancelled_request_has_an_error(node):
    """pg_net cannot cancel a request; a jobflow task can be: its row in
    net._http_response says so, and a wait for it ends."""
    conn = node.connect("jfnet")
    try:
        conn.autocommit = False
        with conn.cursor() as cur:
            cur.execute("SET statement_timeout = '20s'")     # should the wait not end
            # held back before it commits, so that it is still pending
            cur.execute("SELECT net.http_get('http://127.0.0.1:1/later')")
            rid = cur.fetchone()[0]
            cur.execute("UPDATE jobflow.tasks SET run_at = now() + interval '1 hour'"
                        " WHERE id = %s", (rid,))
            conn.commit()
            cur.execute("SELECT count(*) FROM net._http_response WHERE id = %s", (rid,))
            assert cur.fetchone()[0] == 0
            cur.execute("SELECT jobflow.cancel(%s)", (rid,))
            assert cur.fetchone()[0] is True
            conn.commit()
            cur.execute("SELECT status_code, timed_out, error_msg FROM net._http_response"
                        " WHERE id = %s", (rid,))
            assert cur.fetchone() == (None, False, "cancelled")
            cur.execute("SELECT (c).status::text, (c).message"
                        "  FROM net._http_collect_response(%s, async := false) AS c", (rid,))
            assert cur.fetchone() == ("ERROR", "cancelled")
            conn.commit()
    finally:
        conn.close()


def test_default_privileges_of_the_installer_give_nothing(node):
    """ALTER DEFAULT PRIVILEGES of the installing superuser (a reporting
    role, PUBLIC) applies to what CREATE EXTENSION makes: jobflow_net takes
    it back, as jobflow does."""
    node.query("DROP DATABASE IF EXISTS defprivs")
    node.query("CREATE DATABASE defprivs")
    reporting = "reporting_%s" % uuid.uuid4().hex[:8]
    node.query("CREATE ROLE %s LOGIN" % reporting)
    try:
        # jobflow first: it refuses such grants on its own schema itself
        node.query("CREATE EXTENSION jobflow", dbname="defprivs")
        node.query("ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO %s;"
                   " ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO %s;"
                   " ALTER DEFAULT PRIVILEGES GRANT USAGE ON TYPES TO %s;"
                   " ALTER DEFAULT PRIVILEGES GRANT USAGE ON SCHEMAS TO %s"
                   % ((reporting,) * 4), dbname="defprivs")
        node.query("CREATE EXTENSION jobflow_net", dbname="defprivs")
        got = node.value(
            "SELECT array_agg(what ORDER BY what) FROM ("
            " SELECT 'schema' AS what WHERE has_schema_privilege(%(r)s, 'net', 'USAGE')"
            " UNION ALL SELECT p.oid::regprocedure::text FROM pg_proc p"
            "  WHERE p.pronamespace = 'net'::regnamespace"
            "    AND has_function_privilege(%(r)s, p.oid, 'EXECUTE')"
            " UNION ALL SELECT c.relname FROM pg_class c"
            "  WHERE c.relnamespace = 'net'::regnamespace AND c.relkind = 'v'"
            "    AND has_table_privilege(%(r)s, c.oid, 'SELECT')"
            " UNION ALL SELECT t.typname FROM pg_type t"
            "  WHERE t.typnamespace = 'net'::regnamespace AND t.typcategory <> 'A'"
            "    AND (t.typrelid = 0 OR (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c')"
            "    AND has_type_privilege(%(r)s, t.oid, 'USAGE')) s",
            {"r": reporting}, dbname="defprivs")
        assert got is None, got
        # jobflow's roles have what the table of docs/user-guide.md says
        assert node.value("SELECT has_function_privilege('jobflow_user',"
                          " 'net.http_get(text, jsonb, jsonb, integer)', 'EXECUTE')",
                          dbname="defprivs") is True
    finally:
        node.query("DROP DATABASE defprivs WITH (FORCE)")
        node.query("DROP OWNED BY %s" % reporting, dbname="postgres")
        node.query("DROP ROLE %s" % reporting)
