"""The WebSocket's middleware (kookee/asgi.py): the visitor's session is in
the socket's scope, and frames go to the server's own `send`, unwrapped."""

from importlib import import_module

import pytest
from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.sessions.backends.base import SessionBase

from kookee.asgi import _with_session

pytestmark = pytest.mark.django_db(transaction=True)


def _session_with(value: str) -> str:
    session: SessionBase = import_module(settings.SESSION_ENGINE).SessionStore()
    session["probe"] = value
    session.save()
    assert session.session_key
    return session.session_key


async def test_the_socket_reads_the_session_and_sends_through_the_servers_own_send():
    key = await database_sync_to_async(_session_with)("hello")
    seen = {}

    async def consumer(scope, receive, send):
        seen["send"] = send
        seen["probe"] = await database_sync_to_async(scope["session"].get)("probe")

    async def server_send(message):
        pass

    cookie = f"{settings.SESSION_COOKIE_NAME}={key}".encode()
    scope = {"type": "websocket", "path": "/ws/chat/", "headers": [(b"cookie", cookie)]}
    await _with_session(consumer)(scope, None, server_send)
    assert seen["probe"] == "hello"
    # Not wrapped per frame: Channels' wrapper checked the session on each.
    assert seen["send"] is server_send


async def test_a_socket_without_a_session_cookie_has_an_empty_session():
    seen = {}

    async def consumer(scope, receive, send):
        seen["empty"] = await database_sync_to_async(scope["session"].is_empty)()

    async def server_send(message):
        pass

    await _with_session(consumer)({"type": "websocket", "path": "/ws/chat/", "headers": []}, None, server_send)
    assert seen["empty"] is True
