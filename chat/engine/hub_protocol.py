"""The hub's protocol between server processes, in one place: the channel
layer's groups and every message the processes' hubs send each other
(chat/engine/hub/). Each message is built by the function of its name here.

Each process listens on one channel of its own, not one per socket. A
process with tabs of a visitor is in the visitor's group.

- `hub.started` {visitor, turn_id, owner}: to the visitor's group, once per
  turn: a turn started on the process whose channel is `owner`.
- `hub.watch` {visitor, turn_id, process, tabs}: to a turn's owner: these
  tabs of `process` follow the turn (also sent again after a gap in `seq`).
- `hub.unwatch` {turn_id, process, tabs}: to a turn's owner: they left.
- `hub.stop` {turn_id, tab}: to a turn's owner: a tab's Stop.
- `hub.answer` {turn_id, call_id, approve}: to a turn's owner: a tab's
  answer to an action.confirm.
- `hub.resume` {visitor, turn_id, seq, text, tabs}: the owner's answer to a
  watch: the text so far, up to and including frame `seq`.
- `hub.frames` {visitor, turn_id, frames}: the owner's frames of a turn,
  several in one message while a send is in flight (chat/engine/hub/outbox.py).
- `hub.gone` {visitor, turn_id, process, tabs}: the owner's answer to a
  watch of a turn that has ended: the watcher reads its end from the database.
- `hub.ended` {visitor, turn_id, frame}: to the visitor's group: a turn the
  sweeper closed for a dead process, and its `turn.ended`.
- `hub.tell` {visitor, frame}: to the visitor's group: a frame for every tab
  of the visitor (a person from Support wrote, or the visitor wrote to them).
- `hub.ping` {token} and `hub.close` {}: a process to its own channel (the
  health check; the listener's end).

A process handles a message of type `hub.x` with its hub's method `hub_x`
(`handler_name`), as channels' consumers do.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import BaseChannelLayer, get_channel_layer
from django.core.exceptions import ImproperlyConfigured

from chat.engine import frames
from chat.models import Conversation, Handoff, Message
from chat.support import handoffs

logger = logging.getLogger("kookee.hub")

# A message between processes: a dict as the channel layer carries it, with
# a "type" of those below.
HubMessage = dict[str, Any]

STARTED = "hub.started"
WATCH = "hub.watch"
UNWATCH = "hub.unwatch"
STOP = "hub.stop"
ANSWER = "hub.answer"
RESUME = "hub.resume"
FRAMES = "hub.frames"
GONE = "hub.gone"
ENDED = "hub.ended"
TELL = "hub.tell"
PING = "hub.ping"
CLOSE = "hub.close"


def group(visitor: str) -> str:
    """The channel-layer group of the processes with tabs of a visitor."""
    return f"visitor.{visitor}"


def handler_name(message_type: str) -> str:
    """The hub's method for a message type: `hub.started` -> `hub_started`
    (channels.utils.get_handler_name's rule)."""
    if message_type.startswith("_"):
        raise ValueError(f"malformed message type {message_type!r}")
    return message_type.replace(".", "_")


def layer() -> BaseChannelLayer:
    found = get_channel_layer()
    if found is None:
        raise ImproperlyConfigured("The hub needs a channel layer (CHANNEL_LAYERS).")
    return found


# --- the messages ---------------------------------------------------------------------------------


def started(visitor: str, turn_id: int, owner: str) -> HubMessage:
    return {"type": STARTED, "visitor": visitor, "turn_id": turn_id, "owner": owner}


def watch(visitor: str, turn_id: int, process: str, tabs: list[str]) -> HubMessage:
    return {"type": WATCH, "visitor": visitor, "turn_id": turn_id, "process": process, "tabs": tabs}


def unwatch(turn_id: int, process: str, tabs: list[str]) -> HubMessage:
    return {"type": UNWATCH, "turn_id": turn_id, "process": process, "tabs": tabs}


def stop(turn_id: int, tab: str) -> HubMessage:
    return {"type": STOP, "turn_id": turn_id, "tab": tab}


def answer(turn_id: int, call_id: str, approve: bool) -> HubMessage:
    return {"type": ANSWER, "turn_id": turn_id, "call_id": call_id, "approve": approve}


def resume(visitor: str, turn_id: int, seq: int, text: str, tabs: list[str]) -> HubMessage:
    return {"type": RESUME, "visitor": visitor, "turn_id": turn_id, "seq": seq, "text": text, "tabs": tabs}


def frames_of(visitor: str, turn_id: int, turn_frames: list[frames.TurnFrame]) -> HubMessage:
    return {"type": FRAMES, "visitor": visitor, "turn_id": turn_id, "frames": turn_frames}


def gone(watched: HubMessage) -> HubMessage:
    """The answer to a `hub.watch` of a turn that has ended."""
    return {**watched, "type": GONE}


def ended(visitor: str, turn_id: int, frame: frames.TurnEnded) -> HubMessage:
    return {"type": ENDED, "visitor": visitor, "turn_id": turn_id, "frame": frame}


def tell(visitor: str, frame: frames.Frame) -> HubMessage:
    return {"type": TELL, "visitor": visitor, "frame": frame}


def ping(token: str) -> HubMessage:
    return {"type": PING, "token": token}


def close() -> HubMessage:
    return {"type": CLOSE}


# --- a frame for every tab of a visitor, from anywhere ---------------------------------------------


async def tell_visitor(visitor: str, frame: frames.Frame) -> None:
    """A frame to every open tab of a visitor, on every process: each
    process's hub hands it to its tabs of theirs (`hub.tell`)."""
    await layer().group_send(group(visitor), tell(visitor, frame))


def tell_conversation(conversation_id: int, *told: frames.Frame) -> None:
    """From sync code (the admin, the helpdesk's API): frames to every open
    tab of the conversation's visitor, on every process."""
    visitor = Conversation.objects.filter(pk=conversation_id).values_list("visitor_hash", flat=True).first()
    if not visitor:
        return  # erased, or the visitor started over: nobody to tell
    try:
        async_to_sync(_tell_all)(visitor, told)
    except Exception:
        # Stored all the same: the visitor sees it in their history, or by email.
        logger.exception("conversation=%s: the visitor's tabs could not be told", conversation_id)


async def _tell_all(visitor: str, told: tuple[frames.Frame, ...]) -> None:
    for frame in told:
        await tell_visitor(visitor, frame)


def agent_message(message: Message) -> frames.AgentMessage:
    return frames.agent_message(message.id, message.text, message.author, message.created_at.isoformat())


def visitor_message(message: Message) -> frames.VisitorMessage:
    return frames.visitor_message(message.id, message.text, message.created_at.isoformat())


def show_support_news(
    sender: object, conversation_id: int, handoff: Handoff | None = None, reply: Message | None = None, **kwargs: Any
) -> None:
    """Support's news for the visitor (replies.news_for_visitor, connected
    in chat/apps.py: Support's room may not import the engine's, so it
    announces and the hub shows), in their tabs: the request's new state
    first, then the reply."""
    told: list[frames.Frame] = []
    if handoff is not None:
        told.append(frames.handoff_updated(handoffs.handoff_state(handoff)))
    if reply is not None:
        told.append(agent_message(reply))
    tell_conversation(conversation_id, *told)
