"""While turns run, they are checkpointed together (text so far and a usage
estimate) every KOOKEE_CHECKPOINT_SECONDS, so that if the process dies and no
`finally` runs, the sweeper can still close and bill them.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any, Protocol

from channels.db import database_sync_to_async
from django.conf import settings

from billing import calibration
from chat.engine import records
from chat.ops import metrics

logger = logging.getLogger("kookee.turns")


class Running(Protocol):
    """A running turn (chat/engine/turns.py)."""

    def checkpoint(self) -> records.Checkpoint: ...


# The turns running in this process: checkpointed together, stopped together
# (chat/engine/lifecycle.py).
live: dict[asyncio.Task[Any], Running] = {}
metrics.gauge("kookee_running_turns", lambda: len(live))
_checkpointers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[None]] = weakref.WeakKeyDictionary()


def start() -> None:
    """Starts this event loop's checkpointer, unless it runs."""
    loop = asyncio.get_running_loop()
    task = _checkpointers.get(loop)
    if task is None or task.done():
        _checkpointers[loop] = loop.create_task(_checkpoint_forever())


async def _checkpoint_forever() -> None:
    """Every few seconds, saves all running turns in one transaction: one
    write per second for the process, not one per turn, never one per token."""
    while True:
        await asyncio.sleep(settings.KOOKEE_CHECKPOINT_SECONDS)
        checkpoints = [turn.checkpoint() for task, turn in live.items() if not task.done()]
        if checkpoints:
            try:
                await database_sync_to_async(records.checkpoint_turns)(checkpoints)
            except Exception:
                logger.exception("checkpointing %s turn(s) failed", len(checkpoints))
        if calibration.flush_due():
            # What this process learnt of its models, for every process; never
            # at the heartbeat's expense.
            try:
                await database_sync_to_async(calibration.flush)()
            except Exception:
                logger.exception("saving the calibration failed")
