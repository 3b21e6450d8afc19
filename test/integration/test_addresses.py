# -------------------------------------------------------------------------
#
# test_addresses.py
#     Addresses a tenant's callback must never reach (issue 9, items 13
#     and 14; issue 20, item 7), through the real worker.
#
# The receiver listens on 127.0.0.1 (receiver6 on ::1).  The test cluster
# allows loopback (jobflow.allow_networks); every test here sets both
# lists itself.  With the default deny list and no allow list, loopback
# (IPv4, IPv6, and names resolving there) is refused before connecting;
# allow_networks lets it through, by network or by network and port, and
# a reload that takes the allow entry away refuses the very next request,
# on a kept-alive connection too.  Spellings of "this host" that the
# kernel connects to loopback (0.0.0.0, 0, ::ffff:0.0.0.0, ::) and the
# IPv4-mapped form of 127.0.0.1 fail as denied at the first attempt, and
# the receiver sees none of them.  Unspecified addresses are refused
# whatever the lists, even when allow_networks covers every address.
#
# Private, shared, link-local and the other ranges of the default list are
# only classified, in test/unit/test_http_requests.c: no test sends traffic
# anywhere but loopback.
#
# -------------------------------------------------------------------------

import time
import uuid

import psycopg2
import psycopg2.errors
import pytest

from conftest import schedule, task_log, task_row, wait_final

STRICT = ("169.254.0.0/16, fe80::/10, fd00:ec2::254/128, 100.100.100.200/32, "
          "127.0.0.0/8, ::1/128, 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7")


@pytest.fixture
def networks(db, server):
    """networks(deny, allow): set jobflow.deny_networks and
    jobflow.allow_networks for one test (None = the default, "" = none);
    both are reset at the end (to the cluster's configuration)."""
    def apply(deny, allow):
        server.set_guc(db, "jobflow.deny_networks", deny)
        server.set_guc(db, "jobflow.allow_networks", allow)
        time.sleep(0.5)        # the worker applies them on its next turn
    try:
        yield apply
    finally:
        server.set_guc(db, "jobflow.deny_networks", None)
        server.set_guc(db, "jobflow.allow_networks", None)


def schedule_as(db, role, url):
    with db.cursor() as cur:
        cur.execute("SET ROLE %s" % role)
    try:
        return schedule(db, url, max_attempts=3)
    finally:
        with db.cursor() as cur:
            cur.execute("RESET ROLE")


# spellings that the row checks already refuse at schedule time (22023):
# not a valid host, so the task is never written and never sent
REFUSED_AT_SCHEDULE = {"0"}


def assert_denied(db, receiver, role, hosts):
    """Tasks of role to each host at receiver's port fail at the first
    attempt as denied, and the receiver sees none of them."""
    tag = uuid.uuid4().hex
    ids = {}
    for h in hosts:
        url = "http://%s:%d/ok?t=%s" % (h, receiver.port, tag)
        if h in REFUSED_AT_SCHEDULE:
            with pytest.raises(psycopg2.errors.InvalidParameterValue):
                schedule_as(db, role, url)
            continue
        ids[schedule_as(db, role, url)] = h
    states = wait_final(db, list(ids), timeout=20)
    for task_id, host in ids.items():
        log = task_log(db, task_id)
        assert states[task_id] == "failed", (host, log)
        assert len(log) == 1 and "deny_networks" in log[0]["error"], (host, log)
        assert log[0]["http_status"] is None and not log[0].get("response"), (host, log)
        assert task_row(db, task_id)["attempts"] == 1, host
    # a request that slipped through would have been recorded by now
    time.sleep(0.5)
    assert receiver.tagged(tag) == []


def test_this_host_spellings_denied_with_strict_list(db, receiver, app_role, networks):
    networks(STRICT, "")
    assert_denied(db, receiver, app_role,
                  ["0.0.0.0", "0", "[::ffff:0.0.0.0]", "[::]", "[::ffff:127.0.0.1]",
                   "127.0.0.1"])


def test_unspecified_denied_whatever_the_list(db, receiver, app_role, networks):
    networks("", "0.0.0.0/0, ::/0")
    assert_denied(db, receiver, app_role, ["0.0.0.0", "0", "[::ffff:0.0.0.0]", "[::]"])


DEFAULT_DENIED = ["127.0.0.0/8", "::1/128", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                  "169.254.0.0/16", "fe80::/10", "fc00::/7", "100.64.0.0/10", "64:ff9b::/96",
                  "64:ff9b:1::/48", "224.0.0.0/4", "ff00::/8", "240.0.0.0/4",
                  "fd00:ec2::254/128", "100.100.100.200/32"]


def test_default_lists_refuse_loopback(db, receiver, receiver6, app_role, networks):
    """Issue 20, item 7: a fresh configuration refuses loopback, private,
    link-local, unique-local, shared, NAT64, multicast and reserved
    networks; loopback is refused before connecting, by address and by a
    name that resolves there."""
    # the cluster's configuration allows loopback: take that away
    networks(None, "")
    with db.cursor() as cur:
        cur.execute("SHOW jobflow.deny_networks")
        listed = [e.strip() for e in cur.fetchone()[0].split(",")]
        cur.execute("SHOW jobflow.allow_networks")
        assert cur.fetchone()[0] == ""
        cur.execute("SELECT boot_val FROM pg_settings WHERE name = 'jobflow.allow_networks'")
        assert cur.fetchone()[0] == ""
    for net in DEFAULT_DENIED:
        assert net in listed, (net, listed)
    assert_denied(db, receiver, app_role, ["127.0.0.1", "127.0.0.2", "localhost",
                                           "[::ffff:127.0.0.1]"])
    assert_denied(db, receiver6, app_role, ["[::1]"])


def test_allow_networks_let_loopback_through(db, receiver, receiver6, app_role, networks):
    """An address in allow_networks is reached although the deny list
    covers it."""
    networks(None, "127.0.0.0/8, ::1/128")
    url4, tag4 = receiver.unique_url("/ok")
    url6, tag6 = receiver6.unique_url("/ok")
    ids = [schedule_as(db, app_role, url4), schedule_as(db, app_role, url6)]
    assert set(wait_final(db, ids).values()) == {"succeeded"}
    assert len(receiver.tagged(tag4)) == 1
    assert len(receiver6.tagged(tag6)) == 1


def test_allow_networks_by_port(db, receiver, second_receiver, receiver6, app_role, networks):
    """An allow entry with a port lets that port through, and no other
    port of the same address."""
    networks(None, "127.0.0.1/32:%d, [::1]:%d" % (receiver.port, receiver6.port))
    url4, tag4 = receiver.unique_url("/ok")
    url6, tag6 = receiver6.unique_url("/ok")
    ids = [schedule_as(db, app_role, url4), schedule_as(db, app_role, url6)]
    assert set(wait_final(db, ids).values()) == {"succeeded"}, [(r["error"], r["http_status"]) for i in ids for r in task_log(db, i)]
    assert len(receiver.tagged(tag4)) == 1 and len(receiver6.tagged(tag6)) == 1
    # the same addresses on another port: refused
    assert_denied(db, second_receiver, app_role, ["127.0.0.1"])
    # and a port given to a deny entry refuses only that port
    networks("127.0.0.0/8:%d" % second_receiver.port, "")
    url, tag = receiver.unique_url("/ok")
    assert wait_final(db, schedule_as(db, app_role, url)) == "succeeded"
    assert_denied(db, second_receiver, app_role, ["127.0.0.1"])


def test_reload_removing_an_allow_entry_refuses_kept_alive(db, second_receiver, app_role,
                                                            networks):
    """A reload that takes the allow entry away refuses the very next
    request, though a kept-alive connection to the receiver is open."""
    networks(None, "127.0.0.0/8")
    url, tag = second_receiver.unique_url("/ok")
    for _ in range(2):
        assert wait_final(db, schedule_as(db, app_role, url)) == "succeeded"
    seen = second_receiver.tagged(tag)
    # one connection, kept alive between the two
    assert len(seen) == 2 and seen[0]["peer_port"] == seen[1]["peer_port"], seen
    networks(None, "")
    assert_denied(db, second_receiver, app_role, ["127.0.0.1"])


def test_allow_networks_is_checked(db):
    """allow_networks takes the syntax of deny_networks, ports included,
    and refuses anything else with the entry at fault."""
    for bad in ("nonsense", "10.0.0.0/8:0", "10.0.0.0/8:65536", "::1:443x", "[::1/128]",
                "[10.0.0.1]:80", "10.0.0.0/33"):
        with db.cursor() as cur:
            with pytest.raises(psycopg2.Error) as err:
                cur.execute("ALTER SYSTEM SET jobflow.allow_networks = %s", (bad,))
            assert err.value.pgcode == "22023", bad
    with db.cursor() as cur:
        cur.execute("ALTER SYSTEM SET jobflow.allow_networks = %s",
                    ("10.1.2.0/24:443, [2001:db8::]/32:8443, [::1], ::1/128, 192.0.2.1:80",))
        cur.execute("ALTER SYSTEM RESET jobflow.allow_networks")
