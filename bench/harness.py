"""What the benches share: the provider process, server processes, the load
client, and readings of a process's CPU and memory.

Servers run as an operator would run them: DEBUG off, a real secret, behind
a trusted proxy (the load client sends each visitor's own X-Forwarded-For),
and limits raised only where one load client asking back to back would
(rightly) be refused as one abusive visitor.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.servers import _wait_until_listening, free_port  # noqa: E402

PYTHON = sys.executable
RESULTS = ROOT / "bench" / "results"

# The operator's workload: help questions, each one a search and an answer.
QUESTIONS = [
    "How do I install the feedback widget on my website?",
    "How do I get a refund?",
    "Can I use SAML single sign-on with Okta?",
    "How do webhooks work?",
    "How do I export my data?",
    "How do I change my plan?",
]

SERVER_ENV = {
    "DJANGO_DEBUG": "false",
    "DJANGO_SECRET_KEY": "kookee-bench-only-" + "0123456789abcdef" * 4,
    "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
    "DJANGO_SECURE_SSL_REDIRECT": "false",
    "KOOKEE_TRUSTED_PROXIES": "127.0.0.1",
    # The clients play browsers behind a TLS proxy on 443: the socket's
    # Origin is this site's (chat/visitors/origins.py).
    "KOOKEE_SITE_URL": "https://127.0.0.1",
    # A visitor of the load client asks back to back, for minutes.
    "KOOKEE_TURNS_PER_MINUTE": "100000",
    "KOOKEE_TOKENS_PER_VISITOR_PER_DAY": "1000000000",
    "KOOKEE_TOKENS_PER_CONVERSATION": "1000000000",
    "KOOKEE_TOKENS_PER_DAY": "100000000000",
    "KOOKEE_SOCKETS_PER_NETWORK": "100000",
    "KOOKEE_TURNS_PER_MINUTE_PER_ADDRESS": "100000",
    "KOOKEE_HISTORY_TURNS": "4",
}


REDIS_URL = "redis://127.0.0.1:6379/15"
POSTGRES = "postgres://postgres@127.0.0.1:5432"


@contextmanager
def fresh_postgres(name: str):
    """A new, empty PostgreSQL database for one bench; yields its URL."""
    import psycopg

    with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{POSTGRES}/{name}"
    finally:
        with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@contextmanager
def provider(ttft_ms: float = 300, tokens_per_second: float = 40, *options: str):
    """The local OpenAI-compatible provider process; yields its base URL."""
    port = free_port()
    command = [PYTHON, str(ROOT / "bench" / "provider.py"), "--port", str(port), "--ttft-ms", str(ttft_ms)]
    command += ["--tokens-per-second", str(tokens_per_second), *options]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL)
    try:
        _wait_until_listening(port, process)
        yield f"http://127.0.0.1:{port}", process
    finally:
        process.terminate()
        process.wait(timeout=10)


def provider_stats(base_url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{base_url}/stats") as response:
        return json.loads(response.read())["requests"]


def reset_provider(base_url: str) -> None:
    urllib.request.urlopen(urllib.request.Request(f"{base_url}/reset", method="POST")).read()


def migrate(env: dict[str, str]) -> None:
    manage = [PYTHON, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "-v0"], env=env, check=True, cwd=ROOT)
    subprocess.run([*manage, "load_demo_help_center"], env=env, check=True, cwd=ROOT, capture_output=True)


def server_env(database_url: str, provider_url: str, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        **SERVER_ENV,
        "DATABASE_URL": database_url,
        "OPENAI_BASE_URL": f"{provider_url}/v1",
        "OPENAI_API_KEY": "bench",
        "OPENAI_MODEL": "gpt-4o-mini",
        **extra,
    }


SERVERS = {
    "daphne": lambda port: ["-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "bench.relay:application"],
    "uvicorn": lambda port: [
        "-m",
        "uvicorn",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--lifespan",
        "on",
        "--log-level",
        "warning",
        "--no-access-log",
        "bench.relay:application",
    ],
}


@contextmanager
def servers(env: dict[str, str], count: int = 1, kind: str = "daphne", extra_args: tuple[str, ...] = ()):
    """`count` server processes of the app (and the bare relay); yields
    their addresses and processes."""
    ports = [free_port() for _ in range(count)]
    processes = [
        subprocess.Popen(
            [PYTHON, *SERVERS[kind](port), *extra_args],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for port in ports
    ]
    try:
        for port, process in zip(ports, processes, strict=True):
            _wait_until_listening(port, process)
        yield [f"127.0.0.1:{port}" for port in ports], processes
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)


def session_of(set_cookies: list[str]) -> str:
    """The session cookie among a response's: `__Host-sessionid` as
    production names it, `sessionid` under DEBUG."""
    return next(c.split(";")[0] for c in set_cookies if c.startswith(("sessionid=", "__Host-sessionid=")))


def record_scripts(address: str, path: Path) -> None:
    """Asks each question once as one visitor and saves the frames the app
    sent, with the pause before each, for the bare relay to replay."""
    request = urllib.request.Request(
        f"http://{address}/", headers={"X-Forwarded-Proto": "https", "X-Forwarded-For": "10.255.0.1"}
    )
    with urllib.request.urlopen(request) as response:
        cookie = session_of(response.headers.get_all("Set-Cookie"))
    path.write_text(json.dumps(asyncio.run(_record(address, cookie))))


async def _record(address: str, cookie: str) -> dict[str, list]:
    import websockets

    headers = {"Cookie": cookie, "X-Forwarded-For": "10.255.0.1"}
    scripts = {}
    async with websockets.connect(
        f"ws://{address}/ws/chat/", origin="https://127.0.0.1", additional_headers=headers, compression=None
    ) as socket:
        for question in QUESTIONS:
            await socket.send(json.dumps({"type": "message", "text": question}))
            last = time.perf_counter()
            frames = []
            while True:
                frame = json.loads(await socket.recv())
                now = time.perf_counter()
                frame.pop("turn_id", None)
                frames.append([round(now - last, 4), frame])
                last = now
                if frame["type"] == "turn.ended":
                    break
            scripts[question] = frames
    return scripts


def run_client(config: dict[str, Any], on_window=None) -> dict[str, Any]:
    """Runs the Node.js load client; calls on_window("start"/"end") as its
    measuring window opens and closes; returns its results."""
    process = subprocess.Popen(
        ["node", "--experimental-websocket", "--no-warnings", str(ROOT / "bench" / "client.mjs"), json.dumps(config)],
        stdout=subprocess.PIPE,
        text=True,
    )
    result = None
    for line in process.stdout:
        line = line.strip()
        if line.startswith("window "):
            if on_window:
                on_window(line.split()[1])
        elif line.startswith("{"):
            result = json.loads(line)
    process.wait()
    if result is None:
        raise RuntimeError("the load client printed no results")
    result["clientPid"] = process.pid
    return result


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def save(name: str, data: Any) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=1))
    return path
