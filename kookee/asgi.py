"""ASGI entry point: HTTP goes to Django; /ws/chat/ goes through the origin
check (ALLOWED_HOSTS) and the session middleware to the chat consumer."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kookee.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from channels.sessions import SessionMiddlewareStack  # noqa: E402

from chat.routing import websocket_urlpatterns  # noqa: E402
from chat.turns import start_background  # noqa: E402

router = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(SessionMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)


async def application(scope, receive, send):
    # The first request of a server process starts its stale-turn sweeper and
    # shutdown hook (there is no start-up hook that every ASGI server calls).
    if scope["type"] in ("http", "websocket"):
        start_background()
    return await router(scope, receive, send)
