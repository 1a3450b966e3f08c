"""A verified visitor: a person the customer's own backend vouches for.

Their backend signs a JWT (HS256, with KOOKEE_IDENTITY_SECRET) naming the
person: `sub` (their user id) and `exp` required, `email`, `name` and
`attributes` (a flat object) optional. The visitor's tab hands it over in an
`identify` frame; what it says is believed only once the signature and the
claims check out here (PyJWT does the cryptography). The token itself is
never stored, logged or shown: only what it vouched for.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import jwt
from django.conf import settings

# What a claim may hold: ids, names and attributes are for Support's eyes
# and an API's parameters, not documents.
CLAIM_CHARS = 200
ATTRIBUTES = 50
TOKEN_CHARS = 8192
# The customer's servers' clocks and ours differ a little: a token issued
# (`iat`, `nbf`) a few seconds "in the future" is still good, and an expired
# one is refused from this long after its `exp`.
CLOCK_SKEW_SECONDS = 30
Attribute = str | int | float | bool | None


class BadIdentity(Exception):
    """A token that proves nothing; the reason is for the log, never the visitor's screen."""


@dataclass(frozen=True)
class Person:
    id: str  # their `sub`
    name: str = ""
    email: str = ""
    # A flat object, kept as pairs: a Person is part of a frozen, hashable Visitor.
    attributes: tuple[tuple[str, Attribute], ...] = ()

    def attribute(self, key: str) -> Attribute:
        return dict(self.attributes).get(key)


def verify(token: str) -> Person:
    """The person a token vouches for. Raises BadIdentity for no secret set,
    a bad signature or algorithm, an expired token or one that expires too
    far ahead (KOOKEE_IDENTITY_MAX_AGE_SECONDS), or a missing or malformed
    claim."""
    secret = settings.KOOKEE_IDENTITY_SECRET
    if not secret:
        raise BadIdentity("no KOOKEE_IDENTITY_SECRET is set")
    if not isinstance(token, str) or not token or len(token) > TOKEN_CHARS:
        raise BadIdentity("not a token")
    try:
        # HS256 only: a token that names another algorithm ("none", or RS256
        # with our secret as a public key) is refused by PyJWT for it.
        # With an audience set, a token must name it: one signed for another
        # service with the same key is no good here. Without, a token that
        # names one is refused (PyJWT's rule): it was meant for someone else.
        audience = settings.KOOKEE_IDENTITY_AUDIENCE or None
        required = ["sub", "exp", "aud"] if audience else ["sub", "exp"]
        claims = jwt.decode(
            token,
            secret,
            algorithms=["HS256"],
            audience=audience,
            options={"require": required},
            leeway=CLOCK_SKEW_SECONDS,
        )
    except jwt.PyJWTError as e:
        raise BadIdentity(f"{type(e).__name__}: {e}") from None
    if claims["exp"] > time.time() + settings.KOOKEE_IDENTITY_MAX_AGE_SECONDS:
        raise BadIdentity("expires too far ahead")
    return Person(
        _text(claims, "sub", required=True),
        _text(claims, "name"),
        _text(claims, "email"),
        _attributes(claims.get("attributes")),
    )


def _text(claims: dict[str, Any], name: str, required: bool = False) -> str:
    value = claims.get(name, "")
    if value is None and not required:
        return ""
    if not isinstance(value, str) or len(value) > CLAIM_CHARS or (required and not value.strip()):
        raise BadIdentity(f"{name!r} must be a string of at most {CLAIM_CHARS} characters")
    return value.strip()


def _attributes(value: Any) -> tuple[tuple[str, Attribute], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict) or len(value) > ATTRIBUTES:
        raise BadIdentity(f"'attributes' must be an object of at most {ATTRIBUTES} keys")
    for key, item in value.items():
        flat = (
            item is None
            or isinstance(item, bool | int)
            or (isinstance(item, float) and math.isfinite(item))
            or (isinstance(item, str) and len(item) <= CLAIM_CHARS)
        )
        if len(key) > CLAIM_CHARS or not flat:
            raise BadIdentity("'attributes' must be flat: strings, numbers, booleans or null")
    return tuple(sorted(value.items()))
