"""The documented configuration matches what the settings read."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_env_example_lists_every_setting_read():
    read = set(re.findall(r'env(?:\.\w+)?\("([A-Z_]+)"', (ROOT / "kookee/settings.py").read_text()))
    # Tracing is configured by OpenTelemetry's own variables, read in chat/ops/tracing.py.
    read |= set(re.findall(r'"(OTEL_[A-Z_]+)"', (ROOT / "chat/ops/tracing.py").read_text()))
    listed = set(re.findall(r"^#? ?([A-Z_]+)=", (ROOT / ".env.example").read_text(), re.MULTILINE))
    assert read == listed


def test_production_cookies_cannot_be_planted_from_another_origin(tmp_path):
    # A `__Host-` cookie is taken by browsers only from this very origin,
    # over HTTPS, for the whole site: a sibling subdomain or a plain-HTTP
    # answer cannot fix a visitor's session to a key of the attacker's.
    from tests.test_security import STRONG, manage

    result = manage(
        "shell",
        "-v",
        "0",
        "-c",
        "from django.conf import settings as s; print(s.SESSION_COOKIE_NAME, s.SESSION_COOKIE_SECURE, "
        "s.SESSION_COOKIE_PATH, s.SESSION_COOKIE_DOMAIN, s.CSRF_COOKIE_NAME, s.CSRF_COOKIE_SECURE, s.CSRF_COOKIE_PATH)",
        DJANGO_DEBUG="false",
        DJANGO_SECRET_KEY=STRONG,
        DJANGO_ALLOWED_HOSTS="chat.example.com",
        DATABASE_URL=f"sqlite:///{tmp_path / 'x.sqlite3'}",
    )

    assert result.stdout.split() == ["__Host-sessionid", "True", "/", "None", "__Host-csrftoken", "True", "/"], (
        result.stderr
    )


def test_a_rerank_model_without_an_endpoint_is_refused_at_start(tmp_path):
    # OpenAI has no rerank endpoint: a model named without a URL would fail
    # every search's second reading, silently. It is refused at start instead.
    from tests.test_security import manage

    common = {"DJANGO_DEBUG": "true", "DATABASE_URL": f"sqlite:///{tmp_path / 'x.sqlite3'}", "OPENAI_BASE_URL": ""}
    refused = manage("check", KOOKEE_RERANK_MODEL="rerank-v3.5", KOOKEE_RERANK_BASE_URL="", **common)
    assert refused.returncode != 0 and "KOOKEE_RERANK_BASE_URL" in refused.stderr
    taken = manage(
        "check", KOOKEE_RERANK_MODEL="rerank-v3.5", KOOKEE_RERANK_BASE_URL="https://api.cohere.com/v2", **common
    )
    assert taken.returncode == 0, taken.stderr


def test_an_identity_secret_shorter_than_32_bytes_is_refused_at_start(tmp_path):
    # An HS256 key shorter than its hash can be guessed offline from one visitor's token.
    from tests.test_security import manage

    common = {"DJANGO_DEBUG": "true", "DATABASE_URL": f"sqlite:///{tmp_path / 'x.sqlite3'}"}
    refused = manage("check", KOOKEE_IDENTITY_SECRET="short-secret", **common)
    assert refused.returncode != 0 and "KOOKEE_IDENTITY_SECRET" in refused.stderr
    taken = manage("check", KOOKEE_IDENTITY_SECRET="x" * 32, **common)
    assert taken.returncode == 0, taken.stderr


def test_a_command_without_debug_or_a_secret_is_refused_in_one_sentence(tmp_path):
    # As production: DJANGO_DEBUG off (unset) and no DJANGO_SECRET_KEY. The
    # command refuses to start, whatever .secret_key a developer's checkout
    # holds (it would seal a source's token under a key the servers lack),
    # and says why and what to do, not in a traceback.
    from tests.test_security import manage

    (tmp_path / "help").mkdir()
    (tmp_path / "help" / "a.md").write_text("# A\n\nText.\n")
    result = manage(
        "import_help_center", "markdown", str(tmp_path / "help"), DATABASE_URL=f"sqlite:///{tmp_path / 'x.sqlite3'}"
    )

    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is not set" in result.stderr and "DJANGO_DEBUG=true" in result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "x.sqlite3").exists() or (tmp_path / "x.sqlite3").stat().st_size == 0
