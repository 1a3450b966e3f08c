"""One call of an action, for a turn (or the admin's Test page): the
model's arguments checked, the verified identity filled in, the visitor's
yes asked for anything that would change something, the request sent
(chat/actions/http.py), and the answer cut to what the model may read.

Whatever happens, the call is recorded (`Caller.calls`, saved with the
turn) and counted. Nothing here raises but a cancellation (Stop): every
failure is a result the model reads, and can tell the visitor about.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings

from chat.actions import catalog, http, request
from chat.actions.catalog import CallRecord, Offer
from chat.ops import metrics
from chat.visitors.verified import Person

logger = logging.getLogger("kookee.actions")

# The visitor's answer to an action.confirm: (call id, action, title, the
# arguments as they would read them) -> approved. Waiting is the asker's.
Ask = Callable[[str, str, str, dict[str, Any]], Awaitable[bool]]

DECLINED = (
    "The visitor declined: nothing was done, and the request was never sent. Say so plainly, and ask what they "
    "would like instead."
)
UNAVAILABLE = "This action is not available right now. Tell the visitor, and offer a person (request_human)."


@dataclass
class Caller:
    """Who the calls are made for."""

    person: Person | None
    ask: Ask | None  # None: nobody to ask (the admin's Test page: staff ran it on purpose)
    own_hosts: frozenset[tuple[str, int | None]] = frozenset()
    calls: list[CallRecord] = field(default_factory=list)
    counted: bool = True  # in /metrics: a visitor's call, not staff's test
    # The credentials, read already: the admin's Test page, a sync view,
    # reads them on its own thread and connection. None: read them here.
    credentials: dict[str, tuple[Any, str]] | None = None


@dataclass
class Result:
    for_model: dict[str, Any]
    record: CallRecord
    request: request.Prepared | None = None
    response: http.Response | None = None


async def call(offer: Offer, caller: Caller, arguments: dict[str, Any]) -> Result:
    operation = offer.operation
    kept, dropped = request.split(operation, arguments)
    if dropped:
        # The model cannot choose whose data it reads: the verified value goes instead.
        logger.warning("action %s: ignored the model's %s (filled from the verified identity)", offer.name, dropped)
    record = CallRecord(offer.id, secrets.token_urlsafe(9), request.recorded(operation, kept), datetime.now(UTC))
    caller.calls.append(record)
    result = Result({}, record)
    try:
        result.for_model = await _call(offer, caller, kept, result)
    except asyncio.CancelledError:
        record.outcome, record.detail = "cancelled", record.detail or "stopped"
        raise
    finally:
        if caller.counted:
            seconds = record.duration_ms / 1000 if record.duration_ms is not None else None
            metrics.action_call(offer.name, record.outcome or "cancelled", seconds)
    return result


async def _call(offer: Offer, caller: Caller, arguments: dict[str, Any], result: Result) -> dict[str, Any]:
    operation, record = offer.operation, result.record
    try:
        request.check(operation, arguments)
        filled = request.identity(operation, caller.person)
        names = {name for alternative in operation.security for name in alternative}
        credentials = caller.credentials
        if credentials is None:
            credentials = await database_sync_to_async(catalog.credentials)(names) if names else {}
        result.request = prepared = request.build(operation, arguments, filled, credentials)
    except (request.BadArguments, request.NeedsIdentity) as refused:
        return _failed(record, "refused", str(refused))
    except request.MissingCredentials as missing:
        logger.error("action %s: %s", offer.name, missing)
        record.outcome, record.detail = "error", str(missing)[:300]
        return {"error": UNAVAILABLE}
    if operation.confirm and caller.ask is not None:
        if not await caller.ask(record.call_id, offer.name, offer.title, arguments):
            record.outcome = "declined"
            return {"declined": True, "note": DECLINED}
    started = time.monotonic()
    try:
        response = await http.send(
            prepared.method,
            prepared.url,
            headers=prepared.headers,
            body=prepared.body,
            timeout=settings.KOOKEE_ACTION_TIMEOUT_SECONDS,
            allow_private=settings.KOOKEE_ACTIONS_ALLOW_PRIVATE,
            own_hosts=caller.own_hosts,
        )
    except http.CallFailed as failed:
        logger.warning("action %s: %s", offer.name, failed)
        return _failed(record, failed.outcome, str(failed))
    finally:
        # Whatever the ending, a Stop's too: how long the API had the request.
        record.duration_ms = round((time.monotonic() - started) * 1000)
    result.response = response
    record.http_status, record.response_bytes = response.status, len(response.body)
    data, cut = request.shaped(operation, response.content_type, response.body, settings.KOOKEE_ACTION_RESULT_CHARS)
    answer: dict[str, Any] = {"status": response.status, "result": data}
    if cut:
        answer["truncated"] = True
    if 200 <= response.status < 300:
        record.outcome = "ok"
    else:
        record.outcome, record.detail = "error", f"the API answered {response.status}"
        answer["error"] = record.detail
    return answer


def _failed(record: CallRecord, outcome: str, message: str) -> dict[str, Any]:
    record.outcome, record.detail = outcome, message[:300]
    return {"error": message}
