"""A helpdesk answers the visitor: `POST /api/handoffs/{id}/messages`.

Zendesk, Chatwoot or Zammad learn of a request from the handoff webhook
(chat/support/handoffs.py); their agents' replies come back here and reach
the visitor like a reply typed in the admin (chat/support/replies.py).

The body is JSON `{"text", "author", "message_id"}`, signed with
KOOKEE_HANDOFF_WEBHOOK_SECRET over the time, the method, the path and the
body, so that a recorded request replays neither later nor elsewhere:

    X-Kookee-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "t.METHOD.PATH.body">

A request signed more than WINDOW_SECONDS away from now is refused, and
`message_id` (required) is unique across all requests: a replay within the
window returns the first message's id and stores nothing.

Answers: 201 `{"id": N}` (the same id for a `message_id` seen before); 400
for a malformed header, body or id; 403 for a missing, bad or stale
signature (or no secret configured: the door is shut); 404 for an unknown
request; 409 for a closed or erased one; 413 for a body over REPLY_BYTES.

The old signature of the body alone (`sha256=<hex>`) replays anywhere and
forever; it is accepted only while KOOKEE_HANDOFF_REPLY_LEGACY_SIGNATURE
is on, a deprecation switch for integrations written before the change
(docs/operations.md).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import time
from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from chat.models import Handoff
from chat.support import replies
from chat.text import storable, visible

logger = logging.getLogger("kookee.replies")

REPLY_BYTES = 64 * 1024
MESSAGE_ID_CHARS = 200
WINDOW_SECONDS = 5 * 60
# The largest id either database stores (a 64-bit signed integer).
MAX_ID = 2**63 - 1
# `t=<seconds>,v1=<hex>`, possibly with several v1 (a secret being rotated on the sender's side).
_SIGNATURE = re.compile(r"t=(\d{1,12})((?:\s*,\s*v1=[0-9a-fA-F]{64})+)")
_LEGACY = re.compile(r"sha256=([0-9a-fA-F]{64})")
# A message id is the helpdesk's own: printable, no spaces at its ends.
_MESSAGE_ID = re.compile(r"[^\x00-\x1f\x7f]+")


class _Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@csrf_exempt  # signed, not a browser's form
@require_POST
def handoff_messages(request: HttpRequest, pk: int) -> JsonResponse:
    try:
        fields, legacy = _accepted(request)
        if pk > MAX_ID:
            raise _Refused(404, "No such request.")
        message, _created = replies.reply(pk, fields["text"], author=fields["author"], external_id=fields["message_id"])
    except _Refused as refused:
        return JsonResponse({"error": str(refused)}, status=refused.status)
    except Handoff.DoesNotExist:
        return JsonResponse({"error": "No such request."}, status=404)
    except replies.Closed as closed:
        return JsonResponse({"error": str(closed)}, status=409)
    if legacy:
        logger.warning(
            "handoff=%s: a reply signed the deprecated way (body only); move the helpdesk to the v1 signature", pk
        )
    # 201 for a repeat too: the same answer as the first time, as an
    # idempotent retry expects.
    return JsonResponse({"id": message.id}, status=201)


def _accepted(request: HttpRequest) -> tuple[dict[str, str], bool]:
    """The request's fields, once its size, signature and body pass; and
    whether it was signed the deprecated way. Raises _Refused."""
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if not declared.isascii() or not declared.isdigit():
        raise _Refused(400, "A bad Content-Length.")
    if int(declared) > REPLY_BYTES:
        raise _Refused(413, "The body is too large.")
    body = request.body
    if len(body) > REPLY_BYTES:
        raise _Refused(413, "The body is too large.")
    # Signature first: nobody learns which requests exist, or what a body
    # must hold, without the secret.
    legacy = _verify(request.headers.get("X-Kookee-Signature", ""), request.method or "", request.path, body)
    fields = _parse(body, legacy)
    return fields, legacy


def _verify(header: str, method: str, path: str, body: bytes) -> bool:
    """Checks the signature; returns True when it is the deprecated one.
    Raises _Refused: 400 for a header that is not a signature, 403 for one
    that does not sign this request now."""
    secret = settings.KOOKEE_HANDOFF_WEBHOOK_SECRET.encode()
    header = header.strip()
    if not secret or not header:
        raise _Refused(403, "Bad or missing X-Kookee-Signature.")
    if found := _SIGNATURE.fullmatch(header):
        signed_at = int(found.group(1))
        given = re.findall(r"v1=([0-9a-fA-F]{64})", found.group(2))
        expected = _hmac(secret, f"{signed_at}.{method}.{path}.".encode() + body)
        if not any(hmac.compare_digest(expected, digest.lower().encode()) for digest in given):
            raise _Refused(403, "Bad X-Kookee-Signature.")
        if abs(time.time() - signed_at) > WINDOW_SECONDS:
            raise _Refused(403, f"X-Kookee-Signature was made more than {WINDOW_SECONDS} seconds from now.")
        return False
    if found := _LEGACY.fullmatch(header):
        if not settings.KOOKEE_HANDOFF_REPLY_LEGACY_SIGNATURE:
            raise _Refused(403, "The body-only signature (sha256=) is no longer accepted: sign with t= and v1=.")
        if not hmac.compare_digest(_hmac(secret, body), found.group(1).lower().encode()):
            raise _Refused(403, "Bad X-Kookee-Signature.")
        return True
    raise _Refused(400, "X-Kookee-Signature must be t=<unix seconds>,v1=<hex HMAC-SHA256>.")


def _hmac(secret: bytes, message: bytes) -> bytes:
    return hmac.new(secret, message, hashlib.sha256).hexdigest().encode()


def _parse(body: bytes, legacy: bool) -> dict[str, str]:
    """The body's fields, as stored: text and author as the socket stores a
    visitor's (no NUL, no lone surrogate), the author on one line with no
    format characters. Raises _Refused (400)."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise _Refused(400, "The body must be JSON.") from None
    if not isinstance(data, dict):
        raise _Refused(400, "The body must be a JSON object.")
    text, author = data.get("text"), data.get("author", "")
    if not isinstance(text, str) or not text.strip():
        raise _Refused(400, '"text" must be a non-empty string.')
    if len(text) > replies.REPLY_CHARS:
        raise _Refused(400, f'"text" is longer than {replies.REPLY_CHARS} characters.')
    if not isinstance(author, str) or len(author) > replies.AUTHOR_CHARS:
        raise _Refused(400, f'"author" must be a string of at most {replies.AUTHOR_CHARS} characters.')
    return {
        "text": storable(text).strip(),
        "author": " ".join(visible(storable(author)).split()),
        "message_id": _message_id(data.get("message_id"), legacy),
    }


def _message_id(value: Any, legacy: bool) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # helpdesks number their messages
    if legacy and value in (None, ""):
        return ""  # the old contract made it optional: kept only while the switch is on
    if not isinstance(value, str) or not value.strip():
        raise _Refused(400, '"message_id" is required: the helpdesk\'s own id for this message, unique to it.')
    value = value.strip()
    if len(value) > MESSAGE_ID_CHARS or not _MESSAGE_ID.fullmatch(value) or value != storable(value):
        raise _Refused(400, f'"message_id" must be printable text of at most {MESSAGE_ID_CHARS} characters.')
    return value
