"""docs/deploy.md stays complete: its table names every setting the app
reads, and it has the nginx block that tests/multiprocess/ serves."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = (ROOT / "docs" / "deploy.md").read_text()


def _documented() -> set[str]:
    return set(re.findall(r"^\| `([A-Z][A-Z0-9_]+)` \|", DEPLOY, re.MULTILINE))


def test_every_environment_variable_is_in_the_deploy_guides_table():
    settings = (ROOT / "kookee" / "settings.py").read_text()
    read = set(re.findall(r"""\benv(?:\.\w+)?\(\s*["']([A-Z][A-Z0-9_]+)["']""", settings))
    example = set(re.findall(r"^#? ?([A-Z][A-Z0-9_]+)=", (ROOT / ".env.example").read_text(), re.MULTILINE))
    assert "DATABASE_URL" in read and "KOOKEE_DB_POOL_SIZE" in example
    missing = (read | example) - _documented()
    assert not missing, f"docs/deploy.md's table of environment variables lacks {sorted(missing)}"


def test_the_guide_has_one_marked_nginx_block():
    from tests.multiprocess.stack import deploy_nginx_block

    block = deploy_nginx_block()
    for needed in ("upstream kookee", "location /ws/", "proxy_read_timeout", "location ^~ /metrics", "/healthz"):
        assert needed in block
