"""Sessions that store nothing until there is something to store.

The chat page gives every visitor a session, which the WebSocket handshake
then needs. Django's database sessions write a row for it, kept for
SESSION_COOKIE_AGE: anyone could fill the table with `curl` in a loop. Here
the chat page mints a key that proves itself instead: random, with the time
it was minted and a keyed tag over both. Such a key is a live, empty
session until SESSION_COOKIE_AGE after it was minted, with no row; a row is
written only when the session holds data (a staff login cycles to an
ordinary key). Everything else is Django's database session store.

SESSION_ENGINE = "chat.visitors.sessions".
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.contrib.sessions.backends.base import UpdateError
from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore
from django.utils.crypto import constant_time_compare, get_random_string, salted_hmac

_RANDOM = 22  # characters of [a-z0-9]: about 113 bits
_TIME = 7  # the minting time in base 36, seconds
_TAG = 11  # of a keyed HMAC's hex: forging one takes about 2**43 tries online
_SALT = "kookee.sessions.minted"
_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"
KEY_LENGTH = _RANDOM + _TIME + _TAG  # 40: Django's session_key column
CLOCK_SKEW_SECONDS = 60


def mint_key(now: float | None = None) -> str:
    """A fresh session key that needs no row to be believed."""
    body = get_random_string(_RANDOM, _ALPHABET) + _base36(int(time.time() if now is None else now)).rjust(_TIME, "0")
    return body + _tag(body)


def minted_alive(key: str | None, now: float | None = None) -> bool:
    """Whether `key` was minted here and is younger than SESSION_COOKIE_AGE."""
    if not key or len(key) != KEY_LENGTH:
        return False
    body, tag = key[:-_TAG], key[-_TAG:]
    if not constant_time_compare(tag, _tag(body)):
        return False
    try:
        minted = int(body[_RANDOM:], 36)
    except ValueError:
        return False
    age = (time.time() if now is None else now) - minted
    # Minted on another server a little ahead of this one's clock: still good.
    return -CLOCK_SKEW_SECONDS <= age < settings.SESSION_COOKIE_AGE


def _tag(body: str) -> str:
    return salted_hmac(_SALT, body, algorithm="sha256").hexdigest()[:_TAG]


def _base36(number: int) -> str:
    digits = ""
    while True:
        number, digit = divmod(number, 36)
        digits = _ALPHABET[digit] + digits
        if not number:
            return digits


class SessionStore(DatabaseSessionStore):
    _unwritten = False  # minted in this request, nothing stored yet

    def mint(self) -> None:
        """Makes this an empty session under a fresh minted key. Marked
        modified, so that SessionMiddleware sets its cookie (with the
        configured name, age and flags); `save` then writes no row."""
        self._session_key = mint_key()
        self._session_cache: dict[str, Any] = {}
        self._unwritten = True
        self.modified = True

    def load(self) -> dict[str, Any]:
        key = self.session_key
        data = super().load()  # forgets the key when no row holds it
        if self.session_key is None and minted_alive(key):
            self._session_key = key  # a minted key is its own proof
        return data

    def save(self, must_create: bool = False) -> None:
        if self._unwritten and not self._session_cache:
            return  # nothing to keep: the key alone is the session
        if self._unwritten:
            must_create, self._unwritten = True, False
        try:
            super().save(must_create)
        except UpdateError:
            if must_create or not minted_alive(self.session_key):
                raise
            # A minted session's first data: its row does not exist yet.
            super().save(must_create=True)
