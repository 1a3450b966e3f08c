"""Kookee as deployed (docs/deploy.md): two daphne processes behind nginx, on
PostgreSQL and the Redis channel layer, with real WebSocket clients.

Each test builds the whole stack in its own event loop:

- two scripted providers (tests/provider.py), one per daphne process: which
  one receives a turn's request tells which process owns the turn;
- a fresh PostgreSQL database, cloned from a template migrated once per
  module (`manage.py migrate`);
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
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import websockets

from tests.provider import DONE, Pause, ScriptedProvider, WaitFor, chunk, finish, text, usage

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
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

timings: dict[str, float] = {}


# --- what the machine must have ---------------------------------------------------------------


def _require(available: Any, what: str) -> None:
    if not available:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs with {what}")
        pytest.skip(f"no {what}")


def _listening(port: int) -> bool:
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


# --- the nginx configuration of docs/deploy.md -------------------------------------------------


def deploy_nginx_block() -> str:
    """The one ```nginx block of docs/deploy.md that starts with # kookee-nginx."""
    blocks = re.findall(r"^```nginx\n(.*?)^```", DEPLOY_DOC.read_text(), re.MULTILINE | re.DOTALL)
    marked = [block for block in blocks if block.lstrip().startswith("# kookee-nginx")]
    assert len(marked) == 1, f"docs/deploy.md must have one ```nginx block starting with # kookee-nginx: {blocks!r}"
    return marked[0]


def _substitute(block: str, old: str, new: str, *, regex: bool = False) -> str:
    pattern = old if regex else re.escape(old)
    replaced, count = re.subn(pattern, lambda _: new, block)
    assert count, f"docs/deploy.md's nginx block no longer has {old!r}: update tests/test_multiprocess.py"
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
    return f"""# Written by tests/test_multiprocess.py around docs/deploy.md's block.
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


# --- the stack -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def template_database():
    """A database migrated once; each test clones it."""
    _require(_listening(5432), "PostgreSQL on 127.0.0.1:5432")
    _require(_listening(6379), "Redis on 127.0.0.1:6379")
    _require(nginx_binary(), "nginx (apt-get install nginx-light)")
    _require(shutil.which("openssl"), "openssl")
    import psycopg

    name = f"kookee_mp_template_{os.getpid()}"
    with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        environment = {**os.environ, "DATABASE_URL": f"{POSTGRES}/{name}"}
        subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "migrate", "-v0"], env=environment, check=True, cwd=ROOT
        )
        yield name
    finally:
        with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


COLLECT_STATIC = (
    "import sys, django; from django.conf import settings; django.setup(); "
    "settings.STATIC_ROOT = sys.argv[1]; "
    "from django.core.management import call_command; "
    "call_command('collectstatic', interactive=False, verbosity=0)"
)


@pytest.fixture(scope="module")
def static_root(tmp_path_factory, template_database):
    """`manage.py collectstatic`, into a directory of the test's (STATIC_ROOT
    is the checkout's staticfiles/ otherwise)."""
    root = tmp_path_factory.mktemp("staticfiles")
    subprocess.run([sys.executable, "-c", COLLECT_STATIC, str(root)], check=True, cwd=ROOT)
    assert (root / "chat" / "chat.js").exists()
    return root


@pytest.fixture(scope="module")
def certificate(tmp_path_factory, template_database):
    """A self-signed certificate for 127.0.0.1, trusted by the test's clients."""
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


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
    while not _listening(port):
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


# --- tabs ------------------------------------------------------------------------------------------


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


# --- scripts ---------------------------------------------------------------------------------------


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


@pytest.fixture
def stack_for(tmp_path, template_database, static_root, certificate):
    def start(**env: str):
        return serve(tmp_path, template_database, static_root, certificate, **env)

    return start


# --- the scenarios ---------------------------------------------------------------------------------


async def test_a_tab_on_the_other_process_follows_the_turn_and_stops_it(stack_for):
    async with stack_for() as stack:
        cookie = await stack.page_load()
        # From 127.0.0.2, with a forged X-Forwarded-For: the app must see 127.0.0.2.
        tab1 = await stack.open_tab(
            cookie, "tab1", headers={"X-Forwarded-For": "203.0.113.9"}, local_addr=("127.0.0.2", 0)
        )
        turn_id, owner, request = await start_turn(stack, tab1, paced(words(400), 0.03))

        tab2 = await stack.open_tab(cookie, "tab2", process=other(owner))
        first = await tab2.wait_for(lambda _: tab2.first_of(turn_id), "turn.started or turn.resume")
        after = first.get("seq", 0)
        await tab2.wait_for(
            lambda _: len([d for d in tab2.deltas(turn_id) if d["seq"] > after]) >= 3, "3 live deltas after joining"
        )

        loop = asyncio.get_running_loop()
        assert not request.hung_up.is_set()
        stop_sent = loop.time()
        await tab2.send({"type": "stop"})
        async with asyncio.timeout(5):
            await request.hung_up.wait()
        timings["a: stop on the other process -> provider hung up (ms)"] = (request.hung_up_at - stop_sent) * 1000
        assert request.hung_up_at - stop_sent < 0.3, f"hung up {request.hung_up_at - stop_sent:.3f} s after the stop"

        ended = [await tab.wait_ended(turn_id) for tab in (tab1, tab2)]
        for frame in ended:
            assert (frame["status"], frame.get("reason")) == ("interrupted", "stopped"), frame
        row = await stack.final_turn(turn_id)
        for tab in (tab1, tab2):
            await tab.history()  # anything still queued for the tab has arrived
            assert tab.seen_text(turn_id) == row["assistant_text"], tab.name
        assert (row["status"], row["interrupted"], row["stop_reason"]) == ("interrupted", True, "stopped")
        assert row["stopped_by"], "stopped_by names the tab that sent the Stop"
        assert row["client_address"] == "127.0.0.2", "X-Forwarded-For through nginx, read from the right"
        [entry] = await stack.ledger(turn_id)
        assert entry["estimated"] is True and ended[0]["usage"]["estimated"] is True
        assert request.hung_up_early


async def test_a_reload_onto_the_other_process_resumes_the_answer(stack_for):
    async with stack_for(KOOKEE_RESUME_GRACE_SECONDS="3") as stack:
        cookie = await stack.page_load()
        pieces = words(120)
        tab1 = await stack.open_tab(cookie, "tab1")
        turn_id, owner, request = await start_turn(stack, tab1, paced(pieces, 0.04), wait_deltas=5)
        await tab1.close()  # the reload: this tab goes...
        closed_at = time.monotonic()
        tab2 = await stack.open_tab(cookie, "tab2", process=other(owner))  # ...and comes back elsewhere
        resume = await tab2.wait_for(lambda _: tab2.first_of(turn_id), "turn.resume")
        timings["b: tab closed -> turn.resume on the other process (ms)"] = (time.monotonic() - closed_at) * 1000
        assert resume["type"] == "turn.resume", resume
        # Tab 1 saw the start of what tab 2 is resumed with.
        before_reload = "".join(d["text"] for d in tab1.deltas(turn_id))
        assert resume["seq"] >= tab1.deltas(turn_id)[-1]["seq"] and resume["text"].startswith(before_reload)

        ended = await tab2.wait_ended(turn_id, timeout=20)
        assert ended["status"] == "completed" and "reason" not in ended, ended
        row = await stack.final_turn(turn_id)
        assert tab2.seen_text(turn_id) == row["assistant_text"] == "".join(pieces)
        assert row["status"] == "completed" and not row["interrupted"] and row["stop_reason"] == ""
        [entry] = await stack.ledger(turn_id)
        assert entry["estimated"] is False
        assert request.finished and not request.hung_up_early


async def test_racing_messages_from_two_processes_start_one_turn(stack_for):
    async with stack_for() as stack:
        cookie = await stack.page_load()
        for _ in range(3):
            await stack.page_load()
        tabs = {name: await stack.open_tab(cookie, f"tab on {name}", process=name) for name in PROCESSES}
        started_ids = []
        for round_ in range(10):
            release = asyncio.Event()
            script = [
                chunk(delta={"role": "assistant", "content": ""}),
                text(f"Round {round_}."),
                WaitFor(release),
                text(" Done."),
                finish("stop"),
                usage(10, 3),
                DONE,
            ]
            before = stack.queue_everywhere(script)
            marks = {name: len(tab.frames) for name, tab in tabs.items()}

            def new(name, kind, marks=marks):
                return [f for f in tabs[name].frames[marks[name] :] if f["type"] == kind]

            def answered(new=new):
                ids = {f["turn_id"] for name in PROCESSES for f in new(name, "turn.started")}
                busy = [name for name in PROCESSES for f in new(name, "error") if f.get("code") == "busy"]
                return (ids, busy) if len(ids) + len(busy) >= 2 else None

            message = {"type": "message", "text": f"question {round_}"}
            await asyncio.gather(*(tab.send(message) for tab in tabs.values()))
            ids, busy = await eventually(answered, timeout=10, what=f"round {round_}: both messages answered")
            assert (len(ids), len(busy)) == (1, 1), f"round {round_}: turns started {ids}, busy to {busy}"
            [turn_id] = ids
            owner, _ = await stack.owner_of_new_request(before)
            assert busy == [other(owner)], f"round {round_}: busy went to {busy}, the turn runs on {owner}"
            streaming = await stack.scalar("select count(*) from chat_turn where status = 'streaming'")
            assert streaming == 1, f"round {round_}: {streaming} streaming turns"

            release.set()
            for tab in tabs.values():
                ended = await tab.wait_ended(turn_id)
                assert ended["status"] == "completed", ended
            started_ids.append(turn_id)

        for tab in tabs.values():
            await tab.history()
            for turn_id in started_ids:
                assert tab.seen_text(turn_id).endswith(" Done."), tab.name
                assert len([f for f in tab.of_turn(turn_id) if f["type"] == "turn.started"]) <= 1
        assert await stack.scalar("select count(*) from chat_turn") == 10
        assert await stack.scalar("select count(*) from chat_turn where status = 'completed'") == 10
        assert await stack.scalar("select count(distinct conversation_id) from chat_turn") == 1
        assert await stack.scalar("select count(*) from billing_ledgerentry") == 10
        # nginx spread the page loads over both processes.
        access = (stack.prefix / "logs" / "kookee-access.log").read_text()
        upstreams = set(re.findall(r'"GET / HTTP/1.1" 200 .* upstream=(\S+)', access))
        assert upstreams == {f"127.0.0.1:{d.port}" for d in stack.daphnes.values()}, access


async def test_turns_at_once_on_both_processes_cannot_pass_a_budget_together(stack_for):
    # One network (nginx's clients all come from 127.0.0.1) may take 10,000
    # tokens; twenty fresh visitors ask at once, ten on each process. Each
    # turn holds its worst case (about 600) from its start, in PostgreSQL:
    # some are refused, and what is billed stays within the budget.
    budget = {
        "KOOKEE_TOKENS_PER_DAY": "100000",
        "KOOKEE_NETWORK_SHARE_OF_DAY": "0.1",
        "KOOKEE_MAX_OUTPUT_TOKENS": "100",
        "KOOKEE_SOCKETS_PER_NETWORK": "1000",
    }
    async with stack_for(**budget) as stack:
        release = asyncio.Event()
        script = [chunk(delta={"role": "assistant", "content": ""}), text("Sure."), WaitFor(release)]
        script += [finish("stop"), usage(480, 100), DONE]
        for provider in stack.providers.values():
            provider.scripts.clear()
            provider.queue(*[script] * 20)
        tabs = [
            await stack.open_tab(await stack.page_load(), f"visitor {n}", process=PROCESSES[n % 2]) for n in range(20)
        ]
        await asyncio.gather(*(tab.send({"type": "message", "text": "one more, please"}) for tab in tabs))
        firsts = [
            (await tab.wait_for(lambda f: [x for x in f if x["type"] in ("turn.started", "error")], "an answer"))[0]
            for tab in tabs
        ]
        release.set()
        started = [(tab, f["turn_id"]) for tab, f in zip(tabs, firsts, strict=True) if f["type"] == "turn.started"]
        for tab, turn_id in started:
            assert (await tab.wait_ended(turn_id))["status"] == "completed"

        assert {f["code"] for f in firsts if f["type"] == "error"} == {"network_budget_exhausted"}
        assert 0 < len(started) < 20
        billed = await stack.scalar("select coalesce(sum(input_tokens + output_tokens), 0) from billing_ledgerentry")
        assert billed <= 10_000
        held = await stack.scalar("select tokens from chat_daybudget where key = 'network:127.0.0.1/32'")
        assert held == billed, "every hold settled to what was billed"


async def test_a_turn_left_by_its_only_tab_stops_after_the_grace_period(stack_for):
    grace = 1.0
    async with stack_for(KOOKEE_RESUME_GRACE_SECONDS=str(grace)) as stack:
        cookie = await stack.page_load()
        tab = await stack.open_tab(cookie, "tab")
        turn_id, _, request = await start_turn(stack, tab, paced(words(1000), 0.02))
        seen = "".join(d["text"] for d in tab.deltas(turn_id))
        left_at = asyncio.get_running_loop().time()
        await tab.close()
        async with asyncio.timeout(grace + 4):
            await request.hung_up.wait()
        after = request.hung_up_at - left_at
        timings["d: last tab left -> provider hung up (s)"] = after
        assert grace - 0.2 <= after <= grace + 1.0, f"hung up {after:.2f} s after the last tab left"

        row = await stack.final_turn(turn_id)
        assert (row["status"], row["interrupted"], row["stop_reason"]) == ("interrupted", True, "left")
        assert row["assistant_text"].startswith(seen) and len(row["assistant_text"]) > len(seen), (
            "the turn ran on during the grace period"
        )
        [entry] = await stack.ledger(turn_id)
        assert entry["estimated"] is True


async def test_a_killed_owner_is_closed_by_a_survivor_and_its_watchers_told(stack_for):
    stale, sweep = 2.0, 1.0
    env = {
        "KOOKEE_CHECKPOINT_SECONDS": "0.5",
        "KOOKEE_STALE_TURN_SECONDS": str(stale),
        "KOOKEE_SWEEP_SECONDS": str(sweep),
    }
    async with stack_for(**env) as stack:
        cookie = await stack.page_load()
        tab1 = await stack.open_tab(cookie, "tab1")
        turn_id, owner, _ = await start_turn(stack, tab1, paced(words(3000), 0.02))
        survivor = other(owner)
        tab2 = await stack.open_tab(cookie, "watcher", process=survivor)
        first = await tab2.wait_for(lambda _: tab2.first_of(turn_id), "turn.started or turn.resume")
        await tab2.wait_for(
            lambda _: len([d for d in tab2.deltas(turn_id) if d["seq"] > first.get("seq", 0)]) >= 3, "live deltas"
        )
        await eventually(
            lambda: _checkpointed(stack, turn_id), timeout=5, what="a checkpoint of the running turn's text"
        )

        victim = stack.daphnes[owner].process
        killed_at = time.monotonic()
        victim.send_signal(signal.SIGKILL)
        await asyncio.to_thread(victim.wait, 10)

        row = await stack.final_turn(turn_id, timeout=stale + sweep + 5)
        closed_after = time.monotonic() - killed_at
        timings["e: SIGKILL -> turn closed by the survivor's sweeper (s)"] = closed_after
        assert closed_after <= stale + sweep + 1.0, f"closed {closed_after:.2f} s after the kill"
        assert (row["status"], row["interrupted"], row["stop_reason"]) == ("interrupted", True, "process_lost")
        [entry] = await stack.ledger(turn_id)
        assert entry["estimated"] is True

        ended = await tab2.wait_ended(turn_id, timeout=5)
        timings["e: SIGKILL -> watcher's turn.ended (s)"] = time.monotonic() - killed_at
        assert (ended["status"], ended.get("reason")) == ("interrupted", "process_lost"), ended
        # The watcher saw more than the last checkpoint: the stored text is a prefix of it.
        seen = tab2.seen_text(turn_id)
        assert seen.startswith(row["assistant_text"]) and row["assistant_text"], (seen[:80], row["assistant_text"])

        # The tab on the dead process lost its socket; a new one reaches the survivor through nginx.
        await tab1.wait_for(lambda _: tab1.closed, "its socket closed", timeout=10)
        tab3 = await stack.open_tab(cookie, "reconnected")
        history = await tab3.history()
        [stored] = [t for t in history["turns"] if t["turn_id"] == turn_id]
        assert stored["status"] == "interrupted"


async def _checkpointed(stack: Stack, turn_id: int) -> bool:
    row = await stack.turn(turn_id)
    return bool(row["assistant_text"])


async def test_sigterm_stops_the_owners_turn_for_every_tab_and_nginx_moves_on(stack_for):
    """A rolling restart, as docs/deploy.md describes it."""
    async with stack_for() as stack:
        cookie = await stack.page_load()
        tab1 = await stack.open_tab(cookie, "tab1")
        turn_id, owner, request = await start_turn(stack, tab1, paced(words(1000), 0.02))
        tab2 = await stack.open_tab(cookie, "watcher", process=other(owner))
        await tab2.wait_for(lambda _: tab2.first_of(turn_id), "turn.started or turn.resume")

        process = stack.daphnes[owner].process
        process.terminate()
        assert await asyncio.to_thread(process.wait, 25) == 0
        for tab in (tab1, tab2):
            ended = await tab.wait_ended(turn_id)
            assert (ended["status"], ended.get("reason")) == ("interrupted", "shutdown"), (tab.name, ended)
        row = await stack.final_turn(turn_id)
        assert (row["status"], row["stop_reason"]) == ("interrupted", "shutdown")
        assert len(await stack.ledger(turn_id)) == 1
        assert request.hung_up_early
        await tab2.history()
        for tab in (tab1, tab2):
            assert tab.seen_text(turn_id) == row["assistant_text"], tab.name

        # The page reconnects through nginx, which passes it to the process still up.
        tab3 = await stack.open_tab(cookie, "reconnected")
        history = await tab3.history()
        assert [t["status"] for t in history["turns"] if t["turn_id"] == turn_id] == ["interrupted"]


async def test_nginx_serves_static_files_and_health_and_hides_metrics(stack_for):
    async with stack_for() as stack:
        status, headers, body = await asyncio.to_thread(stack.request, "/static/chat/chat.js")
        assert status == 200 and body == (stack.static / "chat" / "chat.js").read_bytes()
        assert "max-age=60" in headers["Cache-Control"] and headers["Access-Control-Allow-Origin"] == "*"

        status, headers, body = await asyncio.to_thread(stack.request, "/healthz")
        assert status == 200, body
        assert headers["Content-Type"].startswith("application/json"), headers
        json.loads(body)

        for path in ("/metrics", "/metrics/", "/metrics?x=1"):
            status, _, _ = await asyncio.to_thread(stack.request, path)
            assert status == 403, path

        status, headers, _ = await asyncio.to_thread(stack.request, "/?x=1", tls=False)
        assert status == 301 and headers["Location"] == "https://127.0.0.1/?x=1"


@pytest.fixture(scope="module", autouse=True)
def report_timings():
    yield
    if timings:
        print("\n" + "\n".join(f"{name}: {value:.1f}" for name, value in timings.items()))


# --- a person answers, across the two processes ------------------------------------------------------

SUPPORT_PASSWORD = "a-support-password"


async def _support_user(stack: Stack) -> None:
    """Ana, a member of Support, made as `manage.py` would, in the stack's database."""
    code = (
        "from django.contrib.auth.models import Group, User; "
        f"u = User.objects.create_user('ana', 'ana@example.com', '{SUPPORT_PASSWORD}', is_staff=True, "
        "first_name='Ana', last_name='Souza'); u.groups.add(Group.objects.get(name='Support'))"
    )
    # The servers' own settings (and so their password hasher).
    environment = {**os.environ, **BASE_ENV, "DATABASE_URL": f"{POSTGRES}/{stack.db.info.dbname}"}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "manage.py",
        "shell",
        "-c",
        code,
        cwd=ROOT,
        env=environment,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate()
    assert process.returncode == 0, output.decode()


def _signed_reply(stack: Stack, handoff_id: int, body: dict, secret: str, process: str) -> tuple[int, dict]:
    import hashlib
    import hmac

    # Signed as a helpdesk signs it (docs/operations.md): the time, the method, the path as requested, the body.
    raw, path, t = json.dumps(body).encode(), f"/api/handoffs/{handoff_id}/messages", int(time.time())
    signature = f"t={t},v1=" + hmac.new(secret.encode(), f"{t}.POST.{path}.".encode() + raw, hashlib.sha256).hexdigest()
    connection = http.client.HTTPSConnection("127.0.0.1", stack.https_port, context=stack.ssl, timeout=20)
    try:
        headers = {"Content-Type": "application/json", "X-Kookee-Signature": signature, "X-Kookee-Process": process}
        connection.request("POST", path, body=raw, headers=headers)
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        connection.close()


async def _open_widget(page, site: str):
    from playwright.async_api import expect

    await page.goto(site)
    await page.get_by_role("button", name="Help", exact=True).click()
    frame = page.frame_locator("iframe[title='Kookee help chat']")
    await expect(frame.locator("#send")).to_be_enabled(timeout=15_000)  # connected
    return frame


async def _say(frame, text: str) -> None:
    await frame.locator("#text").fill(text)
    await frame.locator("#text").press("Enter")


async def test_support_answers_the_visitor_across_processes_in_chromium(stack_for):
    """The visitor's widget (on a customer's page) on process A, Support's
    admin on process B, both in Chromium: the claim and the reply reach the
    open widget at once and stay after a reload; the visitor's answer reaches
    the request's page and the helpdesk's webhook, not the model; a
    helpdesk's signed reply, posted to either process, reaches the widget too."""
    from http.server import ThreadingHTTPServer

    from playwright.async_api import async_playwright, expect

    from tests.chat.test_handoffs import Receiver
    from tests.e2e.test_widget import _HostPage

    _require(shutil.which("/usr/bin/chromium"), "Debian's Chromium")
    secret = "helpdesk-secret"
    helpdesk = Receiver()
    webhook = await helpdesk.start()
    customer = ThreadingHTTPServer(("127.0.0.1", 0), _HostPage)
    threading.Thread(target=customer.serve_forever, daemon=True).start()
    site = f"http://127.0.0.1:{customer.server_address[1]}"
    env = {"KOOKEE_HANDOFF_WEBHOOK": webhook, "KOOKEE_HANDOFF_WEBHOOK_SECRET": secret, "KOOKEE_EMBED_ORIGINS": site}
    try:
        async with stack_for(**env) as stack, async_playwright() as playwright:
            _HostPage.kookee = stack.origin
            await _support_user(stack)
            browser = await playwright.chromium.launch(
                executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"]
            )
            contexts = {}
            for process in PROCESSES:
                contexts[process] = await browser.new_context(
                    ignore_https_errors=True, extra_http_headers={"X-Kookee-Process": process}
                )
            visitor, support = await contexts["a"].new_page(), await contexts["b"].new_page()

            # The visitor, in the widget on process A, asks, then asks for a person.
            stack.queue_everywhere([text("I am not sure; a person can help."), finish("stop"), DONE])
            widget = await _open_widget(visitor, site)
            await _say(widget, "Why was I charged twice?")
            await expect(widget.get_by_text("a person can help.")).to_be_visible(timeout=15_000)
            await widget.get_by_role("button", name="Talk to a person").click()
            dialog = widget.get_by_role("dialog", name="Talk to a person")
            await dialog.get_by_role("button", name="Ask for a person").click()
            await expect(dialog).to_be_hidden()
            handoff_id = await eventually(
                lambda: stack.scalar("select max(id) from chat_handoff"), timeout=10, what="the request"
            )
            await helpdesk.wait_for(1)  # handoff.requested

            # Support, on process B: log in, open the request, reply.
            await support.goto(f"{stack.origin}/admin/login/")
            await support.get_by_label("Username").fill("ana")
            await support.get_by_label("Password").fill(SUPPORT_PASSWORD)
            await support.get_by_role("button", name="Log in").click()
            await expect(support).not_to_have_url(re.compile("/login/"))
            await support.goto(f"{stack.origin}/admin/chat/handoff/{handoff_id}/change/")
            await support.get_by_label("Reply to the visitor").fill("Hi, I am Ana. I refunded the second charge.")
            await support.get_by_role("button", name="Send to the visitor").click()
            await expect(support.get_by_text("Sent to the visitor.")).to_be_visible()

            # At once in the open widget, with who answers; and after a reload.
            started = time.monotonic()
            await expect(widget.get_by_text("I refunded the second charge.")).to_be_visible(timeout=5_000)
            timings["support reply -> shown in the widget on the other process (ms)"] = (
                time.monotonic() - started
            ) * 1000
            await expect(widget.get_by_text("Ana Souza").first).to_be_visible()
            widget = await _open_widget(visitor, site)
            await expect(widget.get_by_text("I refunded the second charge.")).to_be_visible(timeout=10_000)

            # The visitor answers: to Ana, live on her page, to the helpdesk, not to the model.
            before = {name: len(provider.requests) for name, provider in stack.providers.items()}
            await _say(widget, "Thank you, Ana!")
            await expect(support.get_by_text("Thank you, Ana!")).to_be_visible(timeout=10_000)
            event = await helpdesk.wait_for(2)
            assert event.json["event"] == "handoff.message" and event.json["message"]["text"] == "Thank you, Ana!"
            assert {name: len(provider.requests) for name, provider in stack.providers.items()} == before
            assert await stack.scalar("select count(*) from chat_turn") == 1

            # A helpdesk's signed reply, through either process, reaches the widget at once.
            body = {"text": "Zendesk here: anything else?", "author": "Kim", "message_id": "zd-1"}
            for process in PROCESSES:  # the same message on both (a retry): one message
                status, answered = await asyncio.to_thread(_signed_reply, stack, handoff_id, body, secret, process)
                assert status == 201, answered
            await expect(widget.get_by_text("Zendesk here: anything else?")).to_have_count(1, timeout=5_000)
            assert await stack.scalar("select count(*) from chat_message where kind = 'agent'") == 2
            await browser.close()
    finally:
        customer.shutdown()
        customer.server_close()
        await helpdesk.stop()
