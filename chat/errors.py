"""The error codes a visitor's page can get, and what each tells the visitor.

Codes are the contract (docs/turns.md); messages are translated, in the
language of the tab that reads them: a turn's error reaches every tab of the
conversation, and each says it in its own visitor's language.
"""

from __future__ import annotations

from contextlib import nullcontext

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _
from django.utils.translation import override

from chat.vocabulary import Code

# Keyed by str: a code read off the wire looks its message up as it is.
MESSAGES: dict[str, Promise] = {
    # Frames the server could not take.
    # (Malformed frames, which the page never sends, are told apart by the
    # consumer's own messages: see chat/engine/consumers.py.)
    Code.BUSY: _("An answer is being written; stop it or wait for it to end."),
    Code.FLOOD: _("Too many messages at once; the connection is closed. Reload the page to continue."),
    Code.UNAVAILABLE: _("The server is restarting. Please send your message again in a moment."),
    Code.NOT_FOUND: _("There is no finished answer of yours with that id."),
    Code.BAD_FEEDBACK: _("That rating could not be saved."),
    Code.BAD_HANDOFF: _("That request could not be sent: please check the email address."),
    Code.BAD_IDENTITY: _("Your sign-in could not be verified: you are chatting without it."),
    # Limits (chat/visitors/limits.py).
    Code.RATE_LIMITED: _("You're sending messages quickly. Please wait a minute and try again."),
    Code.NETWORK_RATE_LIMITED: _("Many messages are coming from your network. Please try again shortly."),
    Code.HANDOFF_RATE_LIMITED: _("Many requests for a person are coming from your network. Please try again later."),
    Code.CONVERSATION_FULL: _(
        "This conversation has reached its length limit. Please send your message again: it starts a new one."
    ),
    Code.VISITOR_BUDGET_EXHAUSTED: _("The assistant has answered all it can for you today. Please come back tomorrow."),
    Code.NETWORK_BUDGET_EXHAUSTED: _("The assistant has answered all it can for you today. Please come back tomorrow."),
    Code.BUDGET_EXHAUSTED: _("The assistant has answered all it can for today. Please come back tomorrow."),
    # Why a turn failed (chat/engine/turns.py).
    Code.PROVIDER_UNREACHABLE: _("The assistant can't be reached right now. Please try again in a moment."),
    Code.PROVIDER_TIMEOUT: _("The assistant took too long to start answering. Please try again."),
    Code.PROVIDER_STALLED: _("The assistant stopped responding mid-answer. Please try again."),
    Code.PROVIDER_RATE_LIMITED: _("The assistant is busy right now. Please try again in a minute."),
    Code.PROVIDER_UNAVAILABLE: _("The assistant is unavailable right now. Please try again in a moment."),
    Code.PROVIDER_REJECTED: _("The assistant could not take this request. Please try again later."),
    Code.PROVIDER_ERROR: _("The assistant ran into an error. Please try again."),
    Code.BAD_STREAM: _("The assistant sent something unreadable. Please try again."),
    Code.INCOMPLETE_STREAM: _("The answer was cut off. Please try again."),
    Code.ROUND_LIMIT: _("The assistant took too many steps to answer. Please try rephrasing."),
    Code.SERVER_ERROR: _("Something went wrong on our side. Please try again."),
}


def message(code: str, language: str | None = None) -> str:
    """What the visitor reads for this code, in `language` (else the active
    language); an unknown code reads as a server error."""
    with override(language) if language else nullcontext():
        return str(MESSAGES.get(code, MESSAGES[Code.SERVER_ERROR]))
