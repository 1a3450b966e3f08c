"""What a visitor's tab may send (the contract's "Client to server"): each
frame type's checks, apart from the socket (chat/engine/consumers.py) that
acts on them. A malformed frame raises BadFrame, with the `error` it earns;
call these under the visitor's language (the messages are translated)."""

from __future__ import annotations

from typing import Any, TypedDict

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from chat.engine import fastjson
from chat.support import handoffs
from chat.text import storable
from chat.vocabulary import Code

FEEDBACK_COMMENT_CHARS = 1000
RATINGS = ("up", "down")


class BadFrame(Exception):
    """A frame the server cannot take: the `error` frame's code and message."""

    def __init__(self, code: str, message: str | Promise) -> None:
        super().__init__(code)
        self.code = code
        self.message = message


class HistoryAsked(TypedDict):
    before: int | None


class Feedback(TypedDict):
    turn_id: int
    rating: str
    comment: str


class ActionAnswer(TypedDict):
    call_id: str
    approve: bool


class HandoffAsked(TypedDict):
    reason: str
    email: str


def decode(text_data: str | None) -> dict[str, Any]:
    """A client frame: a JSON object with a "type"."""
    if text_data is None:
        raise BadFrame(Code.BAD_FRAME, _("Frames must be JSON text, not binary."))
    try:
        frame = fastjson.loads(text_data)
    except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
        raise BadFrame(Code.BAD_JSON, _("The frame is not valid JSON.")) from None
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        raise BadFrame(Code.BAD_FRAME, _('A frame is a JSON object with a "type".'))
    return frame


def unknown(frame_type: str) -> BadFrame:
    return BadFrame(Code.UNKNOWN_TYPE, _("Unknown frame type %(type)r.") % {"type": frame_type[:40]})


def identify(frame: dict[str, Any]) -> str:
    """The signed token of an `identify` frame (checked by chat/visitors/verified.py)."""
    token = frame.get("token")
    if not isinstance(token, str) or not token:
        raise BadFrame(Code.BAD_IDENTITY, _('"token" must be the signed token your site gave you.'))
    return token


def action_answer(frame: dict[str, Any]) -> ActionAnswer:
    """The visitor's yes or no to an action.confirm."""
    call_id, approve = frame.get("call_id"), frame.get("approve")
    if not isinstance(call_id, str) or not 0 < len(call_id) <= 40:
        raise BadFrame(Code.BAD_FRAME, _('"call_id" must be the id of the action you were asked about.'))
    if not isinstance(approve, bool):
        raise BadFrame(Code.BAD_FRAME, _('"approve" must be true or false.'))
    return {"call_id": call_id, "approve": approve}


def history(frame: dict[str, Any]) -> HistoryAsked:
    before = frame.get("before")
    if before is not None and (type(before) is not int or before < 1):
        raise BadFrame(Code.BAD_FRAME, _('"before" must be a turn id.'))
    return {"before": before}


def message(frame: dict[str, Any]) -> str:
    """The text of a `message` frame, storable."""
    text = frame.get("text")
    if not isinstance(text, str) or not text.strip():
        raise BadFrame(Code.BAD_TEXT, _('"text" must be a non-empty string.'))
    if len(text) > settings.KOOKEE_MAX_MESSAGE_CHARS:
        raise BadFrame(
            Code.TOO_LONG,
            _("Messages are limited to %(limit)s characters.") % {"limit": settings.KOOKEE_MAX_MESSAGE_CHARS},
        )
    return storable(text)


def feedback(frame: dict[str, Any]) -> Feedback:
    turn_id, rating, comment = frame.get("turn_id"), frame.get("rating"), frame.get("comment", "")
    if type(turn_id) is not int or turn_id < 1:
        raise BadFrame(Code.BAD_FEEDBACK, _('"turn_id" must be the id of one of your answers.'))
    if not isinstance(rating, str) or rating not in RATINGS:
        raise BadFrame(Code.BAD_FEEDBACK, _('"rating" must be "up" or "down".'))
    if comment is None:
        comment = ""
    if not isinstance(comment, str):
        raise BadFrame(Code.BAD_FEEDBACK, _('"comment" must be text.'))
    if len(comment) > FEEDBACK_COMMENT_CHARS:
        raise BadFrame(
            Code.BAD_FEEDBACK, _("Comments are limited to %(limit)s characters.") % {"limit": FEEDBACK_COMMENT_CHARS}
        )
    return {"turn_id": turn_id, "rating": rating, "comment": storable(comment.strip())}


def handoff(frame: dict[str, Any]) -> HandoffAsked:
    reason, email = frame.get("reason", ""), frame.get("email", "")
    reason = "" if reason is None else reason
    email = "" if email is None else email
    if not isinstance(reason, str) or len(reason) > handoffs.REASON_CHARS:
        raise BadFrame(
            Code.BAD_HANDOFF, _("Say why in at most %(limit)s characters.") % {"limit": handoffs.REASON_CHARS}
        )
    if not isinstance(email, str):
        raise BadFrame(Code.BAD_HANDOFF, _("That email address is not valid."))
    email = email.strip()
    # validate_email takes up to 320 characters; Handoff.email holds 254.
    if len(email) > 254:
        raise BadFrame(Code.BAD_HANDOFF, _("That email address is not valid."))
    if email:
        try:
            validate_email(email)
        except ValidationError:
            raise BadFrame(Code.BAD_HANDOFF, _("That email address is not valid.")) from None
    return {"reason": storable(reason.strip()), "email": email}
