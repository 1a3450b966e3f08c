"""Staff previewing a draft of the assistant (the admin's Preview page,
chat/assistant/) chat as a visitor of their own: by their admin session
(only staff who may shape the assistant) and a preview key kept in it, so
that the preview's conversation is never their own chat's nor a visitor's.
"Start over" revokes the key's hash, as for a visitor; the Preview page
then gives a new one."""

from __future__ import annotations

import secrets
from types import SimpleNamespace
from typing import Any

from django.contrib.auth import get_user

from chat.models import RevokedKey
from chat.visitors.identity import hash_key

SESSION_KEY = "kookee_preview_key"
PERMISSION = "chat.change_assistantversion"


def may_preview(user: Any) -> bool:
    return bool(user.is_active and user.is_staff and user.has_perm(PERMISSION))


def key_for(session: Any) -> str:
    """The session's preview key, a new one when it has none or it was revoked."""
    key = session.get(SESSION_KEY)
    if not key or RevokedKey.objects.filter(visitor_hash=hash_key(key)).exists():
        key = session[SESSION_KEY] = secrets.token_urlsafe(24)
    return str(key)


def key_of(session: Any) -> str | None:
    """The preview key of a session whose user may preview (Django's own
    check of the session: its backend and its password hash); else None."""
    key = session.get(SESSION_KEY)
    if not key:
        return None
    user = get_user(SimpleNamespace(session=session))  # type: ignore[arg-type]
    return str(key) if may_preview(user) else None
