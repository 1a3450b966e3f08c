"""A server process's life: what starts with it and what it does on the way
out, under daphne and under lifespan servers (uvicorn, gunicorn's uvicorn
workers).

- At start: the sweeper, which closes and bills the turns a dead process
  left streaming, and tells the tabs that followed them (through the hub,
  in whichever process they are); it also resends the notices to Support
  that such a process never finished (chat/support/handoffs.py). It must not wait for a first request: a
  process restarted at night, with nobody visiting, still has to reconcile.
- At shutdown (SIGTERM): stop the running turns, let each save and bill and
  tell every tab that followed it, then end the connections.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import weakref
from typing import Any

from asgiref.typing import ASGIReceiveCallable, ASGISendCallable, LifespanScope
from channels.db import database_sync_to_async
from django.conf import settings

from billing import calibration
from chat.engine import checkpointer, hub, records, sweeper
from chat.ops import metrics
from chat.support import handoffs, replies
from chat.vocabulary import StopReason
from helpcenter import search

logger = logging.getLogger("kookee.lifecycle")

SHUTDOWN_WAIT_SECONDS = 15

# The connections open in this process, ended at shutdown after the turns.
connections: set[asyncio.Task[Any]] = set()
metrics.gauge("kookee_open_sockets", lambda: len(connections))

# One sweeper per server process (per event loop).
_sweepers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[None]] = weakref.WeakKeyDictionary()
_shutdown_hooked = False


def start() -> None:
    """Starts this process's sweeper (and under daphne its shutdown hook),
    once; call it on the event loop."""
    _hook_daphne_shutdown()
    if settings.KOOKEE_SWEEP_SECONDS <= 0:
        return
    loop = asyncio.get_running_loop()
    task = _sweepers.get(loop)
    if task is None or task.done():
        _sweepers[loop] = loop.create_task(_sweep_forever())


def start_under_daphne() -> None:
    """Daphne implements no lifespan protocol, but it installs Twisted's
    reactor before it imports the application: start when that reactor runs.
    (Elsewhere the reactor is installed too, by daphne's app config, but
    never runs, so this does nothing.)"""
    reactor = sys.modules.get("twisted.internet.reactor")
    if reactor is not None:
        # Startup triggers fire before the asyncio loop runs: start() wants
        # it running, so it is called from the loop's first turn.
        reactor.callWhenRunning(reactor.callLater, 0, start)


async def lifespan(scope: LifespanScope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
    """The ASGI lifespan protocol, for the servers that speak it."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            start()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await stop_running_turns()
            await send({"type": "lifespan.shutdown.complete"})
            return


async def stop_running_turns() -> None:
    """Stops every running turn and waits while each saves and bills, then
    ends the connections (a coroutine left pending at exit can crash it)."""
    the_hub = hub.current()
    running = the_hub.stop_all(StopReason.SHUTDOWN)
    for group in (running + list(checkpointer.live), connections):
        tasks = [task for task in group if not task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            logger.info("shutting down: stopping %s task(s)", len(tasks))
            await asyncio.wait(tasks, timeout=SHUTDOWN_WAIT_SECONDS)
        # The turns' last frames, then the closed tabs' unwatch, to other processes.
        await the_hub.drain()
    # Support's notices in flight (a turn that just asked for a person).
    await handoffs.drain()
    try:
        await database_sync_to_async(calibration.flush)()  # what this process learnt
    except Exception:
        logger.exception("shutting down: calibration not saved")


def _hook_daphne_shutdown() -> None:
    """Under daphne, stop running turns before the reactor stops on SIGTERM.

    Daphne cancels its connections on shutdown too, but the consumer cannot
    count on it (it fails on connections whose application already ended);
    uvicorn sends every WebSocket a disconnect, which stops their turns.
    """
    global _shutdown_hooked
    reactor = sys.modules.get("twisted.internet.reactor")
    if _shutdown_hooked or reactor is None or not reactor.running:
        return
    from twisted.internet import defer

    def before_shutdown() -> defer.Deferred[None]:
        return defer.Deferred.fromFuture(asyncio.ensure_future(stop_running_turns()))

    reactor.addSystemEventTrigger("before", "shutdown", before_shutdown)
    _shutdown_hooked = True


async def _sweep_forever() -> None:
    while True:
        try:
            await sweep()
        except Exception:
            logger.exception("sweeping stale turns failed")
        await asyncio.sleep(settings.KOOKEE_SWEEP_SECONDS)


async def sweep() -> None:
    """Closes the turns of dead processes, and ends them in their tabs."""
    closed = await database_sync_to_async(sweeper.close_stale_turns)(settings.KOOKEE_STALE_TURN_SECONDS)
    for visitor, turn_id in closed:
        frame = await database_sync_to_async(records.ended_frame)(turn_id)
        if visitor and frame is not None:
            await hub.announce_ended(visitor, turn_id, frame)
    # And the notices to Support that a lost process never finished.
    await handoffs.resend_lost()
    # And Support's replies that no tab of their visitor showed: by email.
    await replies.email_unseen()
    # And the help center's passages not yet embedded (a change of model).
    await database_sync_to_async(search.sweep)()
