"""ASGI entry point: HTTP goes to Django; /ws/chat/ goes through the origin
check (chat/visitors/origins.py) and the session middleware to the chat consumer;
lifespan events start and stop the process's background work."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kookee.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import WebsocketDenier  # noqa: E402
from channels.sessions import CookieMiddleware, InstanceSessionWrapper  # noqa: E402

from chat.engine import backpressure, lifecycle  # noqa: E402
from chat.ops import tracing  # noqa: E402
from chat.routing import websocket_urlpatterns  # noqa: E402
from chat.visitors import origins  # noqa: E402


class _Denier(WebsocketDenier):
    # Channels' denier listens on the default channel layer: with Redis, a
    # channel and a blocking receive per refused handshake, and cancelling
    # that receive left later receives stalled for seconds (channels-redis's
    # blocking pop). A refusal needs no channel.
    channel_layer_alias = "no channel layer"


def _origin_checked(application):
    """Refuses (HTTP 403) a handshake from an origin other than the site's
    own or an embedding site's: scheme, host and port (chat/visitors/origins.py)."""

    async def checked(scope, receive, send):
        if origins.socket_may_open(scope):
            return await application(scope, receive, send)
        return await _Denier()(scope, receive, send)

    return checked


def _with_session(application):
    """The visitor's session in the socket's scope, as Channels'
    SessionMiddlewareStack gives it, but with the server's own `send`.
    Channels wraps `send` to save a modified session on an HTTP response's
    start, which a WebSocket never sends; the wrapper still checked the
    session on every frame (3% of the CPU at 200 visitors, py-spy)."""

    async def with_session(scope, receive, send):
        wrapper = InstanceSessionWrapper(scope, send)
        await wrapper.resolve_session()
        return await application(wrapper.scope, receive, send)

    return CookieMiddleware(with_session)


router = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        # Outermost, to see the server's own `send` (chat/engine/backpressure.py).
        "websocket": backpressure.measured(_origin_checked(_with_session(URLRouter(websocket_urlpatterns)))),
    }
)

# Daphne speaks no lifespan: the process's background work starts when its
# reactor runs. Lifespan servers (uvicorn) start it with "lifespan.startup".
lifecycle.start_under_daphne()
# Traces, when OTEL_EXPORTER_OTLP_ENDPOINT is set (chat/ops/tracing.py).
tracing.configure()


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        return await lifecycle.lifespan(scope, receive, send)
    # A server with neither lifespan nor Twisted starts it here; once.
    lifecycle.start()
    return await router(scope, receive, send)
