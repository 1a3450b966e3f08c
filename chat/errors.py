"""The error codes a visitor's page can get, and what each tells the visitor.

Codes are the contract (docs/turns.md); messages are translated, in the
language of the tab that reads them: a turn's error reaches every tab of the
conversation, and each says it in its own visitor's language.
"""

from __future__ import annotations

from contextlib import nullcontext

from django.utils.translation import gettext_lazy as _
from django.utils.translation import override

MESSAGES = {
    # Frames the server could not take.
    # (Malformed frames, which the page never sends, are told apart by the
    # consumer's own messages: see chat/consumers.py.)
    "busy": _("An answer is being written; stop it or wait for it to end."),
    "flood": _("Too many messages at once; the connection is closed. Reload the page to continue."),
    "unavailable": _("The server is restarting. Please send your message again in a moment."),
    "not_found": _("There is no finished answer of yours with that id."),
    "bad_feedback": _("That rating could not be saved."),
    "bad_handoff": _("That request could not be sent: please check the email address."),
    # Limits (chat/limits.py).
    "rate_limited": _("You're sending messages quickly. Please wait a minute and try again."),
    "network_rate_limited": _("Many messages are coming from your network. Please try again shortly."),
    "handoff_rate_limited": _("Many requests for a person are coming from your network. Please try again later."),
    "conversation_full": _(
        "This conversation has reached its length limit. Please send your message again: it starts a new one."
    ),
    "visitor_budget_exhausted": _("The assistant has answered all it can for you today. Please come back tomorrow."),
    "network_budget_exhausted": _("The assistant has answered all it can for you today. Please come back tomorrow."),
    "budget_exhausted": _("The assistant has answered all it can for today. Please come back tomorrow."),
    # Why a turn failed (chat/turns.py).
    "provider_unreachable": _("The assistant can't be reached right now. Please try again in a moment."),
    "provider_timeout": _("The assistant took too long to start answering. Please try again."),
    "provider_stalled": _("The assistant stopped responding mid-answer. Please try again."),
    "provider_rate_limited": _("The assistant is busy right now. Please try again in a minute."),
    "provider_unavailable": _("The assistant is unavailable right now. Please try again in a moment."),
    "provider_rejected": _("The assistant could not take this request. Please try again later."),
    "provider_error": _("The assistant ran into an error. Please try again."),
    "bad_stream": _("The assistant sent something unreadable. Please try again."),
    "incomplete_stream": _("The answer was cut off. Please try again."),
    "round_limit": _("The assistant took too many steps to answer. Please try rephrasing."),
    "server_error": _("Something went wrong on our side. Please try again."),
}


def message(code: str, language: str | None = None) -> str:
    """What the visitor reads for this code, in `language` (else the active
    language); an unknown code reads as a server error."""
    with override(language) if language else nullcontext():
        return str(MESSAGES.get(code, MESSAGES["server_error"]))
