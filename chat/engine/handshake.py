"""Who is connecting: a socket's handshake read (chat/engine/consumers.py).

A visitor comes in by the chat page's session cookie, or by the widget's
token; staff previewing a draft of the assistant (the admin's Preview page,
chat/assistant/) by their admin session and a preview key of their own, so
that the preview's conversation is never their own chat's, nor a visitor's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs

from django.conf import settings
from django.utils import translation
from django.utils.translation.trans_real import parse_accept_lang_header

from chat.engine import records
from chat.visitors import access, embed, preview
from chat.visitors import identity as visitors
from chat.visitors.identity import Visitor

Identity = tuple[Visitor, int | None, tuple[int, str] | None]


def identify(scope: Mapping[str, Any]) -> Identity | None:
    """The visitor, their conversation (None before their first message) and
    their running turn, if any (see records.running_turn):
    by the widget's token when one is presented (the embed page), else by the
    session cookie (the chat page), or staff's preview (`?preview=1`). None:
    no live session. Raises Refused for a token that is no good (forged,
    idle, revoked) or a revoked session."""
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    if query.get("preview"):
        return _previewer(scope)
    tokens = query.get("token")
    if tokens:
        visitor = access.visitor_for_token(tokens[0])
        if visitor is None:
            raise access.Refused
    else:
        visitor = access.visitor_for_session(scope["session"])
    if visitor is None:
        return None
    running = records.running_turn(visitor)
    page = _source_page(scope) if tokens else ""
    return Visitor.of(visitor, _client_address(scope), page), access.conversation_of(visitor), running


def _previewer(scope: Mapping[str, Any]) -> Identity | None:
    """Staff who may shape the assistant, previewing its draft: None for
    anyone else (the handshake is refused)."""
    key = preview.key_of(scope["session"])
    if key is None:
        return None
    visitor = dataclasses.replace(Visitor.of(visitors.hash_key(key), _client_address(scope)), preview=True)
    return visitor, access.conversation_of(visitor.hash), records.running_turn(visitor.hash)


def _source_page(scope: Mapping[str, Any]) -> str:
    """The page of a customer's site that embeds the widget, as the widget's
    script tells it (static/chat/widget.js): kept as origin and path (a query
    string can carry anything), and only from a site allowed to embed it."""
    pages = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("page")
    return embed.source_page(pages[0]) if pages else ""


def language(scope: Mapping[str, Any]) -> str:
    """The visitor's language, as Django's LocaleMiddleware chooses it for
    the page: the one they chose on the chat page (its cookie), else their
    browser's Accept-Language."""
    chosen = (scope.get("cookies") or {}).get(settings.LANGUAGE_COOKIE_NAME)
    if chosen:
        try:
            return translation.get_supported_language_variant(chosen)
        except LookupError:
            pass
    header = dict(scope.get("headers", [])).get(b"accept-language", b"").decode("latin-1")
    for code, _quality in parse_accept_lang_header(header):
        if code == "*":
            break
        try:
            return translation.get_supported_language_variant(code)
        except LookupError:
            continue
    return settings.LANGUAGE_CODE


def host(scope: Mapping[str, Any]) -> str:
    """The host:port the socket reached this app at (no action may call it)."""
    return str(dict(scope.get("headers", [])).get(b"host", b"").decode("latin-1")[:300])


def _client_address(scope: Mapping[str, Any]) -> str | None:
    client = scope.get("client")
    forwarded = dict(scope.get("headers", [])).get(b"x-forwarded-for", b"").decode("latin-1")
    return visitors.client_address(client[0] if client else None, forwarded)
