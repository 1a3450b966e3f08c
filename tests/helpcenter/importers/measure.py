"""An import run as an operator runs it, in a child process (`manage.py
import_help_center ... --no-embed` on a fresh SQLite database), and what it
cost: the child's own peak RSS (os.wait4's rusage, for that child alone)
and its wall time. tests/helpcenter/importers/test_bounds.py and
bench/hostile_sources.py measure with it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Cost:
    peak_rss_mb: float
    seconds: float
    returncode: int  # negative: killed (by the time limit)
    output: str

    @property
    def killed(self) -> bool:
        return self.returncode < 0


class Importer:
    """Runs imports in child processes, each on its own copy of one migrated
    database in `folder` (so one run's articles are not the next one's)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.runs = 0
        self._migrated = folder / "migrated.sqlite3"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "KOOKEE_", "DATABASE_"))}
        self.env.update(
            DJANGO_SETTINGS_MODULE="kookee.settings",
            DJANGO_DEBUG="true",
            # A key of its own: DEBUG without one would write .secret_key into the checkout.
            DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
            KOOKEE_IMPORT_ALLOW_PRIVATE="true",  # the sources are local servers
        )
        migrated = self._run(["migrate", "-v", "0"], self._migrated, limit=300)
        if migrated.returncode != 0:
            raise RuntimeError(f"migrate failed:\n{migrated.output}")

    def run(self, *args: str, limit: float = 120.0) -> Cost:
        """`manage.py import_help_center ARGS --no-embed`, killed after `limit` seconds."""
        self.runs += 1
        database = self.folder / f"run-{self.runs}.sqlite3"
        shutil.copyfile(self._migrated, database)
        return self._run(["import_help_center", *args, "--no-embed"], database, limit)

    def _run(self, args: list[str], database: Path, limit: float) -> Cost:
        log = self.folder / "output.txt"
        env = {**self.env, "DATABASE_URL": f"sqlite:///{database}"}
        started = time.monotonic()
        with log.open("w") as output:
            child = subprocess.Popen(
                [sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=env, stdout=output, stderr=output
            )
            timer = threading.Timer(limit, child.kill)
            timer.start()
            try:
                # wait4, not wait: the rusage of this child alone (RUSAGE_CHILDREN
                # would be the largest of every child this process has waited for).
                _, status, usage = os.wait4(child.pid, 0)
            finally:
                timer.cancel()
        child.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - started
        return Cost(usage.ru_maxrss / 1024, seconds, child.returncode, log.read_text())
