"""Clients that mean harm, against real servers: one that never reads what
it asks for, and one that rotates the /64s of its /56 behind a proxy."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import websockets

from tests.provider import ScriptedProvider, answer
from tests.servers import ROOT, daphne

# --- a client that never reads ------------------------------------------------------------

# Unbounded, daphne grew 1.7 MB a second: 20 s after settling is 34 MB, against a bound of 10.
SECONDS = 30
SETTLED_AFTER = 10  # the first sockets' buffers and the first pages of history are in by then


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _masked(text: str) -> bytes:
    """A client's text frame (clients must mask)."""
    data, mask = text.encode(), os.urandom(4)
    size = bytes([0x80 | len(data)]) if len(data) < 126 else bytes([0x80 | 126]) + struct.pack("!H", len(data))
    return bytes([0x81]) + size + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data))


def _open_raw(address: str, cookie: str) -> socket.socket:
    """A WebSocket by hand, with a 4 KB receive buffer that nobody empties."""
    host, port = address.split(":")
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.settimeout(10)
    raw.connect((host, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    raw.sendall(
        f"GET /ws/chat/ HTTP/1.1\r\nHost: {address}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nOrigin: http://{address}\r\n"
        f"Cookie: {cookie}\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += raw.recv(1)
    assert b" 101 " in head.split(b"\r\n")[0], head
    return raw


class NeverReads(threading.Thread):
    """Two sockets asking for the history four times a second, reading
    nothing; a socket the server closes is opened again, as an attacker's
    would be. Samples the server's memory every second."""

    def __init__(self, address: str, cookie: str, pid: int) -> None:
        super().__init__(daemon=True)
        self.address, self.cookie, self.pid = address, cookie, pid
        self.samples: list[tuple[float, float]] = []
        self.reopened = 0
        self.asked = 0

    def run(self) -> None:
        frame = _masked(json.dumps({"type": "history"}))
        sockets = [_open_raw(self.address, self.cookie) for _ in range(2)]
        start = time.monotonic()
        next_sample = start
        while (now := time.monotonic()) - start < SECONDS:
            for n, raw in enumerate(sockets):
                try:
                    raw.send(frame, socket.MSG_DONTWAIT)
                    self.asked += 1
                except BlockingIOError:
                    pass  # the server stopped reading it: it still holds the socket
                except OSError:
                    raw.close()
                    sockets[n] = _open_raw(self.address, self.cookie)
                    self.reopened += 1
            if now >= next_sample:
                self.samples.append((now - start, _rss_mb(self.pid)))
                next_sample += 1
            time.sleep(0.25)
        for raw in sockets:
            raw.close()

    def growth_after_settling(self) -> float:
        settled = [rss for at, rss in self.samples if at >= SETTLED_AFTER]
        return max(settled) - settled[0]


def _long_history(database: Path, cookie: str) -> None:
    """Ten long turns in the cookie's conversation (a 220 KB history without
    pages in bytes), written by the server's own models."""
    key = cookie.split("=", 1)[1]
    script = (
        "from chat.models import Conversation, Turn; from chat.visitors.identity import hash_key\n"
        f"c = Conversation.objects.create(visitor_hash=hash_key({key!r}))\n"
        "for i in range(10):\n"
        "    Turn.objects.create(conversation=c, status='completed', user_text='q' * 2000,"
        " assistant_text=('answer %d ' % i) * 2200, model='m')\n"
    )
    environment = {**os.environ, "DATABASE_URL": f"sqlite:///{database}"}
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "shell", "-c", script], env=environment, check=True, cwd=ROOT
    )


def _cookie(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/") as response:
        [cookie] = [c.split(";")[0] for c in response.headers.get_all("Set-Cookie") if c.startswith("sessionid=")]
    return cookie


# Each server twice: as configured by default (the byte budget closes the
# socket first), and with the byte budget out of the way, so that the bound
# on what waits to be sent is what holds.
SERVERS = [
    ("daphne", {}),
    ("uvicorn", {}),
    ("daphne", {"KOOKEE_FRAME_BYTES_BURST": "1000000000", "KOOKEE_FRAME_BYTES_PER_SECOND": "1000000000"}),
    ("uvicorn", {"KOOKEE_FRAME_BYTES_BURST": "1000000000", "KOOKEE_FRAME_BYTES_PER_SECOND": "1000000000"}),
]


def test_a_client_that_never_reads_cannot_grow_the_server(tmp_path):
    # Before the bound, daphne grew by every reply (+52 MB in 30 s here).
    # All four servers run at once: half a minute in all.
    with ExitStack() as stack:
        clients = []
        for n, (server, env) in enumerate(SERVERS):
            folder = tmp_path / f"{server}-{n}"
            folder.mkdir()
            address, database, process = stack.enter_context(daphne(folder, server=server, **env))
            cookie = _cookie(address)
            _long_history(database, cookie)
            clients.append((server, env, NeverReads(address, cookie, process.pid)))
        for _, _, client in clients:
            client.start()
        for _, _, client in clients:
            client.join(SECONDS + 30)

    for server, env, client in clients:
        label = f"{server} {'without the byte budget' if env else 'as configured'}"
        start, growth = client.samples[0][1], client.growth_after_settling()
        print(f"{label}: {start:.0f} MB at the start, +{growth:.1f} MB after settling")
        assert client.asked > SECONDS * 4, label  # it kept asking all along
        assert client.growth_after_settling() < 10, f"{label}: {client.samples}"
        # The close waits behind what the client does not read: the
        # connection is dropped a second later, whichever the server.
        assert client.reopened >= 1, f"{label}: the server never closed a socket that does not read"


# --- a /56 rotating its /64s behind a proxy --------------------------------------------------


async def test_rotating_the_64s_of_a_56_behind_a_proxy_stops_at_the_56(tmp_path):
    provider = ScriptedProvider()
    url = await provider.start()
    provider.queue(*[answer("Sure.", 2400, 100) for _ in range(20)])
    env = {
        "OPENAI_BASE_URL": url,
        "OPENAI_API_KEY": "test-key",
        "KOOKEE_TRUSTED_PROXIES": "127.0.0.1",
        # 105,000 a day: 10,500 for a /64, 21,000 for a /56, 42,000 for a /48. Not
        # 100,000: the eighth turn's worst case (its prompt, estimated at the
        # learnt 2,400 tokens, and 100 out) would have fitted the /56 to the
        # token, and any change to the prompt or the tools tipped it.
        "KOOKEE_TOKENS_PER_DAY": "105000",
        "KOOKEE_NETWORK_SHARE_OF_DAY": "0.1",
        "KOOKEE_IPV6_BUDGETS": "64:0.1,56:0.2,48:0.4",
        "KOOKEE_MAX_OUTPUT_TOKENS": "100",
        "KOOKEE_TURNS_PER_MINUTE_PER_ADDRESS": "1000",
    }
    try:
        with daphne(tmp_path, **env) as (address, _database, _process):
            rotated = [await _ask_from(address, f"2001:db8:0:{n:x}::1") for n in range(11)]
            other = await _ask_from(address, "2001:db8:77::1")
            v4 = await _ask_from(address, "198.51.100.9")
    finally:
        await provider.stop()

    # Each turn costs 2,500: eight fill the /56 (a ninth's worst case is 1,000 over), whichever of its /64s asks.
    assert rotated == ["completed"] * 8 + ["network_budget_exhausted"] * 3
    assert other == v4 == "completed"


async def _ask_from(address: str, forwarded_for: str) -> str:
    """A fresh visitor behind the proxy: the turn's status, or the refusal's code."""
    headers = {"X-Forwarded-For": forwarded_for}
    cookie = await asyncio.to_thread(_cookie, address)
    async with websockets.connect(
        f"ws://{address}/ws/chat/", additional_headers={"Cookie": cookie, **headers}, origin=f"http://{address}"
    ) as socket:
        await socket.send(json.dumps({"type": "message", "text": "one more, please"}))
        while True:
            frame = json.loads(await socket.recv())
            if frame["type"] == "error" and "turn_id" not in frame:
                return frame["code"]
            if frame["type"] == "turn.ended":
                return frame["status"]
