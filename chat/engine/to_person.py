"""The visitor's message while a person from Support has their conversation
(they asked for one, and Support claimed it): it goes to that person instead
of starting a turn. Stored in the transaction that would have started the
turn (chat/engine/records.py: one trip to the database for either), then
shown in every tab of the visitor and sent to the helpdesk
(chat/engine/turns.py). The assistant does not answer it."""

from __future__ import annotations

from typing import NamedTuple

from chat.engine import hub_protocol
from chat.models import Conversation, Message
from chat.support import replies
from chat.visitors.identity import Visitor


class ToPerson(NamedTuple):
    """The visitor's message, stored for the person who has the conversation; no turn started."""

    conversation_id: int
    message: Message


def take(visitor: Visitor, conversation: Conversation, conversation_id: int | None, text: str) -> ToPerson | None:
    """In the transaction that starts a turn, `conversation` locked by
    access.conversation_for (the one the tab knew, `conversation_id`, or a
    new one): the message, stored for the person who has the conversation;
    None when nobody does, and a turn starts."""
    if conversation.id != conversation_id:
        return None  # a new conversation: nobody has it yet
    claimed: bool = conversation.claimed  # type: ignore[attr-defined]  # annotated by access.conversation_for
    if not claimed:
        return None
    message = replies.to_person(visitor.hash, conversation.id, text)
    return None if message is None else ToPerson(conversation.id, message)


async def deliver(handed: ToPerson) -> None:
    """The stored message: in every tab of the visitor and on the request's
    page, and to the helpdesk."""
    message = handed.message
    await hub_protocol.tell_visitor(message.conversation.visitor_hash, hub_protocol.visitor_message(message))
    replies.forward_to_helpdesk(message)
