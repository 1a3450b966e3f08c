"""manage.py import_actions and set_action_secret."""

import io
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from chat.actions import catalog
from chat.models import Action, ActionScheme

pytestmark = pytest.mark.django_db

SHOP = Path(__file__).with_name("shop.yaml")
SECRET = "shop-api-secret-3e5d7c"


@pytest.fixture(autouse=True)
def hosts(settings):
    settings.ALLOWED_HOSTS = ["help.example.org", "localhost", "127.0.0.1"]
    settings.KOOKEE_SITE_URL = ""


def run(*args) -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    assert err.getvalue() == ""
    return out.getvalue()


def rows():
    return list(Action.objects.order_by("name").values()), list(ActionScheme.objects.order_by("name").values())


def shop_text() -> str:
    return SHOP.read_text()


def write(tmp_path: Path, text: str, name: str = "api.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# --- import_actions --------------------------------------------------------------------------


def test_import_prints_the_summary_the_names_and_the_credentials_to_set():
    out = run("import_actions", str(SHOP))
    assert out.splitlines() == [
        "Shop API: 4 added, 0 updated, 0 unchanged, 0 disabled (no longer in the document).",
        "  added: getOrder",
        "  added: cancelOrder",
        "  added: slowReport",
        "  added: shopStatus",
        "Credentials to set: shopKey (manage.py set_action_secret NAME, the secret on standard input).",
        "The new actions are live for visitors from the next message on.",
    ]
    assert list(Action.objects.values_list("name", "enabled", "base_url")) == [
        ("cancelOrder", True, "http://127.0.0.1:1"),
        ("getOrder", True, "http://127.0.0.1:1"),
        ("shopStatus", True, "http://127.0.0.1:1"),
        ("slowReport", True, "http://127.0.0.1:1"),
    ]
    assert list(ActionScheme.objects.values_list("name", "kind")) == [("shopKey", "bearer")]


def test_a_sync_names_what_was_updated_disabled_and_skipped(tmp_path):
    run("import_actions", str(SHOP))
    catalog.set_secret("shopKey", SECRET)
    text = shop_text()
    # slowReport removed, shopStatus changed, an operation without an operationId added.
    start, end = text.index("  /slow:"), text.index("  /status:")
    text = text[:start] + "  /health:\n    get:\n      summary: Alive?\n" + text[end:]
    text = text.replace("Whether the shop is open.", "Whether the shop is open today.")
    out = run("import_actions", write(tmp_path, text))
    assert out.splitlines() == [
        "Shop API: 0 added, 1 updated, 2 unchanged, 1 disabled (no longer in the document).",
        "  updated: shopStatus",
        "  disabled: slowReport",
        "  skipped (no operationId, or a body that is not JSON): GET /health",
    ]
    assert list(Action.objects.values_list("name", "enabled", "in_document")) == [
        ("cancelOrder", True, True),
        ("getOrder", True, True),
        ("shopStatus", True, True),
        ("slowReport", False, False),
    ]
    assert Action.objects.get(name="shopStatus").description == "Whether the shop is open today."


def test_an_unchanged_import_names_nothing():
    run("import_actions", str(SHOP))
    catalog.set_secret("shopKey", SECRET)
    assert run("import_actions", str(SHOP)).splitlines() == [
        "Shop API: 0 added, 0 updated, 4 unchanged, 0 disabled (no longer in the document).",
    ]


def test_import_disabled():
    out = run("import_actions", str(SHOP), "--disabled")
    assert "4 added" in out and "  added: getOrder" in out
    assert "live for visitors" not in out
    assert not Action.objects.filter(enabled=True).exists() and Action.objects.count() == 4


def test_import_with_a_base_url_replaces_the_servers():
    out = run("import_actions", str(SHOP), "--base-url", "https://shop.example.com/v2/")
    assert "4 added" in out
    assert set(Action.objects.values_list("base_url", flat=True)) == {"https://shop.example.com/v2"}


def test_import_with_a_base_url_resolves_a_relative_server(tmp_path):
    path = write(tmp_path, shop_text().replace("http://127.0.0.1:1", "/api"))
    run("import_actions", path, "--base-url", "https://shop.example.com/v2")
    assert set(Action.objects.values_list("base_url", flat=True)) == {"https://shop.example.com/v2/api"}


def test_a_relative_server_without_a_base_url_is_refused(tmp_path):
    path = write(tmp_path, shop_text().replace("http://127.0.0.1:1", "/api"))
    with pytest.raises(CommandError) as caught:
        run("import_actions", path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert "no absolute http(s) API address (/api): give one with --base-url" in message
    assert message.endswith("Nothing imported.")
    assert rows() == ([], [])


def test_the_title_is_the_file_without_one(tmp_path):
    path = write(tmp_path, shop_text().replace("  title: Shop API\n", ""))
    assert run("import_actions", path).splitlines()[0].startswith(f"{path}: 4 added")


@pytest.mark.parametrize(
    "change, problem",
    [
        (("openapi: 3.1.0", "swagger: '2.0'"), "Swagger 2.0 is not supported"),
        (("operationId: cancelOrder", "operationId: getOrder"), "'getOrder' is used already"),
        (("in: path", "in: cookie"), "cookie parameters such as 'order_id' are not supported"),
        (("scheme: bearer", "scheme: digest"), "http digest is not supported"),
    ],
)
def test_a_bad_document_changes_nothing(tmp_path, change, problem):
    run("import_actions", str(SHOP), "--disabled")
    catalog.set_secret("shopKey", SECRET)
    before = rows()
    text = shop_text().replace(*change).replace("Whether the shop is open.", "Open?")
    assert text != shop_text().replace("Whether the shop is open.", "Open?")
    path = write(tmp_path, text)
    with pytest.raises(CommandError) as caught:
        run("import_actions", path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and problem in message and message.endswith(". Nothing imported.")
    assert rows() == before


def test_the_apps_own_host_is_refused_and_changes_nothing():
    run("import_actions", str(SHOP))
    before = rows()
    with pytest.raises(CommandError, match=r"help.example.org is this app's own host.*Nothing imported\."):
        run("import_actions", str(SHOP), "--base-url", "https://help.example.org")
    assert rows() == before


def test_a_missing_file(tmp_path):
    missing = str(tmp_path / "nope.yaml")
    with pytest.raises(CommandError) as caught:
        run("import_actions", missing)
    assert f"{missing}: cannot read" in str(caught.value) and "Nothing imported." in str(caught.value)
    assert rows() == ([], [])


def test_a_file_that_is_not_a_document(tmp_path):
    with pytest.raises(CommandError, match="the top level must be a mapping"):
        run("import_actions", write(tmp_path, "- just\n- a list\n"))


# --- set_action_secret -----------------------------------------------------------------------

BASIC = """openapi: 3.1.0
info: {title: T, version: '1'}
servers: [{url: 'https://api.example.com'}]
paths:
  /x:
    get:
      operationId: x
      security: [{login: []}]
components:
  securitySchemes:
    login: {type: http, scheme: basic}
"""


def secret_of(name: str) -> str | None:
    found = catalog.credentials({name})
    return found[name][1] if name in found else None


@pytest.fixture
def imported():
    call_command("import_actions", str(SHOP), stdout=io.StringIO())


def with_stdin(monkeypatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))


def test_set_a_secret_from_stdin_never_printed(imported, monkeypatch):
    with_stdin(monkeypatch, SECRET + "\n")
    out, err = io.StringIO(), io.StringIO()
    call_command("set_action_secret", "shopKey", stdout=out, stderr=err)
    assert out.getvalue() == "Credential shopKey set.\n" and err.getvalue() == ""
    assert secret_of("shopKey") == SECRET
    assert SECRET not in ActionScheme.objects.get(name="shopKey").secret_sealed
    # Once set, import_actions no longer asks for it.
    assert "Credentials to set" not in run("import_actions", str(SHOP))


def test_a_windows_line_end_and_only_the_first_line(imported, monkeypatch):
    with_stdin(monkeypatch, SECRET + "\r\nsecond line\n")
    run("set_action_secret", "shopKey")
    assert secret_of("shopKey") == SECRET


def test_a_secret_without_a_line_end(imported, monkeypatch):
    with_stdin(monkeypatch, SECRET)
    run("set_action_secret", "shopKey")
    assert secret_of("shopKey") == SECRET


def test_an_unknown_scheme_lists_the_known_ones(imported, monkeypatch):
    with_stdin(monkeypatch, SECRET)
    with pytest.raises(CommandError) as caught:
        run("set_action_secret", "nope")
    assert str(caught.value) == "No security scheme 'nope'. The imported document's: shopKey."
    assert secret_of("shopKey") is None


def test_no_scheme_before_an_import(monkeypatch):
    with_stdin(monkeypatch, SECRET)
    with pytest.raises(CommandError, match="none: import the document first"):
        run("set_action_secret", "shopKey")


@pytest.mark.parametrize("stdin", ["", "\n", "\r\n"])
def test_an_empty_stdin_is_refused(imported, monkeypatch, stdin):
    with_stdin(monkeypatch, stdin)
    with pytest.raises(CommandError, match="No secret on standard input"):
        run("set_action_secret", "shopKey")
    assert ActionScheme.objects.get(name="shopKey").secret_sealed == ""


def test_an_empty_stdin_leaves_a_secret_set(imported, monkeypatch):
    catalog.set_secret("shopKey", SECRET)
    with_stdin(monkeypatch, "")
    with pytest.raises(CommandError):
        run("set_action_secret", "shopKey")
    assert secret_of("shopKey") == SECRET


def test_basic_needs_user_and_password(tmp_path, monkeypatch):
    run("import_actions", write(tmp_path, BASIC))
    with_stdin(monkeypatch, "just-a-password\n")
    with pytest.raises(CommandError, match=r"A basic credential is user:password\. Nothing changed\."):
        run("set_action_secret", "login")
    assert secret_of("login") is None
    with_stdin(monkeypatch, "ana:pa:ss\n")
    run("set_action_secret", "login")
    assert secret_of("login") == "ana:pa:ss"


def test_a_nul_is_refused(imported, monkeypatch):
    with_stdin(monkeypatch, "abc\0def\n")
    with pytest.raises(CommandError, match="may not hold a line break"):
        run("set_action_secret", "shopKey")
    assert secret_of("shopKey") is None


def test_clear_removes_it_without_reading_stdin(imported, monkeypatch):
    catalog.set_secret("shopKey", SECRET)

    class NoInput:
        def readline(self):
            raise AssertionError("--clear read standard input")

    monkeypatch.setattr(sys, "stdin", NoInput())
    assert run("set_action_secret", "shopKey", "--clear") == "Credential shopKey removed.\n"
    scheme = ActionScheme.objects.get(name="shopKey")
    assert (scheme.secret_sealed, scheme.secret_set_at) == ("", None)
    assert secret_of("shopKey") is None
    assert "Credentials to set: shopKey" in run("import_actions", str(SHOP))


def test_clear_of_an_unknown_scheme(imported):
    with pytest.raises(CommandError, match="No security scheme 'nope'"):
        run("set_action_secret", "nope", "--clear")
