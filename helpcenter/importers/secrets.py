"""A source's token: stored encrypted (Fernet, keyed from SECRET_KEY), or
read from the environment variable the source names (its value is never
stored). Never shown in the admin, never logged."""

from __future__ import annotations

import base64
import hashlib
import os

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings


class TokenError(Exception):
    pass


def _fernet() -> MultiFernet:
    # SECRET_KEY first, then its fallbacks: a rotated key still reads old tokens.
    keys = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return MultiFernet(
        [Fernet(base64.urlsafe_b64encode(hashlib.sha256(f"kookee.source-token:{k}".encode()).digest())) for k in keys]
    )


def encrypt(token: str) -> str:
    return _fernet().encrypt(token.encode()).decode() if token else ""


def decrypt(stored: str) -> str:
    try:
        return _fernet().decrypt(stored.encode()).decode() if stored else ""
    except InvalidToken:
        raise TokenError("the stored token cannot be read (SECRET_KEY changed?): enter it again") from None


def token_for(source) -> str:  # type: ignore[no-untyped-def]
    """The source's token: its environment variable's, else the stored one,
    else none (a public help center needs none)."""
    if source.token_env:
        value = os.environ.get(source.token_env, "")
        if not value:
            raise TokenError(f"the environment variable {source.token_env} is not set")
        return value
    return decrypt(source.token_encrypted)
