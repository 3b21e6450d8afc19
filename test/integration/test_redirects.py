# -------------------------------------------------------------------------
#
# test_redirects.py
#     Redirects to another origin through the real worker (issue 9, item
#     16).
#
# Two receivers on 127.0.0.1 with different ports are two origins.  By
# default a task's redirect to the other one fails the task and the other
# receiver sees nothing; with jobflow.follow_cross_origin_redirects on,
# the hop is followed but carries none of the task's headers (an
# X-Api-Key here), and a task with a body is not redirected there.
#
# -------------------------------------------------------------------------

import subprocess
import sys
import time
from urllib.parse import quote

import pytest

from conftest import RECEIVER, Receiver, schedule, task_log, wait_final


@pytest.fixture(scope="module")
def other_receiver(tmp_path_factory):
    """A second test/receiver.py on 127.0.0.1: another origin."""
    port_file = tmp_path_factory.mktemp("other_receiver") / "port"
    proc = subprocess.Popen([sys.executable, RECEIVER, "--port", "0",
                             "--port-file", str(port_file)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while not port_file.exists():
            assert proc.poll() is None and time.time() < deadline, "no second receiver"
            time.sleep(0.02)
        yield Receiver(proc, int(port_file.read_text().strip()))
    finally:
        proc.kill()
        proc.wait(timeout=10)


def redirect_to(receiver, target, status=302):
    url, tag = receiver.unique_url("/redirect?to=%s&status=%d" % (quote(target, safe=""), status))
    return url, tag


HEADERS = {"X-Api-Key": "k-secret-16"}


def test_cross_origin_redirect_not_followed_by_default(db, receiver, other_receiver):
    target, other_tag = other_receiver.unique_url("/ok")
    url, tag = redirect_to(receiver, target)
    task_id = schedule(db, url, headers=HEADERS, max_attempts=3)
    assert wait_final(db, task_id) == "failed"
    log = task_log(db, task_id)
    assert len(log) == 1 and "another origin" in log[0]["error"], log
    # a same-origin redirect is still followed, with the task's headers
    same, same_tag = receiver.unique_url("/ok")
    url2, _ = redirect_to(receiver, same)
    assert wait_final(db, schedule(db, url2, headers=HEADERS)) == "succeeded"
    hop = receiver.wait_for(lambda r: ("t=" + same_tag) in r["query"])[0]
    assert hop["headers"].get("x-api-key") == "k-secret-16"
    time.sleep(0.5)
    assert other_receiver.tagged(other_tag) == []


def test_cross_origin_redirect_allowed_leaves_headers_and_body(db, server, receiver,
                                                                other_receiver):
    server.set_guc(db, "jobflow.follow_cross_origin_redirects", "on")
    time.sleep(0.5)            # the worker applies it on its next turn
    try:
        target, other_tag = other_receiver.unique_url("/ok")
        url, _ = redirect_to(receiver, target)
        get_id = schedule(db, url, headers=HEADERS)
        target_b, other_tag_b = other_receiver.unique_url("/echo")
        url_b, _ = redirect_to(receiver, target_b, status=307)
        post_id = schedule(db, url_b, method="POST", headers=HEADERS,
                           body={"secret": "body-16"}, max_attempts=2)
        assert wait_final(db, [get_id, post_id]) == {get_id: "succeeded", post_id: "failed"}
        hop = other_receiver.wait_for(lambda r: ("t=" + other_tag) in r["query"])[0]
        assert "x-api-key" not in hop["headers"], hop
        assert hop["headers"].get("x-jobflow-task-id") == str(get_id)
        log = task_log(db, post_id)
        assert len(log) == 1 and "body" in log[0]["error"], log
        time.sleep(0.5)
        assert other_receiver.tagged(other_tag_b) == []
    finally:
        server.set_guc(db, "jobflow.follow_cross_origin_redirects", None)
