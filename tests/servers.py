"""Real servers for tests: the app under daphne, in its own process."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


SHUTDOWN_SECONDS = 30


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


SERVERS = {
    "daphne": lambda port: ["-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "kookee.asgi:application"],
    # Lifespan on: a start-up that fails must stop the server, not be skipped.
    "uvicorn": lambda port: (
        ["-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port), "--lifespan", "on", "kookee.asgi:application"]
    ),
}


@contextmanager
def daphne(tmp_path: Path, port: int | None = None, server: str = "daphne", **env: str):
    """Serves the app with daphne (or uvicorn), on `port` or a free one, on a
    fresh SQLite database with the demo help center (or the one a previous
    server in tmp_path left), or on the DATABASE_URL given."""
    database = tmp_path / "db.sqlite3"
    environment = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{database}",
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "OPENAI_API_KEY": "",
        "OPENAI_BASE_URL": "",
        **env,
    }
    if environment["DATABASE_URL"] == f"sqlite:///{database}":
        if not database.exists():
            shutil.copyfile(_template(), database)
    else:
        _migrate(environment)
    port = port or free_port()
    process = subprocess.Popen(
        [sys.executable, *SERVERS[server](port)],
        env=environment,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_until_listening(port, process)
        yield f"127.0.0.1:{port}", database, process
    finally:
        process.terminate()
        try:
            # The app's own shutdown may take its connections' grace
            # (chat/engine/lifecycle.py, 15 s) on a loaded machine: wait past it.
            process.wait(timeout=SHUTDOWN_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()  # never left running into the next test
            process.wait(timeout=10)
            raise


_templates: list[Path] = []


def _template() -> Path:
    """A database migrated and loaded with the demo help center, made once
    per test run: each server's is a copy (migrating took 4 s and loading 2 s,
    for each of the seventy-odd servers the tests start)."""
    if not _templates:
        folder = Path(tempfile.mkdtemp(prefix="kookee-template-"))
        atexit.register(shutil.rmtree, folder, True)
        database = folder / "db.sqlite3"
        _migrate({**os.environ, "DATABASE_URL": f"sqlite:///{database}", "OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""})
        # One file: no write-ahead log left beside it to copy.
        with sqlite3.connect(database) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            db.execute("PRAGMA journal_mode=DELETE")
        _templates.append(database)
    return _templates[0]


def _migrate(environment: dict[str, str]) -> None:
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "-v0"], env=environment, check=True, cwd=ROOT)
    subprocess.run([*manage, "load_demo_help_center"], env=environment, check=True, cwd=ROOT, capture_output=True)


def _wait_until_listening(port: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, "daphne exited"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError("daphne did not start")


@contextmanager
def sites(handler: type, count: int):
    """`count` plain HTTP servers on loopback, each its own origin (a
    customer's site, say), answering with `handler`: their origins."""
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), handler) for _ in range(count)]
    for server in servers:
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield [f"http://127.0.0.1:{server.server_address[1]}" for server in servers]
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
