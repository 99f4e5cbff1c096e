"""Verifying X-Anteroom-Admission at the origin with Python's `cryptography` package.

Fetch the key once from GET /__anteroom/admission-key ("public_key_pem") and keep it.

    ANTEROOM_PUBLIC_KEY_PEM="$(cat key.pem)" ROOM="drop" TOKEN="v1...." python3 verify.py

prints the claims as JSON and exits 0, or prints why and exits 1 (2 without ROOM).

ROOM is the room this origin serves, as named in anteroom.yaml. One admission key signs
every room's tokens, so the signature alone says "admitted somewhere", not "admitted
here": an origin must also check the token's `room` claim.
"""

import base64
import json
import os
import sys
import time

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.serialization import load_pem_public_key

PUBLIC_KEY = load_pem_public_key(os.environ["ANTEROOM_PUBLIC_KEY_PEM"].encode())


def _b64url(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def verify_admission(token, room, now=None):
    """The claims {kid, room, ref, admitted_at, exp}, or None if the token is not genuine,
    has expired, or was minted for another room than `room`.

    `room` is required: the room this origin serves. Without the check, a visitor admitted
    to a quiet room could carry their token to a busy one behind the same key.
    """
    if not isinstance(room, str) or not room:
        # A programming error, not a bad token: never fall back to "any room".
        raise TypeError("verify_admission: room must be the non-empty name of this origin's room")
    parts = (token or "").split(".")
    if len(parts) != 3 or parts[0] != "v1":
        return None
    try:
        PUBLIC_KEY.verify(_b64url(parts[2]), f"{parts[0]}.{parts[1]}".encode("ascii"))
        claims = json.loads(_b64url(parts[1]))
    except (InvalidSignature, ValueError, UnicodeEncodeError):
        return None
    if not isinstance(claims, dict):
        return None
    exp = claims.get("exp")
    if not isinstance(exp, int) or (now or time.time()) >= exp:
        return None  # expired
    if claims.get("room") != room:
        return None  # genuine, but admitted to another room
    return claims


# In a Flask view of the origin behind room "drop":
#     claims = verify_admission(request.headers.get("X-Anteroom-Admission"), "drop")
#     if claims is None:
#         abort(403)
if __name__ == "__main__":
    room = os.environ.get("ROOM")
    if not room:
        print("usage: ROOM=<this origin's room> TOKEN=v1.... python3 verify.py", file=sys.stderr)
        sys.exit(2)
    claims = verify_admission(os.environ.get("TOKEN"), room)
    if claims is None:
        print(f"refused: not a valid, unexpired admission token for room {room!r}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(claims))
