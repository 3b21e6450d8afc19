# -------------------------------------------------------------------------
#
# test_boundary_review3.py
#     A third review of issue 20 (the tenant boundary), from the HTTP side:
#     as a hostile tenant and a hostile receiver would try it.  Each test
#     fails on the code reviewed (main at bdf4b9e):
#       - the masking of header secrets in jobflow.task_log is an oracle:
#         a response whose end is a prefix of a secret the request carried
#         has that end masked, any other end is shown.  Whoever may point
#         a task that uses the secret at a path of one of its origins (the
#         secret's role, jobflow_admin) and finds there anything that
#         reflects its input (an echo, an error message quoting a field,
#         a 404 page quoting the path) reads the secret back one
#         character at a time: it sends a known prefix plus one guessed
#         character so that they end the response, or the excerpt (the
#         cut at jobflow.max_response_size puts the end wherever the
#         sender wants it), and the guess was right when the log shows
#         stars.  The receiver never sends the secret back itself.
#         (dispatch.c, mask_secrets: the loop that masks "the beginning of
#         one where buf ends"; item 5)
#     The receiver-side finding of the same review (trailers without end)
#     is in test/unit/test_http_hostile.c.
#
# -------------------------------------------------------------------------

import uuid

import pytest

from conftest import call, schedule, wait_final


@pytest.fixture
def echo(db, connect, app_role, receiver):
    """echo(text) -> what jobflow.task_log keeps of the answer of a
    receiver (on the secret's origin) that reflects the request's body,
    for a task that sends the tenant's secret in a header; and the
    secret."""
    secret = "S3cr3tV4lue-" + uuid.uuid4().hex
    tenant = connect(user=app_role)
    call(tenant, "SELECT jobflow.set_secret('tok', %s, origins => ARRAY[%s])",
         (secret, receiver.url("")))
    url, _ = receiver.unique_url("/echo")

    def run(text):
        task = schedule(tenant, url, body_text=text, content_type="text/plain",
                        headers={"X-Tok": {"secret": "tok"}})
        assert wait_final(tenant, task, timeout=20) == "succeeded"
        return call(tenant, "SELECT response FROM jobflow.task_log WHERE task_id = %s",
                    (task,))
    run.secret = secret
    return run


def other_char(c):
    return "A" if c != "A" else "B"


@pytest.mark.parametrize("known", [0, 5, 11])
def test_masking_does_not_tell_a_right_guess_from_a_wrong_one(echo, known):
    """An answer that ends with the secret's first known characters and a
    guess of the next one: the log must look the same whether the guess
    is right or wrong (here: as many stars either way)."""
    s = echo.secret
    right = echo("invalid id: " + s[:known + 1])
    wrong = echo("invalid id: " + s[:known] + other_char(s[known]))
    assert right.count("*") == wrong.count("*"), \
        "the log tells a right guess of character %d of the secret (%r) from a wrong " \
        "one (%r)" % (known + 1, right[-20:], wrong[-20:])


def test_a_cut_excerpt_does_not_tell_a_right_guess_from_a_wrong_one(db, echo):
    """The same where the answer goes on: the excerpt's cut at
    jobflow.max_response_size ends it where the sender wants."""
    limit = call(db, "SELECT pg_size_bytes(current_setting('jobflow.max_response_size'))")
    s = echo.secret
    known = 7

    def padded(guess):
        return "p" * (limit - len(guess)) + guess + "q" * 100

    right = echo(padded(s[:known + 1]))
    wrong = echo(padded(s[:known] + other_char(s[known])))
    assert len(right) == len(wrong) == limit
    assert right.count("*") == wrong.count("*"), \
        "the excerpt's end tells a right guess (%r) from a wrong one (%r)" \
        % (right[-12:], wrong[-12:])
