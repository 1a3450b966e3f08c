"""A helpdesk answers the visitor: `POST /api/handoffs/{id}/messages`.

Zendesk, Chatwoot or Zammad learn of a request from the handoff webhook
(chat/support/handoffs.py); their agents' replies come back here and reach
the visitor like a reply typed in the admin (chat/support/replies.py).

The body is JSON `{"text", "author", "message_id"}`, signed as the outgoing
webhook is: `X-Kookee-Signature: sha256=<hex HMAC-SHA256 of the body>`
with KOOKEE_HANDOFF_WEBHOOK_SECRET. Answers: 201 `{"id": N}`; the same
`message_id` again gives the same id (a helpdesk retries); 400 for a body
that is not as above, 403 for a bad or missing signature (or no secret
configured: the door is shut), 404 for an unknown request, 409 for a
closed one, 413 for a body over REPLY_BYTES.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from chat.models import Handoff
from chat.support import replies

REPLY_BYTES = 64 * 1024
MESSAGE_ID_CHARS = 200


@csrf_exempt  # signed, not a browser's form
@require_POST
def handoff_messages(request: HttpRequest, pk: int) -> JsonResponse:
    if int(request.headers.get("Content-Length") or 0) > REPLY_BYTES:
        return _refused(413, "The body is too large.")
    body = request.body
    if len(body) > REPLY_BYTES:
        return _refused(413, "The body is too large.")
    # Signature first: nobody learns which requests exist without the secret.
    if not _signed(body, request.headers.get("X-Kookee-Signature", "")):
        return _refused(403, "Bad or missing X-Kookee-Signature.")
    fields, problem = _parse(body)
    if problem:
        return _refused(400, problem)
    try:
        message, _created = replies.reply(pk, fields["text"], author=fields["author"], external_id=fields["message_id"])
    except Handoff.DoesNotExist:
        return _refused(404, "No such request.")
    except replies.Closed:
        return _refused(409, "The request is closed.")
    # 201 for a repeat too: the same answer as the first time, as an
    # idempotent retry expects.
    return JsonResponse({"id": message.id}, status=201)


def _signed(body: bytes, header: str) -> bool:
    secret = settings.KOOKEE_HANDOFF_WEBHOOK_SECRET.encode()
    if not secret or not header.startswith("sha256="):
        return False
    expected = hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, header.removeprefix("sha256=").strip().lower())


def _parse(body: bytes) -> tuple[dict[str, Any], str]:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return {}, "The body must be JSON."
    if not isinstance(data, dict):
        return {}, "The body must be a JSON object."
    text, author, message_id = data.get("text"), data.get("author", ""), data.get("message_id", "")
    if not isinstance(text, str) or not text.strip():
        return {}, '"text" must be a non-empty string.'
    if len(text) > replies.REPLY_CHARS:
        return {}, f'"text" is longer than {replies.REPLY_CHARS} characters.'
    if not isinstance(author, str) or len(author) > replies.AUTHOR_CHARS:
        return {}, f'"author" must be a string of at most {replies.AUTHOR_CHARS} characters.'
    if isinstance(message_id, int) and not isinstance(message_id, bool):
        message_id = str(message_id)  # helpdesks number their messages
    if not isinstance(message_id, str) or len(message_id) > MESSAGE_ID_CHARS:
        return {}, f'"message_id" must be a string of at most {MESSAGE_ID_CHARS} characters.'
    return {"text": text.strip(), "author": " ".join(author.split()), "message_id": message_id.strip()}, ""


def _refused(status: int, reason: str) -> JsonResponse:
    return JsonResponse({"error": reason}, status=status)
