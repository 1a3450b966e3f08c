"""Which origins may open the chat's socket: scheme, host and port, through
the real ASGI application (chat/visitors/origins.py)."""

from urllib.parse import quote

import pytest
from channels.testing import WebsocketCommunicator

from chat.visitors import embed, origins
from kookee.asgi import application
from tests.chat.chat_client import ChatClient, new_session_key

pytestmark = pytest.mark.django_db(transaction=True)


async def handshake(
    origin: str | None, host: str | None = "localhost:8000", token: bool = False, **headers: str
) -> bool:
    """Whether a handshake with this Origin and Host (and a live session, or
    a widget token) is accepted."""
    sent = [] if token else [(b"cookie", f"sessionid={await new_session_key()}".encode())]
    if origin is not None:
        sent.append((b"origin", origin.encode()))
    if host is not None:
        sent.append((b"host", host.encode()))
    sent += [(name.replace("_", "-").encode(), value.encode()) for name, value in headers.items()]
    path = f"/ws/chat/?token={quote(embed.new_token(), safe='')}" if token else "/ws/chat/"
    client = ChatClient(WebsocketCommunicator(application, path, headers=sent))
    client.connected, _ = await client.communicator.connect()
    try:
        return client.connected
    finally:
        await client.close()


@pytest.mark.parametrize(
    "origin",
    [
        "http://localhost:9999",  # another port of the same host: the audit's page
        "https://localhost:8000",  # another scheme
        "https://localhost",
        "http://localhost",
        "http://evil.example:8000",
        "http://localhost.evil.example:8000",
        "null",
        "",
        "http://localhost:8000/chat",
        "http://user@localhost:8000",
        "ws://localhost:8000",
    ],
)
async def test_a_page_of_another_origin_may_not_open_the_socket(origin):
    assert not await handshake(origin)


async def test_no_origin_is_refused():
    assert not await handshake(None)


async def test_the_sites_own_page_may():
    assert await handshake("http://localhost:8000")
    assert await handshake("http://LOCALHOST:8000")


async def test_the_default_port_is_the_same_origin_written_or_not():
    assert await handshake("http://localhost:80", host="localhost")
    assert await handshake("http://localhost", host="localhost:80")


async def test_a_host_outside_allowed_hosts_is_refused_even_as_its_own_origin():
    assert not await handshake("http://evil.example:8000", host="evil.example:8000")


async def test_behind_a_tls_proxy_the_page_is_https(settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

    assert await handshake("https://localhost", host="localhost", x_forwarded_proto="https")
    assert not await handshake("http://localhost", host="localhost", x_forwarded_proto="https")
    # Without the proxy's word, the handshake was plain HTTP.
    assert not await handshake("https://localhost", host="localhost")


@pytest.mark.parametrize("site_url", ["https://chat.example.com:8443", "https://chat.example.com:8443/support/"])
async def test_the_site_url_is_the_sites_origin_whatever_the_proxy_passes_as_host(settings, site_url):
    # nginx's `$host` drops a non-default port: KOOKEE_SITE_URL names it.
    settings.KOOKEE_SITE_URL = site_url

    assert await handshake("https://chat.example.com:8443", host="localhost")
    assert not await handshake("https://chat.example.com", host="localhost")


async def test_sites_allowed_to_embed_the_widget_may_with_a_widget_token(settings):
    settings.KOOKEE_EMBED_ORIGINS = ["https://www.example.com", "https://*.shop.example"]

    assert await handshake("https://www.example.com", token=True)
    assert await handshake("https://www.example.com:443", token=True)
    assert await handshake("https://eu.shop.example", token=True)
    assert not await handshake("http://www.example.com", token=True)
    assert not await handshake("https://www.example.com:8443", token=True)
    assert not await handshake("https://shop.example", token=True)
    assert not await handshake("https://evilshop.example", token=True)


async def test_an_embedding_site_may_not_open_the_socket_with_the_chat_pages_cookie(settings):
    # A same-site embedder would have the visitor's SameSite=Lax cookie sent
    # along, and read their history.
    settings.KOOKEE_EMBED_ORIGINS = ["https://www.example.com"]

    assert not await handshake("https://www.example.com")


def test_origins_parse_to_scheme_host_and_port():
    assert origins.parse("https://Example.com") == ("https", "example.com", 443)
    assert origins.parse("http://[::1]:8000") == ("http", "::1", 8000)
    assert origins.parse("http://example.com:99999") is None
    assert origins.parse("file:///etc/passwd") is None
