# -------------------------------------------------------------------------
#
# test_addresses.py
#     Addresses a tenant's callback must never reach (issue 9, items 13
#     and 14), through the real worker.
#
# The receiver listens on 127.0.0.1.  With the README's strict deny list
# (loopback included), spellings of "this host" that the kernel connects
# to loopback (0.0.0.0, 0, ::ffff:0.0.0.0, ::) and the IPv4-mapped form
# of 127.0.0.1 must fail as denied at the first attempt, and the receiver
# must see none of them.  Unspecified addresses are refused whatever the
# list, so the same holds with the default list.
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
def deny_list(db, server):
    """Set jobflow.deny_networks for one test (None = the default)."""
    def apply(value):
        server.set_guc(db, "jobflow.deny_networks", value)
        time.sleep(0.5)        # the worker applies it on its next turn
    try:
        yield apply
    finally:
        server.set_guc(db, "jobflow.deny_networks", None)


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


def test_this_host_spellings_denied_with_strict_list(db, receiver, app_role, deny_list):
    deny_list(STRICT)
    assert_denied(db, receiver, app_role,
                  ["0.0.0.0", "0", "[::ffff:0.0.0.0]", "[::]", "[::ffff:127.0.0.1]",
                   "127.0.0.1"])


def test_unspecified_denied_whatever_the_list(db, receiver, app_role, deny_list):
    deny_list("")
    assert_denied(db, receiver, app_role, ["0.0.0.0", "0", "[::ffff:0.0.0.0]"])
