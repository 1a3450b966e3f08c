"""The secret key: refused when weak outside DEBUG, made on the spot for
local use. It signs sessions and widget tokens and keys the stored hashes of
visitor keys, so a guessable one hands over every visitor's conversation."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

# Values that documentation and examples have shipped; never a real secret.
KNOWN_PLACEHOLDERS = {"change-me", "changeme", "secret", "dev-only-insecure-key", "your-secret-key"}
MIN_LENGTH = 50
MIN_UNIQUE_CHARACTERS = 5


def check_secret_key(key: str, *, debug: bool) -> None:
    """Refuses to start without a strong secret key, unless DEBUG is on."""
    if debug and key:
        return
    if not key:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is not set. Production needs its own secret, e.g. from "
            "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`; "
            "for local use, set DJANGO_DEBUG=true (`make run` does)."
        )
    weak = (
        key.lower() in KNOWN_PLACEHOLDERS
        or key.startswith("django-insecure-")
        or len(key) < MIN_LENGTH
        or len(set(key)) < MIN_UNIQUE_CHARACTERS
    )
    if weak:
        raise ImproperlyConfigured(
            f"DJANGO_SECRET_KEY is too weak for production: use at least {MIN_LENGTH} random characters, e.g. "
            "from `python -c 'import secrets; print(secrets.token_urlsafe(50))'`."
        )


def local_secret_key(path: Path) -> str:
    """A secret for local use (DEBUG), made once and kept beside manage.py
    (and out of git), so sessions outlive a restart."""
    key = secrets.token_urlsafe(50)
    try:
        # Exclusive: two processes starting together agree on one secret.
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(descriptor, "w") as file:
        file.write(key + "\n")
    return key
