"""Real servers for tests: the app under daphne, in its own process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
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
    """Migrates a fresh SQLite database (or the one a previous server in
    tmp_path left) and serves the app with daphne (or uvicorn), on `port` or
    a free one."""
    database = tmp_path / "db.sqlite3"
    environment = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{database}",
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "OPENAI_API_KEY": "",
        "OPENAI_BASE_URL": "",
        **env,
    }
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "-v0"], env=environment, check=True, cwd=ROOT)
    subprocess.run([*manage, "load_demo_help_center"], env=environment, check=True, cwd=ROOT, capture_output=True)
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
            # (chat/lifecycle.py, 15 s) on a loaded machine: wait past it.
            process.wait(timeout=SHUTDOWN_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()  # never left running into the next test
            process.wait(timeout=10)
            raise


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
