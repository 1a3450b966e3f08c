"""Secrets stored sealed: encrypted with Fernet under a key derived from
SECRET_KEY and the secret's purpose, so that a source's token and an
action's credentials are never readable from a database dump alone, and a
value sealed for one purpose cannot be read as another's. A rotated
SECRET_KEY (kept in SECRET_KEY_FALLBACKS) still opens what it sealed."""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings


class Unreadable(Exception):
    """A sealed value that no key opens (SECRET_KEY changed without a fallback)."""


def _fernet(purpose: str) -> MultiFernet:
    keys = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return MultiFernet(
        [Fernet(base64.urlsafe_b64encode(hashlib.sha256(f"{purpose}:{key}".encode()).digest())) for key in keys]
    )


def seal(purpose: str, secret: str) -> str:
    """The secret, sealed; "" for none."""
    return _fernet(purpose).encrypt(secret.encode()).decode() if secret else ""


def unseal(purpose: str, stored: str) -> str:
    """The secret; "" for none. Raises Unreadable."""
    try:
        return _fernet(purpose).decrypt(stored.encode()).decode() if stored else ""
    except InvalidToken:
        raise Unreadable(purpose) from None
