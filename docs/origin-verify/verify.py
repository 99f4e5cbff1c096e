"""Verifying X-Anteroom-Admission at the origin with Python's `cryptography` package.

Fetch the key once from GET /__anteroom/admission-key ("public_key_pem") and keep it.

    ANTEROOM_PUBLIC_KEY_PEM="$(cat key.pem)" TOKEN="v1...." python3 verify.py

prints the claims as JSON and exits 0, or prints why and exits 1.
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


def verify_admission(token, now=None):
    """The claims {kid, room, ref, admitted_at, exp}, or None if the token is not genuine."""
    parts = (token or "").split(".")
    if len(parts) != 3 or parts[0] != "v1":
        return None
    try:
        PUBLIC_KEY.verify(_b64url(parts[2]), f"{parts[0]}.{parts[1]}".encode("ascii"))
        claims = json.loads(_b64url(parts[1]))
    except (InvalidSignature, ValueError, UnicodeEncodeError):
        return None
    exp = claims.get("exp")
    if not isinstance(exp, int) or (now or time.time()) >= exp:
        return None  # expired
    return claims


# In a Flask view:
#     claims = verify_admission(request.headers.get("X-Anteroom-Admission"))
#     if claims is None:
#         abort(403)
if __name__ == "__main__":
    claims = verify_admission(os.environ.get("TOKEN"))
    if claims is None:
        print("refused: not a valid, unexpired admission token", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(claims))
