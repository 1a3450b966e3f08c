"""Which web origins may open the chat's WebSocket, and frame the widget.

An origin is a scheme, a host and a port: `http://127.0.0.1:9999` is not
`http://127.0.0.1:8000`, nor `https://127.0.0.1`. A page on another port of
the same host opened the socket with the visitor's cookie and read their
history while only host names were compared. The socket is the chat page's
(or the widget frame's, which is served from here too): its origin must be
this site's own, as the handshake reached it or as KOOKEE_SITE_URL names it.
A site of KOOKEE_EMBED_ORIGINS may open it only with a widget token, never
with the chat page's cookie: a same-site embedder (www.example.com framing
chat.example.com) would have the visitor's SameSite=Lax cookie sent along.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

from django.conf import settings
from django.http.request import split_domain_port, validate_host

DEFAULT_PORTS = {"http": 80, "https": 443}


class Origin(NamedTuple):
    scheme: str
    host: str
    port: int


def parse(value: str) -> Origin | None:
    """`scheme://host[:port]`, with the scheme's default port; None for
    anything else (a path, credentials, "null", another scheme)."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), parts.hostname
    if scheme not in DEFAULT_PORTS or not host or parts.username or parts.password:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    return Origin(scheme, host, port or DEFAULT_PORTS[scheme])


def socket_may_open(scope: dict[str, Any]) -> bool:
    """Whether the handshake's Origin is this site's, or, for a handshake
    with a widget token, a site allowed to embed the widget. No Origin (not
    a browser's handshake) is refused."""
    headers = dict(scope.get("headers", []))
    origin = headers.get(b"origin")
    parsed = parse(origin.decode("latin-1")) if origin is not None else None
    if parsed is None:
        return False
    if parsed in own_origins(scope):
        return True
    return may_embed(parsed) and "token" in parse_qs(scope.get("query_string", b"").decode("latin-1"))


def own_origins(scope: dict[str, Any]) -> set[Origin]:
    """This site's origins: as the handshake reached it (its Host, when
    ALLOWED_HOSTS has it, and its scheme, HTTPS behind a proxy that says so
    as SECURE_PROXY_SSL_HEADER sets), and KOOKEE_SITE_URL's."""
    found = set()
    site = parse(_origin_part(settings.KOOKEE_SITE_URL)) if settings.KOOKEE_SITE_URL else None
    if site is not None:
        found.add(site)
    headers = dict(scope.get("headers", []))
    host = headers.get(b"host", b"").decode("latin-1")
    domain, _port = split_domain_port(host)
    if domain and validate_host(domain, settings.ALLOWED_HOSTS):
        reached = parse(f"{'https' if _secure(scope, headers) else 'http'}://{host}")
        if reached is not None:
            found.add(reached)
    return found


def _origin_part(url: str) -> str:
    """A URL's scheme, host and port: KOOKEE_SITE_URL may name a path too."""
    parts = urlsplit(url.strip())
    return f"{parts.scheme}://{parts.netloc}"


def may_embed(origin: Origin) -> bool:
    """Whether KOOKEE_EMBED_ORIGINS lists the origin (`https://*.example.com`
    covers its subdomains)."""
    for allowed in settings.KOOKEE_EMBED_ORIGINS:
        wildcard = "://*." in allowed
        listed = parse(allowed.replace("://*.", "://", 1))
        if listed is None or (origin.scheme, origin.port) != (listed.scheme, listed.port):
            continue
        if origin.host == listed.host and not wildcard:
            return True
        if wildcard and re.fullmatch(r"[^.]+(\.[^.]+)*\." + re.escape(listed.host), origin.host):
            return True
    return False


def _secure(scope: dict[str, Any], headers: dict[bytes, bytes]) -> bool:
    if scope.get("scheme") in ("wss", "https"):
        return True
    proxy_header: tuple[str, str] | None = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if not proxy_header:
        return False
    name, value = proxy_header
    # Django's META name (HTTP_X_FORWARDED_PROTO) as the header it came from.
    sent = headers.get(name.removeprefix("HTTP_").lower().replace("_", "-").encode(), b"")
    return sent.decode("latin-1").split(",")[0].strip() == value
