"""The README's commands work as printed, on a developer's checkout after
`make run` once: run from the repository's root in an environment with
nothing of ours in it (no DJANGO_DEBUG, no DJANGO_SECRET_KEY)."""

import os
import re
import sqlite3
import subprocess
import sys

import pytest

from tests.servers import ROOT

README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    return README[start : README.index("\n## ", start + 1)]


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def printed(command: str) -> str:
    """The one line of "Bring your help center"'s block that runs this command."""
    [line] = [
        line
        for block in shell_blocks(section("Bring your help center"))
        for line in block.splitlines()
        if command in line and not line.lstrip().startswith("#")
    ]
    return line


def clean_environment(tmp_path) -> dict[str, str]:
    """A shell's, without anything this project reads but the database (a
    scratch one): no DJANGO_*, no .env (the checkout has none)."""
    assert not (ROOT / ".env").exists(), "a .env beside manage.py would add its settings"
    return {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}


def as_make_run_leaves_it(environment: dict[str, str]) -> None:
    """`make run` once: the database migrated (and a local secret in .secret_key)."""
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"],
        cwd=ROOT,
        env={**environment, "DJANGO_DEBUG": "true"},
        check=True,
        timeout=120,
    )


def test_the_readme_says_how_commands_run_before_it_shows_them():
    before, block_and_after = section("Bring your help center").split("```sh", 1)
    after = block_and_after.split("```", 1)[1]
    assert "DJANGO_SECRET_KEY" in before, "say what production runs them with, before the commands"
    assert "DJANGO_DEBUG" not in after, "a note below the commands, that they fail as printed"


@pytest.mark.slow
def test_the_printed_markdown_import_works_from_a_clean_shell(tmp_path):
    environment = clean_environment(tmp_path)
    as_make_run_leaves_it(environment)
    docs = tmp_path / "help"
    docs.mkdir()
    (docs / "refunds.md").write_text("---\ntitle: Getting a refund\n---\nWrite to us within 30 days.\n")
    (docs / "invoices.md").write_text("# Downloading invoices\n\nOpen Billing, then Invoices.\n")
    command = printed("import_help_center markdown").replace("./docs/help", str(docs))
    if not (ROOT / ".venv/bin/python").exists():
        command = command.replace(".venv/bin/python", sys.executable)

    result = subprocess.run(
        ["bash", "-c", command], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 added" in result.stdout
    with sqlite3.connect(tmp_path / "db.sqlite3") as db:
        titles = sorted(title for (title,) in db.execute("select title from chat_helparticle"))
    assert titles == ["Downloading invoices", "Getting a refund"]
