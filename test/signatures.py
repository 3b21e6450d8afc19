# -------------------------------------------------------------------------
#
# signatures.py
#     Standard Webhooks v1 verification with Python's hmac, as the receiver
#     of docs/receivers.md does it: shared by the signing tests and the
#     pg_upgrade test (which checks that keys made before an upgrade still
#     verify after it).
#
# -------------------------------------------------------------------------

import base64
import hashlib
import hmac


def python_verify(secret, req):
    """True if any v1 signature of the recorded request req (its headers
    and body) matches the whsec_ secret."""
    key = base64.b64decode(secret[len("whsec_"):])
    h = req["headers"]
    msg = ("%s.%s.%s" % (h["webhook-id"], h["webhook-timestamp"], req["body"])).encode()
    expected = base64.b64encode(hmac.new(key, msg, hashlib.sha256).digest()).decode()
    return any(hmac.compare_digest(s.split(",", 1)[1], expected)
               for s in h["webhook-signature"].split(" ") if s.startswith("v1,"))
