"""The provider client's sockets, on asyncio's own transports.

The openai client talks HTTP through httpx2 and httpcore2, which read their
sockets through anyio: every read enters a cancel scope and registers the
socket with the selector again. For a stream of small server-sent events
that is most of the cost of a token. This network backend reads with an
asyncio protocol instead, which buffers whatever arrived and wakes the
reader once; HTTP itself (h11, pooling, TLS through `loop.start_tls`,
timeouts, errors) stays httpcore2's. Measured in bench/: about half the CPU
per streamed chunk. A streamed body is then read through h11 directly
(`Body`), every chunk that arrived in one read at once.

httpx2 offers no argument for a network backend, so `install` sets the
connection pool's; the versions are pinned and a test checks it is used.
"""

from __future__ import annotations

import asyncio
import math
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import h11
import httpcore2
import httpx2
from httpcore2._backends.base import AsyncNetworkBackend, AsyncNetworkStream

from chat.engine.deadline import Deadline


class _Protocol(asyncio.Protocol):
    """Buffers what arrives and wakes the one reader waiting for it."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.closed = False
        self.error: BaseException | None = None
        self.reader: asyncio.Future[None] | None = None
        self.paused = False
        self.writer: asyncio.Future[None] | None = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        _wake(self.reader)

    def eof_received(self) -> bool:
        self.closed = True
        _wake(self.reader)
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.error = exc
        _wake(self.reader)
        _wake(self.writer)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        _wake(self.writer)


def _wake(future: asyncio.Future[None] | None) -> None:
    if future is not None and not future.done():
        future.set_result(None)


class _Stream(AsyncNetworkStream):
    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        # Set by the reader of a streamed answer (provider.py): the next read
        # waits until then, so that what arrives meanwhile is read at once.
        self.not_before = 0.0
        self._timeout = Deadline()  # one timer for the connection's reads

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        protocol = self._protocol
        if self.not_before:
            delay = self.not_before - asyncio.get_running_loop().time()
            self.not_before = 0.0
            if delay > 0 and not protocol.closed:
                await asyncio.sleep(delay)
        if not protocol.buffer and not protocol.closed:
            loop = asyncio.get_running_loop()
            protocol.reader = loop.create_future()
            self._timeout.when = math.inf if timeout is None else loop.time() + timeout
            try:
                with self._timeout:
                    await protocol.reader
            except TimeoutError:
                raise httpcore2.ReadTimeout("timed out reading from the provider") from None
            finally:
                protocol.reader = None
        if protocol.buffer:
            data = bytes(protocol.buffer[:max_bytes])
            del protocol.buffer[:max_bytes]
            return data
        if protocol.error is not None:
            raise httpcore2.ReadError(str(protocol.error))
        return b""  # the server closed the connection

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        if self._transport.is_closing():
            raise httpcore2.WriteError("the connection is closed")
        self._transport.write(buffer)
        protocol = self._protocol
        if protocol.paused and not protocol.closed:
            protocol.writer = asyncio.get_running_loop().create_future()
            try:
                async with asyncio.timeout(timeout):
                    await protocol.writer
            except TimeoutError:
                raise httpcore2.WriteTimeout("timed out writing to the provider") from None
            finally:
                protocol.writer = None

    async def aclose(self) -> None:
        self._timeout.close()
        self._transport.close()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            transport = await loop.start_tls(
                self._transport,
                self._protocol,
                ssl_context,
                server_hostname=server_hostname,
                ssl_handshake_timeout=timeout,
            )
        except TimeoutError:
            self._transport.close()
            raise httpcore2.ConnectTimeout("timed out in the TLS handshake") from None
        except (OSError, ssl.SSLError) as exc:
            self._transport.close()
            raise httpcore2.ConnectError(str(exc)) from None
        if transport is None:
            # asyncio has no transport to return when the connection was lost
            # as the handshake ended.
            raise httpcore2.ConnectError("the connection closed during the TLS handshake")
        return _Stream(transport, self._protocol)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            # Asked of an idle pooled connection: has the server closed it?
            return bool(self._protocol.buffer) or self._protocol.closed
        names = {"ssl_object": "ssl_object", "client_addr": "sockname", "server_addr": "peername", "socket": "socket"}
        return self._transport.get_extra_info(names[info]) if info in names else None


class AsyncioBackend(AsyncNetworkBackend):
    """TCP only: the provider client is never given a Unix socket (`uds`)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(
                    _Protocol, host, port, local_addr=(local_address, 0) if local_address else None
                )
        except TimeoutError:
            raise httpcore2.ConnectTimeout(f"timed out connecting to {host}:{port}") from None
        except OSError as exc:
            raise httpcore2.ConnectError(str(exc)) from None
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for option in socket_options or ():
            sock.setsockopt(*option)
        return _Stream(transport, protocol)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def connection(response: httpx2.Response) -> _Stream | None:
    """The connection a response is read from, when it is one of ours
    (not the offline model's, say): its reads can be paced."""
    stream = response.extensions.get("network_stream")
    return stream if isinstance(stream, _Stream) else None


READ_BYTES = 64 * 1024  # as httpcore2 reads


class Body:
    """A response's body, read from one of our connections through its h11
    state directly: each read hands back every byte of the body that has
    arrived, however many HTTP chunks carry it. Through httpx2 and
    httpcore2, each chunk passes about ten generators and context managers
    on its own (29.9 against 9.5 us a chunk, measured in bench/). h11 still
    frames the body (chunked, a length, or to the connection's end), so the
    connection ends as httpcore2 expects: closing the response hands it back
    to the pool when the body was read to its end, and closes it otherwise.
    Errors are httpx2's, as reading through httpx2 would raise them."""

    def __init__(self, state: h11.Connection, network: _Stream, timeout: float | None) -> None:
        self._state = state
        self._network = network
        self._timeout = timeout
        self.ended = False

    async def read(self) -> bytes:
        """The body's next bytes, at least one; b"" at its end."""
        state = self._state
        parts: list[bytes | bytearray] = []
        while not self.ended:
            try:
                event = state.next_event()
            except h11.RemoteProtocolError as exc:  # a malformed chunk, or the body cut short
                raise httpx2.RemoteProtocolError(str(exc)) from None
            if type(event) is h11.Data:
                parts.append(event.data)
            elif event is h11.NEED_DATA:
                if parts:
                    break
                try:
                    data = await self._network.read(READ_BYTES, self._timeout)
                except httpcore2.ReadTimeout as exc:
                    raise httpx2.ReadTimeout(str(exc)) from None
                except httpcore2.ReadError as exc:
                    raise httpx2.ReadError(str(exc)) from None
                state.receive_data(data)
            else:  # its EndOfMessage: the body is whole
                self.ended = True
        return b"".join(parts)


def body(response: httpx2.Response) -> Body | None:
    """The response's body as a Body, when it is read from one of our
    connections over HTTP/1.1 and nothing of it has been read yet; else
    None, and the body is read through httpx2 (HTTP/2, the offline model).
    httpx2 offers no way to it: the path through its and httpcore2's
    objects is checked at each step, and the versions are pinned."""
    network = connection(response)
    if network is None:
        return None
    stream: Any = response.stream
    for name in ("_stream", "_httpcore_stream", "_stream", "_connection"):
        stream = getattr(stream, name, None)
    state = getattr(stream, "_h11_state", None)
    read_from = getattr(stream, "_network_stream", None)
    if not isinstance(read_from, _Stream) or read_from is not network:
        return None
    if not isinstance(state, h11.Connection) or state.their_state is not h11.SEND_BODY:
        return None
    return Body(state, read_from, response.request.extensions.get("timeout", {}).get("read"))


def install(client: httpx2.AsyncClient) -> None:
    """Makes the client's connections (direct or through a proxy) use asyncio's transports."""
    for transport in [client._transport, *client._mounts.values()]:
        pool = getattr(transport, "_pool", None)
        if isinstance(pool, httpcore2.AsyncConnectionPool):
            pool._network_backend = AsyncioBackend()
