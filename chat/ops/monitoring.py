"""The operator's endpoints: /healthz for the load balancer, /metrics for
Prometheus. Each answers for the one process it reaches (docs/operations.md,
"Health and metrics").

Neither reads the session, sets a cookie or uses the cache: they must stay
cheap, and say nothing about visitors.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Awaitable, Callable

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden, JsonResponse
from django.utils.crypto import constant_time_compare
from django.utils.log import log_response
from django.views.decorators.cache import never_cache

from chat.ops import metrics
from chat.visitors.identity import client_address

OK = "ok"
ERROR = "error"

# What /healthz checks besides the database, by name: each raises unless its
# part answers within the timeout it is given. Chat registers its channel
# layer (chat/apps.py).
CHECKS: dict[str, Callable[[float], Awaitable[None]]] = {}


def check(name: str, run: Callable[[float], Awaitable[None]]) -> None:
    CHECKS[name] = run


@never_cache
async def healthz(request: HttpRequest) -> JsonResponse:
    """200 when this process, its database and its channel layer answer
    within KOOKEE_HEALTH_TIMEOUT_SECONDS; 503 naming what did not."""
    timeout = settings.KOOKEE_HEALTH_TIMEOUT_SECONDS
    names = ["database", *CHECKS]
    found = await asyncio.gather(
        _fault(check_database(), timeout), *(_fault(run(timeout), timeout) for run in CHECKS.values())
    )
    faults = dict(zip(names, found, strict=True))
    healthy = not any(faults.values())
    body = {"status": OK if healthy else ERROR} | {name: ERROR if fault else OK for name, fault in faults.items()}
    response = JsonResponse(body, status=200 if healthy else 503)
    if not healthy:
        # One line, naming the fault (not its text: it may hold a DSN).
        failed = ", ".join(f"{name} ({fault})" for name, fault in faults.items() if fault)
        log_response("Health check failed: %s", failed, response=response, request=request)
    return response


async def check_database() -> None:
    await database_sync_to_async(_select_one)()


def _select_one() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


async def _fault(check: Awaitable[None], timeout: float) -> str:
    """The check's fault (its exception's name), or "" if it answered in time."""
    try:
        await asyncio.wait_for(check, timeout)
    except Exception as exc:  # whatever went wrong, the check failed
        return type(exc).__name__
    return ""


@never_cache
async def metrics_page(request: HttpRequest) -> HttpResponse:
    """This process's metrics, for the operator only: closed (404) unless
    KOOKEE_METRICS_TOKEN or KOOKEE_METRICS_ALLOW is set; with both set, a
    scrape needs both."""
    token, networks = settings.KOOKEE_METRICS_TOKEN, settings.KOOKEE_METRICS_ALLOW
    if not token and not networks:
        raise Http404
    refusal = _refusal(request, token, networks)
    if refusal:
        response = HttpResponseForbidden()
        log_response("Forbidden (%s): %s", refusal, request.path, response=response, request=request)
        return response
    body, content_type = metrics.exposition(request.headers.get("Accept"))
    return HttpResponse(body, content_type=content_type)


def _refusal(request: HttpRequest, token: str, networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> str:
    """Why the request may not read the metrics, or "" if it may."""
    if token:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            return "no bearer token"
        if not constant_time_compare(given.strip(), token):
            return "wrong bearer token"
    if networks:
        # The socket's peer, never X-Forwarded-For: a proxy in front would
        # make every scrape look alike, and the header is the client's to write.
        peer = client_address(request.META.get("REMOTE_ADDR"), None)
        if peer is None or not any(ipaddress.ip_address(peer) in network for network in networks):
            return f"peer {peer} not in KOOKEE_METRICS_ALLOW"
    return ""
