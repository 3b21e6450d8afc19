# -------------------------------------------------------------------------
#
# test_boundary_review26.py
#     A review of extension jobflow_net (pg_net's interface backed by
#     jobflow, issue 26 item 1) as merged, tried as a hostile tenant and a
#     careless operator would.  What the review found, each test failing on
#     the code reviewed (main at 55338f5):
#       - a schema "net" that a tenant made and filled was used as it was
#         when the statement that would have fixed it ran in the same
#         transaction as CREATE EXTENSION: the install script skipped all
#         its checks when the schema's catalog row was written by the
#         current transaction (meant for "CREATE EXTENSION made it"), and
#         ALTER SCHEMA net OWNER TO, or REVOKE ... ON SCHEMA net, which its
#         own hints suggest, write that row.  The tenant's functions stayed
#         in schema net (say net.worker_restart(), which jobflow_net does
#         not provide and an operator used to pg_net calls), and ran as
#         the superuser who called them (src/jobflow_net.sql, the
#         prelude);
#       - a tenant chose how often another tenant's requests are retried:
#         jobflow.net_max_attempts could be set by any session, and
#         net.http_* read it from the session, also inside another role's
#         SECURITY DEFINER function (the way pg_net's users, Supabase's
#         database webhooks among them, call net.http_post from
#         triggers): a tenant that set it to 1000 before firing such a
#         trigger made the owner's request, sent once as pg_net sends it,
#         be retried up to 1000 times (src/base/settings.c);
#       - a large param pinned a core for minutes before the URL limit
#         (8 kB) refused it: net._urlencode() converted the whole string
#         again for every byte it encoded, so its time grew with the
#         square of the length (20 kB: 0.12 s; 1 MB: about 5 minutes,
#         not stopped by the client going away), where pg_net's encoding
#         is linear.  An application whose trigger passes a user's text
#         in params (net.http_get(url, params := jsonb_build_object('q',
#         NEW.comment))) gave any user of it that lever
#         (src/jobflow_net.sql, net._urlencode);
#       - params of a URL with a fragment were lost: appended after the
#         "#", they went out in no request (a fragment is never sent),
#         where pg_net (curl's URL API) puts them in the query, before
#         the fragment; a "?" inside the fragment counted as a query; a
#         URL ending in "?" got "?&" (src/jobflow_net.sql,
#         net.jobflow_request).
#     What held, tried by hand or by test_pg_net_compat.py: another
#     tenant's responses by guessed id through net._http_response,
#     net._http_collect_response() and net._await_response() (also on 14,
#     whose security_barrier view kept a leaky function above its filter);
#     operators, functions and overloads planted on the caller's
#     search_path (every function pins it, qualifies its operators, and
#     none is inlined); secrets of another tenant named in headers; CRLF in
#     header names, values and the URL, and "#", "@", "&", "=" in params
#     (percent-encoded; the deny list is checked at connect time, whatever
#     the URL); a POST with two Content-Types; a tenant's pause of its
#     queue "net" (per owner: another's requests went); a tenant-made
#     schema net (refused: objects, owner, grants); DROP EXTENSION jobflow
#     (refused while jobflow_net needs it; CASCADE leaves an empty schema
#     net that a new CREATE EXTENSION uses); ALTER EXTENSION jobflow UPDATE
#     from 0.2.0 with jobflow_net installed; the launcher's CREATE
#     EXTENSION ... CASCADE detection, which a tenant can trigger (CREATE
#     EXTENSION IF NOT EXISTS plpgsql CASCADE): it only asks the launcher
#     to serve a database that has jobflow, as it already does.
#
# -------------------------------------------------------------------------

import json
import time

import psycopg2
import pytest

from conftest import call


# what a tenant plants in its schema net: pg_net's administrative function,
# which jobflow_net does not provide, made to run as whoever calls it
PLANT = """
CREATE FUNCTION net.worker_restart() RETURNS boolean LANGUAGE sql
    AS $$ SELECT CURRENT_USER = 'never' $$
"""


@pytest.mark.parametrize("fix", ["owner", "revoke"])
def test_planted_schema_net_refused_when_fixed_in_the_same_transaction(new_role, databases, fix):
    """A tenant makes schema net (it may create schemas in the database)
    and plants a function there; or, in a schema net of a superuser that
    granted it CREATE, plants one.  The operator follows the install's
    hints in one transaction (ALTER SCHEMA net OWNER TO a superuser, or
    REVOKE CREATE), then creates jobflow_net: refused, as it is when the
    same statements run in transactions of their own."""
    tenant = new_role()
    name, conn = databases(extension=False)
    with conn.cursor() as cur:
        cur.execute("GRANT CREATE ON DATABASE %s TO %s" % (name, tenant))
        if fix == "owner":
            cur.execute("SET ROLE %s" % tenant)
            cur.execute("CREATE SCHEMA net")
        else:
            cur.execute("CREATE SCHEMA net")
            cur.execute("GRANT USAGE, CREATE ON SCHEMA net TO %s" % tenant)
            cur.execute("SET ROLE %s" % tenant)
        cur.execute(PLANT)
        cur.execute("RESET ROLE")
        cur.execute("BEGIN")
        if fix == "owner":
            cur.execute("ALTER SCHEMA net OWNER TO CURRENT_USER")
        else:
            cur.execute("REVOKE ALL ON SCHEMA net FROM %s" % tenant)
        try:
            with pytest.raises(psycopg2.Error) as err:
                cur.execute("CREATE EXTENSION jobflow_net CASCADE")
        finally:
            cur.execute("ROLLBACK")
    assert err.value.pgcode == "42P06", err.value.pgerror
    assert "contains objects" in err.value.pgerror
    assert call(conn, "SELECT count(*) FROM pg_extension WHERE extname = 'jobflow_net'") == 0
    with conn.cursor() as cur:
        cur.execute("DROP SCHEMA net CASCADE")


def test_a_tenant_cannot_choose_the_attempts_of_another_tenants_requests(new_role, databases):
    """Tenant A's SECURITY DEFINER function calls net.http_get, as pg_net's
    webhook triggers do; tenant B sets jobflow.net_max_attempts (in its
    session, or as its role's default) and calls it: A's request is still
    sent once, as A asked (by not asking)."""
    a, b = new_role(), new_role()
    name, conn = databases()
    with conn.cursor() as cur:
        cur.execute("CREATE EXTENSION jobflow_net")
        cur.execute("CREATE SCHEMA hooks AUTHORIZATION %s" % a)
        cur.execute("SET ROLE %s" % a)
        cur.execute("CREATE FUNCTION hooks.notify() RETURNS bigint LANGUAGE sql"
                    " SECURITY DEFINER SET search_path = pg_catalog"
                    " AS $$ SELECT net.http_get('http://127.0.0.1:1/hook') $$")
        cur.execute("GRANT USAGE ON SCHEMA hooks TO %s" % b)
        cur.execute("GRANT EXECUTE ON FUNCTION hooks.notify() TO %s" % b)
        cur.execute("RESET ROLE")
        cur.execute("SET ROLE %s" % b)
        for sql in ("ALTER ROLE CURRENT_USER SET jobflow.net_max_attempts = 1000",
                    "SET jobflow.net_max_attempts = 1000"):
            try:
                cur.execute(sql)
            except psycopg2.Error as e:
                assert e.pgcode == "42501", e.pgerror
        cur.execute("SELECT hooks.notify()")
        task = cur.fetchone()[0]
        cur.execute("RESET ROLE")
        cur.execute("RESET jobflow.net_max_attempts")
        cur.execute("ALTER ROLE %s RESET ALL" % b)
        cur.execute("SELECT owner::text, max_attempts FROM jobflow.tasks WHERE id = %s", (task,))
        assert cur.fetchone() == (a, 1)
        cur.execute("DROP SCHEMA hooks CASCADE")


def test_a_large_param_is_refused_by_the_url_limit_without_pinning_a_core(new_role, databases):
    """net.http_get with a 500 kB param (a user's text that an application
    passes in params) fails as any URL over the limit does, "callback URL
    is too long", once its params are encoded: in a second or so, not in
    the minutes a quadratic encoding takes.  statement_timeout only guards
    the test (the call is cancelled, and the test fails, if the encoding is
    quadratic); the time is printed, not asserted."""
    tenant = new_role()
    name, conn = databases()
    with conn.cursor() as cur:
        cur.execute("CREATE EXTENSION jobflow_net")
        cur.execute("SET ROLE %s" % tenant)
        cur.execute("SET statement_timeout = '30s'")
        start = time.monotonic()
        with pytest.raises(psycopg2.Error) as err:
            cur.execute("SELECT net.http_get('http://127.0.0.1:1/search',"
                        " params := jsonb_build_object('q', repeat('\u00e9', 250000)))")
        print("a 500 kB param refused in %.2f s" % (time.monotonic() - start))
        cur.execute("RESET statement_timeout")
        cur.execute("RESET ROLE")
    assert err.value.pgcode == "54000", err.value.pgerror
    assert "callback URL is too long" in err.value.pgerror


# url, params -> the URL pg_net 0.20 sends (curl_url_set(CURLUPART_QUERY,
# CURLU_APPENDQUERY) on the parsed URL, then the whole URL back)
APPENDED = [
    ("http://127.0.0.1:1/p#top", {"a": "b"}, "http://127.0.0.1:1/p?a=b#top"),
    ("http://127.0.0.1:1/p#x?y", {"a": "b"}, "http://127.0.0.1:1/p?a=b#x?y"),
    ("http://127.0.0.1:1/p?k=1#top", {"a": "b"}, "http://127.0.0.1:1/p?k=1&a=b#top"),
    ("http://127.0.0.1:1/p?", {"a": "b"}, "http://127.0.0.1:1/p?a=b"),
    ("http://127.0.0.1:1/p?k=1", {"a": "b"}, "http://127.0.0.1:1/p?k=1&a=b"),
    ("http://127.0.0.1:1/p?k=1&", {"a": "b"}, "http://127.0.0.1:1/p?k=1&a=b"),
]


@pytest.mark.parametrize("url,params,expected", APPENDED)
def test_params_go_into_the_query_as_pg_net_puts_them(databases, url, params, expected):
    """The URL net.http_* send (net.jobflow_request() says it) has the
    params in its query, before any fragment, as pg_net's."""
    name, conn = databases()
    with conn.cursor() as cur:
        cur.execute("CREATE EXTENSION jobflow_net")
        cur.execute("SELECT net.jobflow_request('GET', %s, params => %s::jsonb) ->> 'url'",
                    (url, json.dumps(params)))
        assert cur.fetchone()[0] == expected
