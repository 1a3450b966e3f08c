"""chat/actions/http.py against real HTTP/1.1 servers on loopback ports.

Each server is raw asyncio (asyncio.start_server) in the test's own event
loop, scripted per test, so that a test can answer wrongly, slowly or not
at all, and can see what the client did at the wire: how many connections
it opened, what each request carried, and when a connection was closed.
Names such as api.example.com reach these servers through send()'s resolve
hook, which is also how a test counts the connections Guard makes.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from chat.actions.http import CallFailed, Refused, Response, TimedOut, send

SECRET = "s3cret-token"


@dataclass
class Request:
    method: str
    target: str
    headers: dict[str, str]  # names lower-cased
    body: bytes


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    line, *fields = head.decode("latin-1").split("\r\n")[:-2]
    method, target, _ = line.split(" ", 2)
    headers = {name.lower(): value.strip() for name, _, value in (f.partition(":") for f in fields)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Request(method, target, headers, body)


def answer(status: int, body: bytes = b"", **headers: str) -> bytes:
    fields = {"Content-Length": str(len(body)), "Connection": "close"}
    fields |= {name.replace("_", "-"): value for name, value in headers.items()}
    head = "".join(f"{name}: {value}\r\n" for name, value in fields.items())
    return f"HTTP/1.1 {status} X\r\n{head}\r\n".encode() + body


Handler = Callable[["Server", Request, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class Server:
    handler: Handler
    connections: int = 0
    requests: list[Request] = field(default_factory=list)
    received: asyncio.Event = field(default_factory=asyncio.Event)  # a request has arrived
    closed_at: list[float] = field(default_factory=list)  # when the client closed a connection
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        # Connections reset rather than their handlers cancelled: Python 3.11's
        # streams log a cancelled handler as an error.
        for writer in self._writers:
            writer.transport.abort()
        await asyncio.wait_for(asyncio.gather(*self._tasks, return_exceptions=True), 2)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.append(writer)
        self.connections += 1
        try:
            # Requests one after another on the connection, as long as the client keeps it open.
            while (request := await read_request(reader)) is not None:
                self.requests.append(request)
                self.received.set()
                await self.handler(self, request, reader, writer)
        except ConnectionError:
            pass
        finally:
            writer.close()


async def until_closed(
    server: Server, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Never answers; notes when the client closes the connection (EOF or reset)."""
    with contextlib.suppress(ConnectionError):
        await reader.read()
    server.closed_at.append(time.monotonic())


def serving(handler: Handler | dict[str, bytes]) -> Server:
    """A server that runs handler, or answers each path from a dict (404 otherwise)."""
    if isinstance(handler, dict):
        routes = handler

        async def handler(
            server: Server, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
        ) -> None:
            writer.write(routes.get(request.target.split("?")[0], answer(404)))
            await writer.drain()

    return Server(handler)


def resolver(names: dict[str, list[str]], calls: list[str] | None = None) -> Callable[[str, int], Awaitable[list[str]]]:
    async def resolve(host: str, port: int) -> list[str]:
        if calls is not None:
            calls.append(host)
        return names[host]

    return resolve


LOCAL = resolver({"api.example.com": ["127.0.0.1"]})


async def test_a_get_returns_the_json_answer() -> None:
    async with serving({"/items": answer(200, b'{"ok": true}', Content_Type="application/json")}) as server:
        response = await send("GET", f"{server.url}/items?q=1", headers={}, timeout=2, allow_private=True)
    assert response == Response(200, "application/json", b'{"ok": true}', response.elapsed)
    assert 0 < response.elapsed < 1
    [request] = server.requests
    assert (request.method, request.target) == ("GET", "/items?q=1")
    assert request.headers["user-agent"] == "KookeeActions/1.0"


async def test_a_post_carries_its_body_and_headers() -> None:
    async with serving({"/orders": answer(201, b"{}")}) as server:
        response = await send(
            "POST",
            f"{server.url}/orders",
            headers={"Authorization": f"Bearer {SECRET}", "X-Api-Key": "k1"},
            body=b'{"qty": 2}',
            timeout=2,
            allow_private=True,
        )
    assert response.status == 201
    [request] = server.requests
    assert (request.method, request.body) == ("POST", b'{"qty": 2}')
    assert request.headers["content-type"] == "application/json"
    assert request.headers["authorization"] == f"Bearer {SECRET}"
    assert request.headers["x-api-key"] == "k1"


async def test_loopback_is_refused_unless_private_addresses_are_allowed() -> None:
    async with serving({"/": answer(200)}) as server:
        with pytest.raises(Refused) as refused:
            await send("GET", f"{server.url}/?key={SECRET}", headers={"Authorization": SECRET}, timeout=2)
        assert server.connections == 0
        allowed = await send("GET", f"{server.url}/", headers={}, timeout=2, allow_private=True)
    assert refused.value.outcome == "refused"
    assert "127.0.0.1" in refused.value.message and "KOOKEE_ACTIONS_ALLOW_PRIVATE=true" in refused.value.message
    assert SECRET not in str(refused.value)
    assert allowed.status == 200


@pytest.mark.parametrize("addresses", [["10.0.0.5"], ["93.184.215.14", "10.0.0.5"], ["::ffff:10.0.0.5"]])
async def test_a_name_that_resolves_to_any_private_address_is_refused(addresses: list[str]) -> None:
    calls: list[str] = []
    with pytest.raises(Refused, match=r"api\.example\.com is at a private or local address") as refused:
        await send(
            "GET",
            "http://api.example.com/x",
            headers={},
            timeout=2,
            resolve=resolver({"api.example.com": addresses}, calls),
        )
    assert "10.0.0.5" in str(refused.value)
    assert calls == ["api.example.com"]  # refused before any connection to the public one


async def test_guard_connects_to_the_address_it_checked_and_names_the_host() -> None:
    async with serving({"/x": answer(200, b"hi")}) as server:
        url = f"http://API.Example.com:{server.port}/x"
        response = await send("GET", url, headers={}, timeout=2, allow_private=True, resolve=LOCAL)
    assert response.body == b"hi"
    assert server.requests[0].headers["host"] == f"api.example.com:{server.port}"


async def test_a_redirect_on_the_same_origin_is_followed_and_each_hop_checked() -> None:
    calls: list[str] = []
    # Kept alive by the server: the client must not reuse the connection for the next hop.
    keep = {"Connection": "keep-alive"}
    routes = {"/a": answer(302, Location="/b", **keep), "/b": answer(301, Location="/c", **keep)}
    routes["/c"] = answer(200, b"done", **keep)
    async with serving(routes) as server:
        url = f"http://api.example.com:{server.port}/a"
        resolve = resolver({"api.example.com": ["127.0.0.1"]}, calls)
        response = await send("GET", url, headers={}, timeout=2, allow_private=True, resolve=resolve)
    assert (response.status, response.body) == (200, b"done")
    assert [r.target for r in server.requests] == ["/a", "/b", "/c"]
    assert server.connections == 3 and len(calls) == 3  # no kept-alive connection: Guard saw every hop


@pytest.mark.parametrize(
    "where", ["http://127.0.0.1:{other}/", "http://evil.example/?token=" + SECRET, "https://127.0.0.1:{port}/"]
)
async def test_a_redirect_to_another_origin_is_refused(where: str) -> None:
    routes: dict[str, bytes] = {}
    async with serving({"/": answer(200)}) as other, serving(routes) as server:
        routes["/a"] = answer(307, Location=where.format(other=other.port, port=server.port))
        with pytest.raises(Refused, match="redirected to another host") as refused:
            await send("GET", f"{server.url}/a", headers={}, timeout=2, allow_private=True)
    assert other.connections == 0
    assert SECRET not in str(refused.value)


async def test_a_post_answered_with_a_redirect_returns_it() -> None:
    async with serving({"/a": answer(302, Location="/b"), "/b": answer(200)}) as server:
        response = await send("POST", f"{server.url}/a", headers={}, body=b"{}", timeout=2, allow_private=True)
    assert response.status == 302
    assert [r.target for r in server.requests] == ["/a"]


async def test_a_redirect_loop_stops_after_three() -> None:
    async with serving({"/loop": answer(302, Location="/loop")}) as server:
        with pytest.raises(CallFailed, match="redirected more than 3 times") as failed:
            await send("GET", f"{server.url}/loop", headers={}, timeout=2, allow_private=True)
    assert failed.value.outcome == "error" and not isinstance(failed.value, Refused | TimedOut)
    assert len(server.requests) == 4


async def declares_a_megabyte(
    server: Server, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Declares 1 MB, sends 10 bytes of it, then nothing: only the declared length can tell."""
    writer.write(answer(200, b"x" * 10, Content_Length=str(2**20)))
    await writer.drain()
    await until_closed(server, request, reader, writer)


async def test_an_answer_declared_too_large_is_not_read() -> None:
    # The server declares a megabyte and sends none of it: reading would end in the timeout instead.
    async with serving(declares_a_megabyte) as server:
        with pytest.raises(CallFailed, match="larger than 64 KB") as failed:
            await send("GET", f"{server.url}/", headers={}, timeout=2, allow_private=True)
    assert failed.value.outcome == "error"


async def test_a_head_answer_may_declare_any_length() -> None:
    async with serving({"/": answer(200, Content_Length=str(2**20))}) as server:
        response = await send("HEAD", f"{server.url}/", headers={}, timeout=2, allow_private=True)
    assert (response.status, response.body) == (200, b"")


async def test_an_answer_of_exactly_max_bytes_is_read() -> None:
    async with serving({"/": answer(200, b"x" * 70000)}) as server:
        with pytest.raises(CallFailed, match="larger than 69999 bytes"):
            await send("GET", f"{server.url}/", headers={}, timeout=2, allow_private=True, max_bytes=69999)
        exact = await send("GET", f"{server.url}/", headers={}, timeout=2, allow_private=True, max_bytes=70000)
    assert len(exact.body) == 70000


async def chunked_forever(
    server: Server, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """16 KB chunks, without end: the client must stop counting, not wait for the last one."""
    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n")
    while True:
        writer.write(b"4000\r\n" + b"y" * 0x4000 + b"\r\n")
        await writer.drain()
        await asyncio.sleep(0.01)


async def test_a_streamed_answer_is_abandoned_as_soon_as_it_is_too_large() -> None:
    async with serving(chunked_forever) as server:
        started = time.monotonic()
        with pytest.raises(CallFailed, match="larger than 40000 bytes"):
            await send("GET", f"{server.url}/", headers={}, timeout=5, allow_private=True, max_bytes=40000)
    assert time.monotonic() - started < 1


async def test_an_api_that_never_answers_times_out() -> None:
    async with serving(until_closed) as server:
        started = time.monotonic()
        with pytest.raises(TimedOut) as timed_out:
            await send("GET", f"{server.url}/?key={SECRET}", headers={"X-Key": SECRET}, timeout=0.3, allow_private=True)
        elapsed = time.monotonic() - started
        await asyncio.sleep(0.05)
        assert len(server.closed_at) == 1  # and its connection was closed
    assert 0.3 <= elapsed < 0.8
    assert (timed_out.value.outcome, timed_out.value.message) == ("timeout", "the API did not answer within 0.3 s")


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("X-Key", f"{SECRET}\r\nX-Injected: 1", "header X-Key has a line break"),
        ("X-Key", f"{SECRET}\n", "header X-Key has a line break"),
        ("X-Key", f"{SECRET}\x00", "header X-Key has a control character"),
        ("X Key", SECRET, "is not a valid header name"),
        ("X-Key:", SECRET, "is not a valid header name"),
    ],
)
async def test_a_header_that_would_split_the_request_is_refused_before_any_connection(
    name: str, value: str, message: str
) -> None:
    calls: list[str] = []
    async with serving({"/": answer(200)}) as server:
        with pytest.raises(Refused, match=message) as refused:
            url = f"http://api.example.com:{server.port}/"
            resolve = resolver({"api.example.com": ["127.0.0.1"]}, calls)
            await send("GET", url, headers={name: value}, timeout=2, allow_private=True, resolve=resolve)
    assert (server.connections, calls) == (0, [])
    assert SECRET not in str(refused.value)


@pytest.mark.parametrize(
    "url",
    ["ftp://127.0.0.1/", "file:///etc/passwd", "http:///path", f"http://me:{SECRET}@127.0.0.1/", "http://h:99999/"],
)
async def test_a_url_that_is_not_plain_http_is_refused(url: str) -> None:
    with pytest.raises(Refused) as refused:
        await send("GET", url, headers={}, timeout=2, allow_private=True, resolve=LOCAL)
    assert SECRET not in str(refused.value)


@pytest.mark.parametrize("port", ["{port}", None])
async def test_the_apps_own_host_is_refused(port: str | None) -> None:
    async with serving({"/": answer(200)}) as server:
        own = frozenset({("localhost", int(port.format(port=server.port)) if port else None)})
        with pytest.raises(Refused, match="localhost is this app's own host"):
            await send(
                "GET", f"http://LocalHost:{server.port}/", headers={}, timeout=2, allow_private=True, own_hosts=own
            )
        elsewhere = frozenset({("localhost", server.port + 1)})
        resolve = resolver({"localhost": ["127.0.0.1"]})
        url = f"http://localhost:{server.port}/"
        response = await send(
            "GET", url, headers={}, timeout=2, allow_private=True, own_hosts=elsewhere, resolve=resolve
        )
    assert response.status == 200 and server.connections == 1


@contextlib.contextmanager
def refusing_port():
    """A port bound but not listening: a connection to it is refused (RST) at
    once, and no other process can take the port meanwhile."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock
    finally:
        sock.close()


@pytest.mark.parametrize(("method", "attempts"), [("POST", 1), ("PATCH", 1), ("GET", 2), ("DELETE", 2)])
async def test_a_refused_connection_is_tried_again_once_for_idempotent_methods(method: str, attempts: int) -> None:
    calls: list[str] = []
    with refusing_port() as sock:
        url = f"http://api.example.com:{sock.getsockname()[1]}/"
        resolve = resolver({"api.example.com": ["127.0.0.1"]}, calls)
        with pytest.raises(CallFailed, match=r"cannot connect to api\.example\.com") as failed:
            await send(method, url, headers={}, timeout=2, allow_private=True, resolve=resolve)
    assert failed.value.outcome == "error"
    assert len(calls) == attempts  # Guard connects once per attempt


async def test_a_get_succeeds_when_its_retry_finds_the_api_up() -> None:
    with refusing_port() as sock:
        servers: list[asyncio.Server] = []
        calls: list[str] = []

        async def resolve(host: str, port: int) -> list[str]:
            calls.append(host)
            if len(calls) == 2:  # the second attempt: the API is up now
                servers.append(await asyncio.start_server(handle, sock=sock))
            return ["127.0.0.1"]

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(answer(200, b"up"))
            await writer.drain()
            writer.close()

        url = f"http://api.example.com:{sock.getsockname()[1]}/"
        response = await send("GET", url, headers={}, timeout=2, allow_private=True, resolve=resolve)
        servers[0].close()
        await servers[0].wait_closed()
    assert (response.body, len(calls)) == (b"up", 2)


async def hang_up(server: Server, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Reads the request, then closes the connection without a word."""
    writer.close()


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_a_request_sent_is_never_sent_again(method: str) -> None:
    async with serving(hang_up) as server:
        with pytest.raises(CallFailed, match="closed the connection without a complete HTTP answer"):
            await send(method, f"{server.url}/", headers={}, timeout=2, allow_private=True)
    assert server.connections == 1


async def test_cancelling_the_call_closes_its_connection_at_once() -> None:
    async with serving(until_closed) as server:
        task = asyncio.create_task(send("GET", f"{server.url}/", headers={}, timeout=10, allow_private=True))
        await asyncio.wait_for(server.received.wait(), 2)
        await asyncio.sleep(0.2)
        cancelled_at = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(20):
            if server.closed_at:
                break
            await asyncio.sleep(0.01)
    assert server.closed_at, "the API's connection is still open after the cancel"
    assert server.closed_at[0] - cancelled_at < 0.1
