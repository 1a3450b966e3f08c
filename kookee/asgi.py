"""ASGI entry point: HTTP goes to Django; /ws/chat/ goes through the origin
check (ALLOWED_HOSTS) and the session middleware to the chat consumer;
lifespan events start and stop the process's background work."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kookee.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from channels.sessions import SessionMiddlewareStack  # noqa: E402

from chat import lifecycle, tracing  # noqa: E402
from chat.routing import websocket_urlpatterns  # noqa: E402

router = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(SessionMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)

# Daphne speaks no lifespan: the process's background work starts when its
# reactor runs. Lifespan servers (uvicorn) start it with "lifespan.startup".
lifecycle.start_under_daphne()
# Traces, when OTEL_EXPORTER_OTLP_ENDPOINT is set (chat/tracing.py).
tracing.configure()


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        return await lifecycle.lifespan(scope, receive, send)
    # A server with neither lifespan nor Twisted starts it here; once.
    lifecycle.start()
    return await router(scope, receive, send)
