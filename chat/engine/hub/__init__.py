"""A visitor's tabs across server processes.

A turn runs in one process, its owner, which holds the provider request.
Every tab of the visitor (all show their conversation), connected to any
process, receives the turn's frames; a `stop` from any tab reaches the
owner; a tab that connects while the turn runs is resumed from the text so
far (`turn.resume`), then follows live; when the last tab leaves, the turn
runs on for KOOKEE_RESUME_GRACE_SECONDS, then stops.

Across processes this goes through the channel layer, with one channel per
process, not one per socket (the messages: hub_protocol.py):

- The owner's channel is stored on the turn (`Turn.owner`), so a tab that
  connects elsewhere knows whom to ask (`hub.watch`). The owner answers with
  `hub.resume`, then sends that process the turn's frames (`hub.frames`),
  batched while a send is in flight (outbox.py): never a message per token,
  and no message at all when no other process watches.
- Each process with tabs of a visitor is in the visitor's group, so that a
  turn starting anywhere is announced to them (`hub.started`, once per
  turn), and a turn the sweeper closed for a dead process reaches them
  (`hub.ended`).
- A tab's frames are filtered by `seq`: a repeat is dropped, a gap (a
  message lost past the layer's capacity) asks the owner for a fresh resume.

This process's tabs and turns are registry.py; what it hears from the
others, listener.py. One process on the in-memory layer runs the same code;
its messages never leave the process.
"""

from __future__ import annotations

import asyncio
import weakref

from chat.engine import frames, hub_protocol
from chat.engine.hub.listener import Hub
from chat.engine.hub.registry import Broadcast, Tab

__all__ = ["Broadcast", "Hub", "Tab", "announce_ended", "check", "current"]

# One hub per process (per event loop: tests run one loop each).
_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Hub] = weakref.WeakKeyDictionary()


def current() -> Hub:
    loop = asyncio.get_running_loop()
    hub = _hubs.get(loop)
    if hub is None:
        hub = _hubs[loop] = Hub()
    return hub


async def check(timeout: float = 2.0) -> None:
    """For /healthz: raises unless the channel layer answers in time."""
    await current().check(timeout)


async def announce_ended(visitor: str, turn_id: int, frame: frames.TurnEnded) -> None:
    """Tells every process with tabs of the visitor that a turn ended
    without its owner (closed by the sweeper)."""
    await current().announce(visitor, hub_protocol.ended(visitor, turn_id, frame))
