"""A customer's own API on a loopback port, for the actions' tests: a tiny
shop. A real HTTP/1.1 server (asyncio, in the test's event loop, or in a
thread of its own for the admin's sync views) that records every request as
it arrived (method, path, query, headers, body) and when the client hung
up, so a test can prove what reached the API, and that Stop closed it.

Routes:
- GET /orders/{id}?customer_id=C: the order, when it is C's; 404 otherwise.
- POST /orders/{id}/cancel {reason}: cancels it.
- GET /slow: answers after `slow_seconds` (the client usually hangs up first).
- GET /redirect?to=URL: a 302 to URL.
- anything else: 404.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

ORDERS = {
    "A-1001": {"id": "A-1001", "customer": "user-42", "status": "shipped", "total": "49.90", "secret_note": "vip"},
    "B-2002": {"id": "B-2002", "customer": "user-7", "status": "processing", "total": "12.00", "secret_note": "x"},
}


@dataclass
class Seen:
    method: str
    path: str  # as sent, percent-encoding kept
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-cased names
    body: Any
    arrived_at: float = field(default_factory=time.monotonic)
    hung_up_at: float | None = None
    hung_up: asyncio.Event = field(default_factory=asyncio.Event)


class ShopAPI:
    def __init__(self, slow_seconds: float = 30) -> None:
        self.requests: list[Seen] = []
        self.slow_seconds = slow_seconds
        self.cancelled: list[str] = []
        self.arrived = asyncio.Event()
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.url = ""

    # --- in the test's loop, or in a thread --------------------------------------------

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self.url

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def start_in_thread(self) -> str:
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._start_here(ready))
            self._loop.run_forever()
            self._loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ready.wait(5)
        return self.url

    async def _start_here(self, ready: threading.Event) -> None:
        self.arrived = asyncio.Event()
        await self.start()
        ready.set()

    def stop_thread(self) -> None:
        if self._loop is not None:
            asyncio.run_coroutine_threadsafe(self.stop(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(5)

    async def wait_for_request(self, count: int = 1, timeout: float = 5) -> Seen:
        async with asyncio.timeout(timeout):
            while len(self.requests) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return self.requests[count - 1]

    # --- HTTP ------------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._tasks.add(asyncio.current_task())
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    name, value = line.split(":", 1)
                    headers[name.strip().lower()] = value.strip()
            raw = await reader.readexactly(int(headers.get("content-length", 0) or 0))
            parts = urlsplit(target)
            body = json.loads(raw) if raw else None
            seen = Seen(method, parts.path, parse_qs(parts.query), headers, body)
            self.requests.append(seen)
            self.arrived.set()
            status, payload, extra = await self._route(seen, reader)
            if status is None:
                return
            data = json.dumps(payload).encode()
            head_out = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
            head_out += "".join(f"{k}: {v}\r\n" for k, v in extra.items()) + "Connection: close\r\n\r\n"
            writer.write(head_out.encode() + data)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError, ValueError):
            pass
        finally:
            writer.close()
            self._tasks.discard(asyncio.current_task())

    async def _route(self, seen: Seen, reader: asyncio.StreamReader) -> tuple[int | None, Any, dict[str, str]]:
        path = seen.path
        if seen.method == "GET" and path.startswith("/orders/"):
            order = ORDERS.get(path.removeprefix("/orders/"))
            owner = seen.query.get("customer_id", [""])[0]
            if order is None or order["customer"] != owner:
                return 404, {"error": "no such order"}, {}
            return 200, order, {}
        if seen.method == "POST" and path.startswith("/orders/") and path.endswith("/cancel"):
            order_id = path.removeprefix("/orders/").removesuffix("/cancel")
            self.cancelled.append(order_id)
            return 200, {"id": order_id, "status": "cancelled"}, {}
        if path == "/slow":
            # Hold the answer; note when the client hangs up (EOF on the socket).
            try:
                async with asyncio.timeout(self.slow_seconds):
                    await reader.read(1)
                seen.hung_up_at = time.monotonic()
                seen.hung_up.set()
                return None, None, {}
            except TimeoutError:
                return 200, {"slow": True}, {}
        if path == "/redirect":
            return 302, {}, {"Location": seen.query.get("to", ["/"])[0]}
        return 404, {"error": "not found"}, {}
