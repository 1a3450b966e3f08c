"""A source's token: stored sealed (base/sealed.py: Fernet, keyed from SECRET_KEY), or
read from an environment variable the source names (its value is never
stored). Never shown in the admin, never logged.

Only variables named for it (KOOKEE_SOURCE_TOKEN_...) may hold a source's
token: a source names the host its token is sent to, so a source that could
name any variable would send the server's own secrets (DJANGO_SECRET_KEY,
OPENAI_API_KEY, the handoff webhook's secret) to a host of its choosing."""

from __future__ import annotations

import os
import re

from base.sealed import Unreadable, seal, unseal

ENV_PREFIX = "KOOKEE_SOURCE_TOKEN_"
ENV_NAME = re.compile(rf"{ENV_PREFIX}[A-Z0-9_]+")


class TokenError(Exception):
    pass


PURPOSE = "kookee.source-token"  # base/sealed.py: tokens sealed before the move still open


def encrypt(token: str) -> str:
    return seal(PURPOSE, token)


def decrypt(stored: str) -> str:
    try:
        return unseal(PURPOSE, stored)
    except Unreadable:
        raise TokenError("the stored token cannot be read (SECRET_KEY changed?): enter it again") from None


def check_env_name(name: str) -> None:
    """Raises TokenError unless the variable may hold a source's token."""
    if not ENV_NAME.fullmatch(name):
        raise TokenError(
            f"the environment variable {name} cannot hold a source's token: only {ENV_PREFIX}... may "
            f"(capital letters, digits and _, such as {ENV_PREFIX}ZENDESK)"
        )


def token_for(source) -> str:  # type: ignore[no-untyped-def]
    """The source's token: its environment variable's, else the stored one,
    else none (a public help center needs none)."""
    if source.token_env:
        # Checked here too, before anything is sent: a row saved before the
        # rule may name any variable.
        check_env_name(source.token_env)
        value = os.environ.get(source.token_env, "")
        if not value:
            raise TokenError(f"the environment variable {source.token_env} is not set")
        return value
    return decrypt(source.token_encrypted)
