"""Bounded memory per socket: what waits to be sent to a client that does
not read.

A WebSocket client that never reads makes the server hold whatever it is
sent. daphne (Twisted) queues it all, without limit: a `history` frame a few
bytes long buys a reply of up to a page, and the process grew by every reply
(+52 MB in 30 s from two sockets, measured). uvicorn's `send` waits while
the socket's buffer is full instead, which holds the consumer, and with it
the hub delivering the visitor's turns.

So every message for a socket goes through its `Outbox`, which never waits
for a slow reader, and bounds what waits for the socket: past
KOOKEE_SOCKET_BACKLOG_BYTES (one frame always fits when nothing waits), what
waits here is dropped and the socket is closed with CLOSE_BACKLOG. The close
frame itself waits behind what the client has not read, so the connection
is dropped ABORT_AFTER_SECONDS later (as autobahn does after a close), and
the consumer lets go of the socket at once. Under daphne, whose `send`
never waits, messages go straight on and daphne's own buffer is what is
bounded; elsewhere they are queued in order and sent by a task of the
socket's own (a task per burst costs about 14 us a frame, which daphne's
sockets are spared).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from asgiref.typing import ASGISendCallable, ASGISendEvent, WebSocketCloseEvent

logger = logging.getLogger("kookee.backpressure")

# Close code: more waited to be sent to this socket than it may hold. (An
# application may close with 1000 or 3000-4999 only, under daphne.)
CLOSE_BACKLOG = 4413
# After a close that overflowed, the connection is dropped this much later:
# the close waits behind what the client does not read.
ABORT_AFTER_SECONDS = 1.0

Send = ASGISendCallable
Unsent = Callable[[], int]


@dataclass(frozen=True)
class ServerSocket:
    """What the server lets us see of a WebSocket's connection: how many
    bytes it holds unsent, and how to drop it; None where it cannot tell."""

    unsent: Unsent | None = None
    abort: Callable[[], None] | None = None


SCOPE_KEY = "kookee.socket"


def measured(application: Any) -> Any:
    """ASGI middleware: gives each WebSocket's scope its ServerSocket, read
    from the server's own `send`, before any middleware wraps it."""

    async def with_socket(scope: dict[str, Any], receive: Any, send: Send) -> None:
        if scope["type"] == "websocket":
            scope = {**scope, SCOPE_KEY: socket_of(send)}
        await application(scope, receive, send)

    return with_socket


def server_socket(scope: Mapping[str, Any], send: Send) -> ServerSocket:
    """A socket's ServerSocket: as `measured` found it, else read from its `send`."""
    found = scope.get(SCOPE_KEY)
    return found if isinstance(found, ServerSocket) else socket_of(send)


def socket_of(send: Send) -> ServerSocket:
    """daphne's `send` is partial(Server.handle_reply, protocol), uvicorn's
    its protocol's bound `asgi_send`: either leads to the connection's
    transport (Twisted's, asyncio's), whose public abort drops it."""
    owner = send.args[0] if isinstance(send, functools.partial) and send.args else getattr(send, "__self__", None)
    transport = getattr(owner, "transport", None)
    abort = getattr(transport, "abortConnection", None) or getattr(transport, "abort", None)
    return ServerSocket(unsent_of(send), abort if callable(abort) else None)


def unsent_of(send: Send) -> Unsent | None:
    """A function giving how many bytes the server holds for this socket,
    unsent; None when the server cannot tell.

    daphne's `send` hands the message to Twisted at once, whose transport
    buffers without limit: its buffer is read (the versions are pinned, and a
    test against a real daphne checks it). Servers whose `send` waits while
    the socket is full (uvicorn) hold a bounded amount themselves.
    """
    transport = _twisted_transport(send)
    if transport is None:
        return None
    return functools.partial(_twisted_unsent, transport)


def _twisted_transport(send: Send) -> Any:
    # daphne's send is partial(Server.handle_reply, protocol).
    if not isinstance(send, functools.partial) or not send.args:
        return None
    transport = getattr(send.args[0], "transport", None)
    # TLS wraps the TCP transport: the bytes wait in the one below.
    while transport is not None and not hasattr(transport, "dataBuffer"):
        transport = getattr(transport, "transport", None)
    return transport


def _twisted_unsent(transport: Any) -> int:
    # twisted.internet.abstract.FileDescriptor: the bytes being written
    # (dataBuffer from offset) and those queued behind them.
    try:
        unsent: int = len(transport.dataBuffer) - transport.offset + transport._tempDataLen
    except AttributeError:
        return 0
    return unsent


class Outbox:
    """Messages for one socket, in order; `send` never waits for the client.

    With `unsent` (the server's own buffer, which its `send` fills at once),
    messages go straight on; without, they are queued and sent by a task of
    their own. When what waits (queued here, and held by the server) would
    pass `limit` bytes, it is dropped and the socket is closed with
    CLOSE_BACKLOG; later messages are dropped.
    """

    def __init__(
        self,
        send: Send,
        limit: int,
        unsent: Unsent | None = None,
        *,
        abort: Callable[[], None] | None = None,
        on_overflow: Callable[[], None] | None = None,
    ) -> None:
        self._send = send
        self.limit = limit
        self.unsent = unsent
        self.abort = abort
        self.on_overflow = on_overflow
        self.queue: deque[tuple[ASGISendEvent, int]] = deque()  # messages and their sizes
        self.queued_bytes = 0
        self.overflowed = False
        self.closed = False
        self._sender: asyncio.Task[None] | None = None
        self._abort_timer: asyncio.TimerHandle | None = None

    @property
    def backlog(self) -> int:
        """Bytes that wait for this socket: queued here, and held by the server."""
        return self.queued_bytes + (self.unsent() if self.unsent else 0)

    async def send(self, message: ASGISendEvent) -> None:
        """The ASGI `send` the consumer uses."""
        if self.closed:
            return
        size = _size(message)
        backlog = self.backlog
        if size and backlog and backlog + size > self.limit:
            self._overflow()
            return
        if message["type"] == "websocket.close":
            self.closed = True  # nothing goes after a close
        if self.unsent is not None and not self.queue:
            # daphne's send returns at once, and quietly for a socket gone:
            # anything it raises is a fault of ours, for the consumer to see.
            await self._send(message)
            return
        self.queue.append((message, size))
        self.queued_bytes += size
        self._start_sender()

    def _start_sender(self) -> None:
        if self._sender is None or self._sender.done():
            self._sender = asyncio.ensure_future(self._send_all())

    async def _send_all(self) -> None:
        while self.queue:
            # Counted until sent: a send can wait as long as the client does.
            message, size = self.queue[0]
            try:
                await self._send(message)
            except asyncio.CancelledError:
                raise
            except Exception:
                # The socket went away: what was queued for it goes too.
                logger.debug("a %s was not sent to a closing socket", message["type"])
                self._drop()
                return
            self.queue.popleft()
            self.queued_bytes -= size

    def _overflow(self) -> None:
        """The client does not read: drop what waits, close the socket, and
        drop the connection if the close has not gone through. A send that
        waits for the socket is abandoned (uvicorn), so that the close is
        not queued behind it."""
        logger.warning("a socket's backlog passed %s bytes: closed with %s", self.limit, CLOSE_BACKLOG)
        self.overflowed = True
        self._drop()
        if self._sender is not None and not self._sender.done():
            self._sender.cancel()
        close: WebSocketCloseEvent = {"type": "websocket.close", "code": CLOSE_BACKLOG, "reason": "Not reading."}
        self.closed = True
        self.queue.append((close, 0))
        self._sender = asyncio.ensure_future(self._send_all())
        if self.abort is not None:
            self._abort_timer = asyncio.get_running_loop().call_later(ABORT_AFTER_SECONDS, self._abort)
        if self.on_overflow is not None:
            self.on_overflow()

    def _abort(self) -> None:
        self._abort_timer = None
        if self.abort is None:
            return
        try:
            self.abort()
        except Exception:
            logger.exception("could not drop a socket that does not read")

    def _drop(self) -> None:
        self.queue.clear()
        self.queued_bytes = 0

    def forget(self) -> None:
        """The socket is gone: nothing more is sent."""
        self.closed = True
        self._drop()
        if self._sender is not None and not self._sender.done():
            self._sender.cancel()
        if self._abort_timer is not None:
            self._abort_timer.cancel()
            self._abort_timer = None


def _size(message: ASGISendEvent) -> int:
    # Bytes, as the server counts them (about 0.1 us to encode a delta).
    text = message.get("text")
    if isinstance(text, str):
        return len(text.encode("utf-8", "surrogatepass"))
    data = message.get("bytes")
    return len(data) if isinstance(data, bytes) else 0
