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

from django.conf import settings
from django.core import signing

# Widget visitors' keys share Conversation.session_key with session keys,
# which are 32 lowercase letters and digits and so never start with "w-".
PREFIX = "w-"
_signer = signing.TimestampSigner(salt="kookee.widget")


def new_token() -> str:
    return _signer.sign(PREFIX + uuid.uuid4().hex)


def visitor_key(token: str) -> str | None:
    """The visitor key a token carries; None when it is forged or expired
    (tokens last as long as a session cookie would)."""
    try:
        key = _signer.unsign(token, max_age=settings.SESSION_COOKIE_AGE)
    except (signing.BadSignature, ValueError):  # ValueError: signed, but with no timestamp
        return None
    return key if key.startswith(PREFIX) else None


def frame_ancestors() -> str:
    """Who may frame the widget: ourselves and KOOKEE_EMBED_ORIGINS."""
    return " ".join(["'self'", *settings.KOOKEE_EMBED_ORIGINS])
