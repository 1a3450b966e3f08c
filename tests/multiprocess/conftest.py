"""The fixtures of the multi-process tests: a PostgreSQL database migrated
once (each test clones it), the collected static files and a self-signed
certificate, once for the package; `stack_for`, which starts the whole
deployment (stack.py) in a test's own event loop; and the timings report."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.multiprocess.stack import POSTGRES, ROOT, listening, nginx_binary, require, serve, timings


@pytest.fixture(scope="package")
def template_database():
    """A database migrated once for the package; each test clones it."""
    require(listening(5432), "PostgreSQL on 127.0.0.1:5432")
    require(listening(6379), "Redis on 127.0.0.1:6379")
    require(nginx_binary(), "nginx (apt-get install nginx-light)")
    require(shutil.which("openssl"), "openssl")
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


@pytest.fixture(scope="package")
def static_root(tmp_path_factory, template_database):
    """`manage.py collectstatic`, into a directory of the test's (STATIC_ROOT
    is the checkout's staticfiles/ otherwise)."""
    root = tmp_path_factory.mktemp("staticfiles")
    subprocess.run([sys.executable, "-c", COLLECT_STATIC, str(root)], check=True, cwd=ROOT)
    assert (root / "chat" / "chat.js").exists()
    return root


@pytest.fixture(scope="package")
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


@pytest.fixture
def stack_for(tmp_path, template_database, static_root, certificate):
    def start(**env: str):
        return serve(tmp_path, template_database, static_root, certificate, **env)

    return start


@pytest.fixture(scope="package", autouse=True)
def report_timings():
    yield
    if timings:
        print("\n" + "\n".join(f"{name}: {value:.1f}" for name, value in timings.items()))
