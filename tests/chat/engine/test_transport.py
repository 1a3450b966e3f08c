"""The provider client's asyncio network backend (chat/engine/transport.py), against
real sockets: plain and TLS, timeouts, refused connections, and pooled
connections the server has closed."""

import asyncio
import ssl

import httpx2
import pytest

from chat.engine import provider, transport
from tests.certificates import self_signed

BODY = b"data: {}\n\ndata: [DONE]\n\n"


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
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                await reader.readexactly(length)
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
