"""The provider client's asyncio network backend (chat/engine/transport.py), against
real sockets: plain and TLS, timeouts, refused connections, and pooled
connections the server has closed."""

import asyncio
import contextlib
import ssl

import httpx2
import pytest

from chat.engine import provider, transport
from tests.certificates import self_signed

BODY = b"data: {}\n\ndata: [DONE]\n\n"


async def read_request(reader: asyncio.StreamReader) -> None:
    """Reads one request, its head and its body."""
    head = await reader.readuntil(b"\r\n\r\n")
    sized = [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")]
    await reader.readexactly(int(sized[0].split(b":")[1]) if sized else 0)


class Server:
    """An HTTP/1.1 server answering every request with BODY; it can close
    each connection after its answer, or never answer."""

    def __init__(self, close_after: bool = False, silent: bool = False) -> None:
        self.close_after = close_after
        self.silent = silent
        self.connections = 0

    async def start(self, tls: ssl.SSLContext | None = None) -> int:
        self.server = await asyncio.start_server(self.serve, "127.0.0.1", 0, ssl=tls)
        return self.server.sockets[0].getsockname()[1]

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                await read_request(reader)
                if self.silent:
                    await asyncio.sleep(10)
                    return
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
                writer.write(b"content-length: %d\r\n\r\n%s" % (len(BODY), BODY))
                await writer.drain()
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        self.server.close()


def client(**options) -> httpx2.AsyncClient:
    http = httpx2.AsyncClient(**options)
    transport.install(http)
    return http


async def test_the_provider_client_reads_with_asyncio(settings):
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    settings.OPENAI_API_KEY = "key"
    pool = provider._client()._client._transport._pool
    # httpx2 has no argument for it: if its internals move, this says so.
    assert isinstance(pool._network_backend, transport.AsyncioBackend)


async def test_a_stream_over_plain_tcp_reuses_its_connection():
    server = Server()
    port = await server.start()
    async with client() as http:
        for _ in range(3):
            async with http.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions", json={}) as response:
                assert isinstance(response.extensions["network_stream"], transport._Stream)
                assert b"".join([part async for part in response.aiter_bytes()]) == BODY
    await server.stop()
    assert server.connections == 1


async def test_a_stream_over_tls(tmp_path):
    cert, key = self_signed(tmp_path, "localhost")
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)
    trusted = ssl.create_default_context(cafile=cert)
    server = Server()
    port = await server.start(tls=served)
    async with client(verify=trusted) as http:
        response = await http.post(f"https://localhost:{port}/v1/chat/completions", json={})
        assert response.content == BODY
        assert response.extensions["network_stream"].get_extra_info("ssl_object") is not None
    await server.stop()


async def test_the_provider_pools_share_one_tls_context_that_trusts_the_environment(tmp_path, settings, monkeypatch):
    # Each context loads the CA bundle (about 30 ms on the event loop): one
    # for all the pools, still trusting what SSL_CERT_FILE names.
    cert, key = self_signed(tmp_path, "localhost")
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)
    server = Server()
    port = await server.start(tls=served)
    settings.OPENAI_BASE_URL = f"https://localhost:{port}/v1"
    settings.OPENAI_API_KEY = "key"
    http = provider._client()._client
    _, clients = provider._clients[asyncio.get_running_loop()]
    assert len(clients) == provider.POOLS
    assert len({id(c._client._transport._pool._ssl_context) for c in clients}) == 1
    response = await http.post(f"https://localhost:{port}/v1/chat/completions", json={})
    assert response.content == BODY
    assert response.extensions["network_stream"].get_extra_info("ssl_object") is not None
    await server.stop()


async def test_a_certificate_not_trusted_is_refused():
    server = Server()
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    # No certificate at all: the handshake fails, as it would for one not trusted.
    port = await server.start(tls=served)
    async with client() as http:
        with pytest.raises(httpx2.ConnectError):
            await http.post(f"https://localhost:{port}/", json={})
    await server.stop()


async def test_a_read_times_out():
    server = Server(silent=True)
    port = await server.start()
    async with client(timeout=httpx2.Timeout(5, read=0.2)) as http:
        with pytest.raises(httpx2.ReadTimeout):
            await http.post(f"http://127.0.0.1:{port}/", json={})
    await server.stop()


async def test_a_refused_connection():
    with socket_port() as port:
        async with client() as http:
            with pytest.raises(httpx2.ConnectError):
                await http.post(f"http://127.0.0.1:{port}/", json={})


async def test_a_pooled_connection_the_server_closed_is_not_reused():
    server = Server(close_after=True)
    port = await server.start()
    async with client() as http:
        for _ in range(2):
            response = await http.post(f"http://127.0.0.1:{port}/", json={})
            assert response.content == BODY
            await asyncio.sleep(0.05)  # the server's close arrives
    await server.stop()
    assert server.connections == 2


class socket_port:
    """A port nothing listens on."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    def __exit__(self, *exc) -> None:
        pass


async def test_turns_are_spread_over_every_pool():
    """Each request and response end walks its pool's connections: turns
    must spread over all the pools, not crowd into a few."""

    async def pool():
        await asyncio.sleep(0.01)  # all alive at once, as concurrent turns are
        return provider.pool_of(asyncio.current_task(), provider.POOLS)

    pools = await asyncio.gather(*[asyncio.create_task(pool()) for _ in range(400)])
    counts = [pools.count(n) for n in range(provider.POOLS)]
    assert min(counts) >= 400 / provider.POOLS / 3, counts


# --- the body read straight through h11 (transport.Body) ------------------------------------

CHUNKED = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts)


class BodyServer:
    """Answers each request on a connection with the next script: a list of
    writes (bytes) and pauses (floats); closes the connection after the last
    script, or after a script marked `close`."""

    def __init__(self, *scripts: list) -> None:
        self.scripts = list(scripts)
        self.connections = 0
        self.hung_up = asyncio.Event()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self.serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1/chat/completions"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.scripts:
                await read_request(reader)
                script = self.scripts.pop(0)
                for step in script:
                    if step == "close":
                        return
                    if isinstance(step, float):
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(step):  # a pause, unless the client hangs up
                                if not await reader.read(1):
                                    return
                    else:
                        writer.write(step)
                        await writer.drain()
            await reader.read()  # the client hangs up
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.hung_up.set()
            writer.close()

    async def stop(self) -> None:
        self.server.close()


async def read_all(body: transport.Body) -> list[bytes]:
    reads = []
    while data := await body.read():
        reads.append(data)
    return reads


async def test_a_chunked_body_is_read_whole_and_its_connection_reused():
    parts = [b"data: 1\n\n", b"data: 2\n\n", b"data: [DONE]\n\n"]
    script = [CHUNKED, chunked(parts[0]), 0.05, chunked(*parts[1:]) + b"0\r\n\r\n"]
    server = BodyServer(script, script)
    url = await server.start()
    async with client() as http:
        for _ in range(2):
            async with http.stream("POST", url, json={}) as response:
                body = transport.body(response)
                assert body is not None
                reads = await read_all(body)
                # What arrived together is one read, whatever its HTTP chunks.
                assert reads == [parts[0], parts[1] + parts[2]]
                assert await body.read() == b""
    await server.stop()
    assert server.connections == 1


async def test_a_body_with_a_length_and_one_to_the_connections_end():
    sized = b"data: 1\n\ndata: [DONE]\n\n"
    server = BodyServer(
        [b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(sized), sized[:9], 0.05, sized[9:]],
        [b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n", b"data: 2\n\n", 0.05, b"data: [DONE]\n\n", "close"],
    )
    url = await server.start()
    async with client() as http:
        async with http.stream("POST", url, json={}) as response:
            assert b"".join(await read_all(transport.body(response))) == sized
        async with http.stream("POST", url, json={}) as response:
            assert b"".join(await read_all(transport.body(response))) == b"data: 2\n\ndata: [DONE]\n\n"
    await server.stop()


@pytest.mark.parametrize(
    "ending",
    [
        pytest.param([chunked(b"data: 1\n\n"), "close"], id="cut-short"),
        pytest.param([b"zz\r\ndata\r\n"], id="malformed-chunk"),
    ],
)
async def test_a_broken_body_is_httpx2s_protocol_error(ending):
    server = BodyServer([CHUNKED, *ending])
    url = await server.start()
    async with client() as http:
        async with http.stream("POST", url, json={}) as response:
            body = transport.body(response)
            with pytest.raises(httpx2.RemoteProtocolError):
                await read_all(body)
    await server.stop()


async def test_a_body_closed_before_its_end_closes_its_connection():
    server = BodyServer([CHUNKED, chunked(b"data: 1\n\n"), 5.0, b"0\r\n\r\n"], [CHUNKED, b"0\r\n\r\n"])
    url = await server.start()
    async with client() as http:
        async with http.stream("POST", url, json={}) as response:
            assert await transport.body(response).read() == b"data: 1\n\n"
        # Not reused half read: the server sees the hang-up.
        async with asyncio.timeout(2):
            await server.hung_up.wait()
    await server.stop()


async def test_a_body_read_through_httpx2_first_is_not_taken_over():
    server = BodyServer([CHUNKED, chunked(b"data: 1\n\n"), b"0\r\n\r\n"])
    url = await server.start()
    async with client() as http:
        async with http.stream("POST", url, json={}) as response:
            assert transport.body(response) is not None
            await response.aread()
            assert transport.body(response) is None
    await server.stop()


async def test_the_apps_streams_read_their_body_straight(open_stream, provider):
    """The app's reader takes the body over from httpx2 (provider.Stream):
    if httpx2's or httpcore2's internals move, this says so."""
    from tests.provider import answer

    provider.queue(answer("Hello."))
    async with await open_stream(
        messages=[{"role": "user", "content": "Hi"}], tools=None, tool_choice="auto"
    ) as stream:
        assert isinstance(stream._body, transport.Body)
        chunks = [chunk async for batch in stream for chunk in batch]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == "Hello."
