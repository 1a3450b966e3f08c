"""Kookee as deployed (docs/deploy.md): two daphne processes behind nginx, on
PostgreSQL and the Redis channel layer, with real WebSocket clients: the
stack the tests of this package run on (its fixtures are conftest.py's).

Each test builds the whole stack in its own event loop:

- two scripted providers (tests/provider.py), one per daphne process: which
  one receives a turn's request tells which process owns the turn;
- a fresh PostgreSQL database, cloned from a template migrated once for
  the package (`manage.py migrate`);
- Redis database 13 (flushed before and after);
- daphne processes A and B on those, their output in tmp_path, printed when
  a test fails;
- nginx serving the `# kookee-nginx` block of docs/deploy.md, with its
  placeholders substituted: the daphne ports, a self-signed certificate for
  127.0.0.1, the collected static files, a private prefix for logs and temp
  files; wrapped in a minimal main configuration (`daemon off;`) and run as
  `nginx -c FILE -p PREFIX`.

Placing tabs. Every page load and every tab goes through nginx. Page loads
and each scenario's first tab are left to the upstream (`least_conn`, round
robin among equals); the process that owns the turn is learnt from the
provider that got its request. To put a tab "on the other process", the
test's wrapper adds a `map` on a test-only request header
(`X-Kookee-Process: a` or `b`) and points the block's `proxy_pass
http://kookee;` lines at that map, whose default is the block's own
`kookee` upstream. Nothing else in the block is changed.

Waiting is always polling with a bound; frames are read by a task per tab.
Needs PostgreSQL and Redis on 127.0.0.1 and nginx: skipped without them,
except under CI=true, where they fail.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import re
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import websockets

from tests.provider import DONE, Pause, ScriptedProvider, chunk, finish, text, usage

ROOT = Path(__file__).resolve().parent.parent.parent
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
POSTGRES = "postgres://postgres@127.0.0.1:5432"
REDIS_URL = "redis://127.0.0.1:6379/13"
PROCESSES = ("a", "b")

# What the stack is started with unless a test says otherwise.
BASE_ENV = {
    "OPENAI_API_KEY": "test-key",
    "OPENAI_MODEL": "test-model",
    "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
    "KOOKEE_TRUSTED_PROXIES": "127.0.0.1",
    # A request with no script left gets a 500: fail the turn at once.
    "KOOKEE_PROVIDER_RETRIES": "0",
    # The race scenario starts a turn every second or so from one visitor.
    "KOOKEE_TURNS_PER_MINUTE": "1000",
    "KOOKEE_TURNS_PER_MINUTE_PER_ADDRESS": "1000",
    "KOOKEE_RESUME_GRACE_SECONDS": "3",
    "PYTHONUNBUFFERED": "1",
}

# What the scenarios measured, printed at the end (conftest.py's report_timings).
timings: dict[str, float] = {}


# --- what the machine must have -------------------------------------------------------------------


def require(available: Any, what: str) -> None:
    if not available:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs with {what}")
        pytest.skip(f"no {what}")


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def nginx_binary() -> str | None:
    found = shutil.which("nginx")
    if found:
        return found
    return "/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- the nginx configuration of docs/deploy.md ----------------------------------------------------


def deploy_nginx_block() -> str:
    """The one ```nginx block of docs/deploy.md that starts with # kookee-nginx."""
    blocks = re.findall(r"^```nginx\n(.*?)^```", DEPLOY_DOC.read_text(), re.MULTILINE | re.DOTALL)
    marked = [block for block in blocks if block.lstrip().startswith("# kookee-nginx")]
    assert len(marked) == 1, f"docs/deploy.md must have one ```nginx block starting with # kookee-nginx: {blocks!r}"
    return marked[0]


def _substitute(block: str, old: str, new: str, *, regex: bool = False) -> str:
    pattern = old if regex else re.escape(old)
    replaced, count = re.subn(pattern, lambda _: new, block)
    assert count, f"docs/deploy.md's nginx block no longer has {old!r}: update tests/multiprocess/stack.py"
    return replaced


def nginx_config(
    *, prefix: Path, daphne_ports: dict[str, int], https_port: int, http_port: int, cert: Path, key: Path, static: Path
) -> str:
    """The deploy guide's block with its placeholders filled in, inside a
    minimal main configuration of the test's own."""
    block = deploy_nginx_block()
    block = _substitute(block, "server 127.0.0.1:8001;", f"server 127.0.0.1:{daphne_ports['a']};")
    block = _substitute(block, "server 127.0.0.1:8002;", f"server 127.0.0.1:{daphne_ports['b']};")
    block = _substitute(block, "listen 443 ssl;", f"listen 127.0.0.1:{https_port} ssl;")
    block = _substitute(block, "listen 80;", f"listen 127.0.0.1:{http_port};")
    block = _substitute(block, r"ssl_certificate\s+\S+;", f"ssl_certificate {cert};", regex=True)
    block = _substitute(block, r"ssl_certificate_key\s+\S+;", f"ssl_certificate_key {key};", regex=True)
    block = _substitute(block, "/srv/kookee/staticfiles/", f"{static}/")
    block = _substitute(block, "/var/log/nginx/", f"{prefix}/logs/")
    block = _substitute(block, "proxy_pass http://kookee;", "proxy_pass http://$kookee_test_upstream;")
    user = "user root;\n" if os.geteuid() == 0 else ""  # workers must read tmp_path
    mime = "include /etc/nginx/mime.types;" if Path("/etc/nginx/mime.types").exists() else ""
    temp = "\n".join(
        f"    {kind}_temp_path {prefix}/temp/{kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    pinned = "\n".join(f"        {name} 127.0.0.1:{port};" for name, port in daphne_ports.items())
    return f"""# Written by tests/multiprocess/stack.py around docs/deploy.md's block.
{user}worker_processes 1;
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/logs/error.log info;
events {{
    worker_connections 1024;
}}
http {{
    {mime}
    default_type application/octet-stream;
    access_log {prefix}/logs/access.log;
{temp}
    # Test only: X-Kookee-Process pins a request to one daphne process;
    # without it, the block's own upstream decides.
    map $http_x_kookee_process $kookee_test_upstream {{
        default kookee;
{pinned}
    }}

{block}
}}
"""


# --- the stack ------------------------------------------------------------------------------------


@dataclass
class Daphne:
    name: str
    port: int
    process: subprocess.Popen
    log: Path


@dataclass
class Stack:
    providers: dict[str, ScriptedProvider]
    daphnes: dict[str, Daphne]
    https_port: int
    http_port: int
    prefix: Path
    static: Path
    ssl: ssl.SSLContext
    db: Any  # psycopg.AsyncConnection to the test's database
    tabs: list[Tab] = field(default_factory=list)

    @property
    def origin(self) -> str:
        return f"https://127.0.0.1:{self.https_port}"

    # -- HTTP and WebSocket, through nginx --

    def request(self, path: str, *, method: str = "GET", headers: dict | None = None, tls: bool = True):
        """One request, redirects not followed: (status, headers, body)."""
        if tls:
            connection = http.client.HTTPSConnection("127.0.0.1", self.https_port, context=self.ssl, timeout=20)
        else:
            connection = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=20)
        try:
            connection.request(method, path, headers=headers or {})
            response = connection.getresponse()
            return response.status, response.headers, response.read()
        finally:
            connection.close()

    async def page_load(self) -> str:
        """GET / through nginx: the session cookie."""
        status, headers, _ = await asyncio.to_thread(self.request, "/")
        assert status == 200
        [session] = [c.split(";")[0] for c in headers.get_all("Set-Cookie") if c.startswith("sessionid=")]
        return session

    async def open_tab(self, cookie: str, name: str, *, process: str | None = None, headers=None, **kwargs) -> Tab:
        """A tab through nginx: on the upstream's choice, or pinned to a process."""
        extra = {"Cookie": cookie, **(headers or {})}
        if process:
            extra["X-Kookee-Process"] = process
        socket_ = await websockets.connect(
            f"wss://127.0.0.1:{self.https_port}/ws/chat/",
            additional_headers=extra,
            origin=self.origin,
            ssl=self.ssl,
            open_timeout=10,
            **kwargs,
        )
        tab = Tab(name, socket_)
        self.tabs.append(tab)
        return tab

    # -- the providers --

    def queue_everywhere(self, script: list) -> dict[str, int]:
        """Queues the script at both providers (whichever process takes the
        message calls its own); returns each one's request count."""
        for provider in self.providers.values():
            provider.scripts.clear()
            provider.queue(script)
        return {name: len(provider.requests) for name, provider in self.providers.items()}

    async def owner_of_new_request(self, before: dict[str, int], timeout: float = 10):
        """The process whose provider got a request since `before`, and that
        request; the other provider's unused script is dropped."""

        def arrived():
            new = [name for name, provider in self.providers.items() if len(provider.requests) > before[name]]
            return new or None

        [owner] = await eventually(arrived, timeout=timeout, what="a provider request")
        for name, provider in self.providers.items():
            if name != owner:
                provider.scripts.clear()
        return owner, self.providers[owner].requests[before[owner]]

    # -- the database, read directly --

    async def turn(self, turn_id: int) -> dict:
        cursor = await self.db.execute(
            "select status, interrupted, stop_reason, stopped_by, assistant_text, error, "
            "host(client_address) as client_address, conversation_id from chat_turn where id = %s",
            [turn_id],
        )
        return await cursor.fetchone()

    async def ledger(self, turn_id: int) -> list[dict]:
        cursor = await self.db.execute(
            "select estimated, input_tokens, output_tokens from billing_ledgerentry where turn_id = %s", [turn_id]
        )
        return await cursor.fetchall()

    async def scalar(self, sql: str, params=()) -> Any:
        cursor = await self.db.execute(sql, params)
        row = await cursor.fetchone()
        return next(iter(row.values()))

    async def final_turn(self, turn_id: int, timeout: float = 10) -> dict:
        return await eventually(
            lambda: _final(self, turn_id), timeout=timeout, what=f"turn {turn_id} saved with its ending"
        )


async def _final(stack: Stack, turn_id: int) -> dict | None:
    row = await stack.turn(turn_id)
    return row if row and row["status"] != "streaming" else None


@asynccontextmanager
async def serve(tmp_path: Path, template: str, static: Path, certificate: tuple[Path, Path], **env: str):
    """The whole deployment, torn down on the way out; its logs are printed
    (and shown by pytest when the test failed)."""
    import psycopg
    import redis
    from psycopg.rows import dict_row

    providers = {name: ScriptedProvider() for name in PROCESSES}
    urls = {name: await provider.start() for name, provider in providers.items()}
    database = f"kookee_mp_{os.getpid()}_{secrets.token_hex(3)}"
    async with await psycopg.AsyncConnection.connect(f"{POSTGRES}/postgres", autocommit=True) as admin:
        await admin.execute(f'CREATE DATABASE "{database}" TEMPLATE "{template}"')
    redis.Redis.from_url(REDIS_URL).flushdb()
    daphnes: dict[str, Daphne] = {}
    nginx: subprocess.Popen | None = None
    prefix = tmp_path / "nginx"
    db = stack = None
    https_port, http_port = free_port(), free_port()
    try:
        for name in PROCESSES:
            environment = {
                **os.environ,
                **BASE_ENV,
                "DATABASE_URL": f"{POSTGRES}/{database}",
                "REDIS_URL": REDIS_URL,
                "OPENAI_BASE_URL": urls[name],
                # nginx passes `Host: $host`, without this test's port: the
                # site's origin is named, as docs/deploy.md says to.
                "KOOKEE_SITE_URL": f"https://127.0.0.1:{https_port}",
                **env,
            }
            daphnes[name] = _start_daphne(name, tmp_path / f"daphne-{name}.log", environment)
        for daphne in daphnes.values():
            await _until_listening(daphne.port, daphne.process, f"daphne {daphne.name}")

        config = nginx_config(
            prefix=prefix,
            daphne_ports={name: daphne.port for name, daphne in daphnes.items()},
            https_port=https_port,
            http_port=http_port,
            cert=certificate[0],
            key=certificate[1],
            static=static,
        )
        nginx = _start_nginx(prefix, config)
        await _until_listening(https_port, nginx, "nginx")

        db = await psycopg.AsyncConnection.connect(f"{POSTGRES}/{database}", autocommit=True, row_factory=dict_row)
        context = ssl.create_default_context(cafile=str(certificate[0]))
        stack = Stack(providers, daphnes, https_port, http_port, prefix, static, context, db)
        yield stack
    finally:
        for tab in stack.tabs if stack else []:
            await tab.close()
        if nginx is not None:
            _stop(nginx)
        for daphne in daphnes.values():
            _stop(daphne.process)
        for provider in providers.values():
            await provider.stop()
        if db is not None:
            await db.close()
        async with await psycopg.AsyncConnection.connect(f"{POSTGRES}/postgres", autocommit=True) as admin:
            await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        redis.Redis.from_url(REDIS_URL).flushdb()
        for daphne in daphnes.values():
            _print_log(f"daphne {daphne.name} (port {daphne.port}, exit {daphne.process.returncode})", daphne.log)
        _print_log("nginx error.log", prefix / "logs" / "error.log")
        _print_log("nginx access", prefix / "logs" / "kookee-access.log")


def _start_daphne(name: str, log: Path, environment: dict[str, str]) -> Daphne:
    port = free_port()
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "kookee.asgi:application"],
            env=environment,
            cwd=ROOT,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    return Daphne(name, port, process, log)


def _start_nginx(prefix: Path, config: str) -> subprocess.Popen:
    """`nginx -c FILE -p PREFIX`, in the foreground (daemon off), after `nginx -t`."""
    for directory in ("logs", "temp"):
        (prefix / directory).mkdir(parents=True)
    path = prefix / "nginx.conf"
    path.write_text(config)
    command = [nginx_binary(), "-e", str(prefix / "logs" / "error.log"), "-p", f"{prefix}/", "-c", str(path)]
    checked = subprocess.run([*command, "-t"], capture_output=True, text=True)
    assert checked.returncode == 0, f"nginx -t:\n{checked.stderr}\n{config}"
    with (prefix / "logs" / "nginx.out").open("wb") as output:
        return subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=25)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _print_log(title: str, path: Path) -> None:
    if path.exists():
        lines = path.read_text(errors="replace").splitlines()
        print(f"----- {title}: {len(lines)} lines, the last 150 -----")
        print("\n".join(lines[-150:]))


async def _until_listening(port: int, process: subprocess.Popen, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not listening(port):
        assert process.poll() is None, f"{what} exited with {process.returncode}"
        assert time.monotonic() < deadline, f"{what} did not listen on {port} within {timeout}s"
        await asyncio.sleep(0.05)


async def eventually(probe: Callable[[], Any], *, timeout: float, what: str, every: float = 0.05) -> Any:
    """Polls `probe` (sync or async) until it returns something truthy, for at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s (last: {value!r})")
        await asyncio.sleep(every)


# --- tabs -----------------------------------------------------------------------------------------


class Tab:
    """A browser tab: a WebSocket and every frame it received, read by a task."""

    def __init__(self, name: str, socket_) -> None:
        self.name = name
        self.socket = socket_
        self.frames: list[dict] = []
        self.closed: websockets.ConnectionClosed | None = None
        self._changed = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for raw in self.socket:
                self.frames.append(json.loads(raw))
                self._changed.set()
        except websockets.ConnectionClosed as closed:
            self.closed = closed
        finally:
            if self.closed is None:
                self.closed = websockets.ConnectionClosedOK(None, None)
            self._changed.set()

    async def send(self, frame: dict) -> None:
        await self.socket.send(json.dumps(frame))

    async def close(self) -> None:
        await self.socket.close()
        await asyncio.wait({self._reader}, timeout=5)

    async def wait_for(self, predicate: Callable[[list[dict]], Any], what: str, timeout: float = 10) -> Any:
        try:
            async with asyncio.timeout(timeout):
                while True:
                    self._changed.clear()
                    if result := predicate(self.frames):
                        return result
                    if self.closed is not None:
                        raise AssertionError(f"{self.name} closed ({self.closed}) before {what}")
                    await self._changed.wait()
        except TimeoutError:
            raise AssertionError(f"{self.name}: {what} not seen within {timeout} s; frames: {self.frames}") from None

    # -- reading a turn's frames --

    def of_turn(self, turn_id: int) -> list[dict]:
        return [frame for frame in self.frames if frame.get("turn_id") == turn_id]

    def deltas(self, turn_id: int) -> list[dict]:
        return [frame for frame in self.of_turn(turn_id) if frame["type"] == "delta"]

    def ended(self, turn_id: int) -> list[dict]:
        return [frame for frame in self.of_turn(turn_id) if frame["type"] == "turn.ended"]

    def first_of(self, turn_id: int) -> dict | None:
        frames = [f for f in self.of_turn(turn_id) if f["type"] in ("turn.started", "turn.resume")]
        return frames[0] if frames else None

    async def wait_ended(self, turn_id: int, timeout: float = 10) -> dict:
        return (await self.wait_for(lambda _: self.ended(turn_id), f"turn.ended of turn {turn_id}", timeout))[0]

    async def history(self) -> dict:
        """A history round trip: every frame the server queued for this tab
        before it has arrived."""
        count = len([f for f in self.frames if f["type"] == "history"])
        await self.send({"type": "history"})
        frames = await self.wait_for(
            lambda frames: [f for f in frames if f["type"] == "history"][count:], "the history answer"
        )
        return frames[0]

    def seen_text(self, turn_id: int) -> str:
        """The answer as this tab received it, checked frame by frame: it
        starts with turn.started (seq from 1) or turn.resume (seq after its
        own), `delta`/`tool` seqs follow with no gap or repeat, exactly one
        turn.ended comes last, and nothing of the turn follows it."""
        frames = self.of_turn(turn_id)
        assert frames and frames[0]["type"] in ("turn.started", "turn.resume"), f"{self.name}: {frames[:3]}"
        seen, last = "", 0
        ended = 0
        for frame in frames:
            assert not ended, f"{self.name}: a frame after turn.ended: {frame}"
            kind = frame["type"]
            if kind == "turn.resume":
                # The first frame, or a fresh resume after a gap: it must agree with what came.
                assert frame["seq"] >= last and frame["text"].startswith(seen), f"{self.name}: {frame} after {seen!r}"
                seen, last = frame["text"], frame["seq"]
            elif kind in ("delta", "tool"):
                assert frame["seq"] == last + 1, f"{self.name}: seq {frame['seq']} after {last}: {frames}"
                last = frame["seq"]
                if kind == "delta":
                    seen += frame["text"]
            elif kind == "turn.ended":
                ended += 1
        assert ended == 1, f"{self.name}: {ended} turn.ended for turn {turn_id}"
        return seen


# --- scripts --------------------------------------------------------------------------------------


def words(count: int) -> list[str]:
    return [f"w{i} " for i in range(count)]


def paced(pieces: list[str], every: float) -> list:
    """An answer streamed a piece every `every` seconds, then usage and [DONE]."""
    steps: list = [chunk(delta={"role": "assistant", "content": ""})]
    for piece in pieces:
        steps += [text(piece), Pause(every)]
    return [*steps, finish("stop"), usage(12, len(pieces)), DONE]


async def start_turn(stack: Stack, tab: Tab, script: list, question: str = "hi", *, wait_deltas: int = 3):
    """Sends a message from the tab: (turn_id, owning process, its provider request)."""
    before = stack.queue_everywhere(script)
    count = len([f for f in tab.frames if f["type"] == "turn.started"])
    await tab.send({"type": "message", "text": question})
    started = await tab.wait_for(
        lambda frames: [f for f in frames if f["type"] in ("turn.started", "error")][count:], "turn.started"
    )
    assert started[0]["type"] == "turn.started", started
    turn_id = started[0]["turn_id"]
    owner, request = await stack.owner_of_new_request(before)
    if wait_deltas:
        await tab.wait_for(lambda _: len(tab.deltas(turn_id)) >= wait_deltas, f"{wait_deltas} deltas")
    return turn_id, owner, request


def other(process: str) -> str:
    return "b" if process == "a" else "a"
