# -------------------------------------------------------------------------
#
# test_dropped_roles.py
#     Issue 20, item 10: a role's secrets, signing secrets and configured
#     queues do not outlive it.  DROP OWNED BY deletes them (as it deletes
#     timers); REASSIGN OWNED BY deletes the secrets and signing secrets
#     (a secret was given for the old role's callbacks: the new role never
#     gave that value) and moves the queues (the new role's own
#     configuration of a name wins); DROP ROLE deletes them in its
#     database, and the worker deletes them when the role was dropped from
#     another one.
#
# -------------------------------------------------------------------------

import time

import psycopg2

from conftest import as_role, call


def give_everything(db, name):
    """A secret, a signing secret and two configured queues; the role's oid."""
    as_role(db, name, "SELECT jobflow.set_secret('token', 'value-of-' || current_user, ARRAY['http://127.0.0.1:9'])")
    as_role(db, name, "SELECT jobflow.create_signing_secret()")
    as_role(db, name, "SELECT jobflow.pause_queue('mail')")
    as_role(db, name, "SELECT jobflow.set_queue('both', priority => 1)")
    return call(db, "SELECT %s::regrole::oid", (name,))


def left_of(db, oid):
    """What rows of jobflow's tables still name the role of that oid."""
    return {table: call(db, "SELECT count(*) FROM jobflow.%s WHERE owner::oid = %%s" % table,
                        (oid,))
            for table in ("secrets", "signing_secrets", "queues")}


NOTHING = {"secrets": 0, "signing_secrets": 0, "queues": 0}


def test_drop_owned_deletes_secrets_and_queues(db, role):
    r = role()
    oid = give_everything(db, r)
    assert left_of(db, oid) == {"secrets": 1, "signing_secrets": 1, "queues": 2}
    with db.cursor() as cur:
        cur.execute("DROP OWNED BY %s" % r)
    assert left_of(db, oid) == NOTHING


def test_reassign_owned_deletes_secrets_and_moves_queues(db, role):
    a, b = role(), role()
    a_oid = give_everything(db, a)
    as_role(db, b, "SELECT jobflow.set_queue('both', priority => 5)")
    b_oid = call(db, "SELECT %s::regrole::oid", (b,))
    with db.cursor() as cur:
        cur.execute("REASSIGN OWNED BY %s TO %s" % (a, b))
    assert left_of(db, a_oid) == NOTHING
    # b has no secret it never set, and its own configuration of 'both' stays
    assert left_of(db, b_oid) == {"secrets": 0, "signing_secrets": 0, "queues": 2}
    rows = {r[0]: r[1:] for r in
            query_all(db, "SELECT name, paused, priority FROM jobflow.queues"
                          " WHERE owner::oid = %s", (b_oid,))}
    assert rows == {"mail": (True, 0), "both": (False, 5)}
    with db.cursor() as cur:
        cur.execute("DROP ROLE %s" % a)


def test_drop_role_deletes_them_in_its_database(db, role):
    r = role()
    oid = give_everything(db, r)
    with db.cursor() as cur:
        cur.execute("DROP ROLE %s" % r)
    assert left_of(db, oid) == NOTHING


def test_worker_deletes_them_for_a_role_dropped_elsewhere(db, role):
    r = role()
    oid = give_everything(db, r)
    other = psycopg2.connect(dbname="postgres")
    other.autocommit = True
    try:
        with other.cursor() as cur:
            cur.execute("DROP ROLE %s" % r)     # jobflow's hook cannot see its rows from here
    finally:
        other.close()
    deadline = time.time() + 15
    while left_of(db, oid) != NOTHING and time.time() < deadline:
        time.sleep(0.1)
    assert left_of(db, oid) == NOTHING


def query_all(conn, sql, args=None):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchall()
