"""The embeddable widget's visitors.

The widget's chat runs in an iframe on our origin inside a customer's page on
theirs, where our cookies are third-party ones: blocked by some browsers, and
never sent to a cross-site frame with SameSite=Lax; its storage is
third-party too, and often blocked. So a widget visitor is known by a signed
token, which the widget's script keeps in the host page's own storage and
hands to the frame in its URL fragment; the frame presents it on the
WebSocket handshake instead of a cookie.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.conf import settings
from django.core import signing

# Widget visitors' keys are hashed into Conversation.visitor_hash like
# session keys, which are 32 lowercase letters and digits and so never start
# with "w-": the two can never name the same visitor.
PREFIX = "w-"
_signer = signing.TimestampSigner(salt="kookee.widget")


def new_token() -> str:
    return _signer.sign(PREFIX + uuid.uuid4().hex)


def visitor_key(token: str) -> str | None:
    """The visitor key a token carries; None when it is forged. Whether it
    is still good depends on its age and use: see is_fresh."""
    try:
        key = _signer.unsign(token)
    except (signing.BadSignature, ValueError):  # ValueError: signed, but with no timestamp
        return None
    return key if key.startswith(PREFIX) else None


def is_fresh(token: str) -> bool:
    """Made within KOOKEE_WIDGET_IDLE_DAYS. An older token is good only
    while its conversation is in use (chat/services.py)."""
    try:
        _signer.unsign(token, max_age=timedelta(days=settings.KOOKEE_WIDGET_IDLE_DAYS))
    except (signing.BadSignature, ValueError):
        return False
    return True


def frame_ancestors() -> str:
    """Who may frame the widget: ourselves and KOOKEE_EMBED_ORIGINS."""
    return " ".join(["'self'", *settings.KOOKEE_EMBED_ORIGINS])
