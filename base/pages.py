"""What every page the project serves to visitors sends with it: a content
security policy, and, for a page that carries a visitor's secret or
conversation, no shared caching."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.utils.cache import patch_cache_control

# Defence in depth for pages that show model text: even if markup slipped
# through the renderer, no inline script or foreign resource would load.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self' {socket}; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors {ancestors}"
)


def with_policy(request: HttpRequest, response: HttpResponse, ancestors: str = "'none'") -> HttpResponse:
    # The socket's origin is named too: older browsers' 'self' omits ws(s):.
    socket = f"{'wss' if request.is_secure() else 'ws'}://{request.get_host()}"
    response["Content-Security-Policy"] = CONTENT_SECURITY_POLICY.format(socket=socket, ancestors=ancestors)
    return response


def private(response: HttpResponse) -> HttpResponse:
    # The page carries a per-visitor secret (a session cookie, a widget
    # token) or their conversation: no shared cache may keep or replay it.
    patch_cache_control(response, private=True, no_store=True)
    return response
