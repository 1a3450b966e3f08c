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

import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from datetime import timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.core import signing
from django.http.request import validate_host

from chat.visitors import origins

logger = logging.getLogger("kookee.embed")

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
    while its conversation is in use (chat/visitors/access.py)."""
    try:
        _signer.unsign(token, max_age=timedelta(days=settings.KOOKEE_WIDGET_IDLE_DAYS))
    except (signing.BadSignature, ValueError):
        return False
    return True


def frame_ancestors() -> str:
    """Who may frame the widget: ourselves and KOOKEE_EMBED_ORIGINS."""
    return " ".join(["'self'", *settings.KOOKEE_EMBED_ORIGINS])


class Remembered:
    """The last `size` values seen, oldest forgotten first: a bounded set."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def first_time(self, value: str) -> bool:
        """Whether the value is not among the last `size` seen; it is now."""
        with self._lock:
            if value in self._seen:
                self._seen.move_to_end(value)
                return False
            self._seen[value] = None
            if len(self._seen) > self.size:
                self._seen.popitem(last=False)
            return True

    def __len__(self) -> int:
        return len(self._seen)


# The origins this process refused to frame the widget for, logged once each.
REFUSED_ORIGINS_KEPT = 256
refused_origins = Remembered(REFUSED_ORIGINS_KEPT)
LOGGED_ORIGIN_CHARS = 200


def may_frame(origin: str, own: Iterable[str]) -> bool:
    """Whether a page of this origin may show the widget's frame: the answer
    frame-ancestors gives (this site's own origins, `own`, or one of
    KOOKEE_EMBED_ORIGINS). The widget's script asks first (/embed/allowed),
    since a refused frame says nothing to the page, only to its console.

    Each origin refused is logged once per process (the last
    REFUSED_ORIGINS_KEPT of them are remembered): the operator sees which
    site tried, and nobody can fill the log by asking again."""
    parsed = origins.parse(origin)
    if parsed is not None and (parsed in {origins.parse(o) for o in own} or origins.may_embed(parsed)):
        return True
    origin = origin[:LOGGED_ORIGIN_CHARS]
    if origin and refused_origins.first_time(origin):
        logger.warning(
            "a page on %r tried to show the chat widget and may not: add its origin to KOOKEE_EMBED_ORIGINS "
            "if it is a site of yours",
            origin,
        )
    return False


SOURCE_PAGE_CHARS = 500


def source_page(url: str) -> str:
    """The embedding page a widget visitor chats from, as its script reports
    it: origin and path only (a query string or fragment can carry a
    token or an email), and only on a site allowed to embed the widget, so
    that nobody can make Support's list show an address of their choosing.
    "" for anything else."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return ""
    host = parts.hostname
    if parts.scheme not in ("http", "https") or not host:
        return ""
    origin = f"{parts.scheme}://{f'[{host}]' if ':' in host else host}{f':{port}' if port else ''}"
    if not _may_embed(origin, host):
        return ""
    return (origin + (parts.path or "/"))[:SOURCE_PAGE_CHARS]


def _may_embed(origin: str, host: str) -> bool:
    parsed = origins.parse(origin)
    if parsed is not None and origins.may_embed(parsed):
        return True
    return validate_host(host, settings.ALLOWED_HOSTS)  # our own pages ('self')
