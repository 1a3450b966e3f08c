"""What a source may reach (the security audit): only a token meant for
it, only files under KOOKEE_IMPORT_ROOT when named in the admin, and only
superusers may add, see or sync one, whatever model permissions a staff
user holds. Through the admin (the test client) and the commands."""

import io

import pytest
from django.contrib.auth.models import Group, Permission
from django.core.management import CommandError, call_command
from django.urls import reverse

from chat.roles import ensure_roles
from helpcenter.importers import SourceError
from helpcenter.importers.sync import sync
from helpcenter.models import Article, Source
from tests.helpcenter.import_servers import IntercomServer

pytestmark = pytest.mark.django_db

SERVER_SECRETS = ["KOOKEE_HANDOFF_WEBHOOK_SECRET", "DJANGO_SECRET_KEY", "OPENAI_API_KEY", "EMAIL_URL"]


@pytest.fixture
def admin_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser(username="root", password="pw"))
    return client


@pytest.fixture
def secrets_set(monkeypatch):
    """The server's own secrets, as a deployment has them."""
    for name in SERVER_SECRETS:
        monkeypatch.setenv(name, f"the-servers-own-{name.lower()}")


def add(client, **fields):
    form = {"name": "Acme", "kind": "zendesk", "location": "https://acme.zendesk.com", "settings": "{}"}
    return client.post(reverse("admin:helpcenter_source_add"), {**form, **fields})


# -- tokens --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [*SERVER_SECRETS, "KOOKEE_SOURCE_TOKEN_", "kookee_source_token_acme", "KOOKEE_SOURCE_TOKEN_A-B", "PATH"],
)
def test_the_admin_takes_no_variable_but_a_source_tokens(admin_client, name):
    response = add(admin_client, token_env=name)

    assert response.status_code == 200
    assert "cannot hold a source&#x27;s token: only KOOKEE_SOURCE_TOKEN_... may" in response.content.decode()
    assert not Source.objects.exists()


def test_a_source_tokens_variable_is_kept_and_its_token_sent(admin_client, zendesk, monkeypatch):
    monkeypatch.setenv("KOOKEE_SOURCE_TOKEN_ACME", "oauth-acme")
    zendesk.token = "Bearer oauth-acme"

    assert add(admin_client, location=zendesk.url, token_env="KOOKEE_SOURCE_TOKEN_ACME").status_code == 302
    source = Source.objects.get()
    changed = {"name": "Acme", "settings": "{}", "token_env": "DJANGO_SECRET_KEY"}
    response = admin_client.post(reverse("admin:helpcenter_source_change", args=[source.pk]), changed)
    assert "cannot hold a source&#x27;s token" in response.content.decode()  # nor on a change
    sync(source)

    assert source.token_env == "KOOKEE_SOURCE_TOKEN_ACME"
    assert {r["headers"]["authorization"] for r in zendesk.requests} == {"Bearer oauth-acme"}


@pytest.mark.parametrize("name", SERVER_SECRETS)
@pytest.mark.parametrize("kind", ["zendesk", "intercom"])
def test_a_server_secret_named_before_the_rule_fails_the_sync_and_nothing_is_sent(zendesk, secrets_set, kind, name):
    # The audit: a source at a host the attacker runs, saved when any variable was taken.
    attacker = zendesk if kind == "zendesk" else IntercomServer([])
    source = Source.objects.create(kind=kind, name="Attacker", location=attacker.url, token_env=name)
    try:
        with pytest.raises(CommandError, match="1 source\\(s\\) failed"):
            call_command("sync_help_center", "--source", source.pk, stdout=io.StringIO(), stderr=io.StringIO())
        assert attacker.requests == []  # no header, no request: nothing reached the host
    finally:
        if attacker is not zendesk:
            attacker.close()
    source.refresh_from_db()
    assert source.last_error.startswith(f"the environment variable {name} cannot hold a source's token")
    assert "the-servers-own" not in source.last_error
    assert source.running_since is None and source.synced_at is None


def test_the_command_takes_no_variable_but_a_source_tokens(zendesk, secrets_set):
    with pytest.raises(CommandError, match="KOOKEE_HANDOFF_WEBHOOK_SECRET cannot hold a source's token"):
        call_command("import_help_center", "zendesk", zendesk.url, "--token-env", "KOOKEE_HANDOFF_WEBHOOK_SECRET")

    assert zendesk.requests == []
    assert not Source.objects.exists()


# -- who may --------------------------------------------------------------------------


def test_sources_are_the_superusers_even_for_staff_with_every_source_permission(client, django_user_model):
    ensure_roles()
    user = django_user_model.objects.create_user(username="staff", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name="Support"))
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="helpcenter", codename__endswith="_source")
    )
    assert user.has_perms(["helpcenter.add_source", "helpcenter.change_source", "helpcenter.view_source"])
    client.force_login(user)
    source = Source.objects.create(kind="zendesk", name="Acme", location="https://acme.zendesk.com")
    form = {"name": "Evil", "kind": "markdown", "location": "/etc", "settings": "{}"}

    for url in (
        reverse("admin:helpcenter_source_changelist"),
        reverse("admin:helpcenter_source_add"),
        reverse("admin:helpcenter_source_change", args=[source.pk]),
        reverse("admin:helpcenter_source_delete", args=[source.pk]),
    ):
        assert client.get(url).status_code == 403, url
        assert client.post(url, form).status_code == 403, url
    action = {"action": "sync_now", "_selected_action": [source.pk]}
    assert client.post(reverse("admin:helpcenter_source_changelist"), action).status_code == 403

    assert list(Source.objects.values_list("name", "running_since")) == [("Acme", None)]  # nothing added, no sync
    index = client.get(reverse("admin:app_list", args=["helpcenter"])).content.decode()
    assert "/admin/helpcenter/source/" not in index
    # Support's articles are as they were.
    assert client.get(reverse("admin:helpcenter_article_changelist")).status_code == 200
    assert client.get(reverse("admin:helpcenter_article_add")).status_code == 200


# -- files on the server ------------------------------------------------------------------


@pytest.fixture
def root(tmp_path, settings):
    root = tmp_path / "imports"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "refunds.md").write_text("# Refunds\n\nWithin 14 days.\n")
    settings.KOOKEE_IMPORT_ROOT = str(root)
    return root


@pytest.mark.parametrize("location", ["/etc/passwd", "/etc", "{tmp}"])
def test_without_an_import_root_the_admin_takes_no_file_or_folder(admin_client, tmp_path, location):
    response = add(admin_client, kind="markdown", location=location.format(tmp=tmp_path))

    assert response.status_code == 200
    assert "accepted here only when KOOKEE_IMPORT_ROOT is set" in response.content.decode()
    assert not Source.objects.exists()


@pytest.mark.parametrize(
    ("kind", "location"),
    [
        ("markdown", "/etc/passwd"),
        ("markdown", "{root}/../../../../../../etc/passwd"),
        ("markdown", "../"),
        ("markdown", "{root}/link"),  # a link inside the root, to a folder outside it
        ("markdown", "/no/such/folder"),  # refused before it is looked for: no probing what exists
        ("zendesk", "/etc/passwd"),  # saved JSON of an API is a file on the server too
    ],
)
def test_the_admin_takes_nothing_outside_the_import_root(admin_client, root, tmp_path, kind, location):
    (tmp_path / "outside").mkdir()
    (root / "link").symlink_to(tmp_path / "outside")

    response = add(admin_client, kind=kind, location=location.format(root=root))

    assert response.status_code == 200
    assert f"is not under KOOKEE_IMPORT_ROOT ({root})" in response.content.decode()
    assert not Source.objects.exists()


@pytest.mark.parametrize("location", ["{root}/docs", "docs", "{root}/../imports/docs/"])
def test_the_admin_takes_a_folder_under_the_import_root_as_its_real_path(admin_client, root, location):
    response = add(admin_client, kind="markdown", location=location.format(root=root))

    assert response.status_code == 302, response.content.decode()[:2000]
    assert Source.objects.get().location == str(root / "docs")


def test_a_sync_the_admin_started_reads_nothing_outside_the_import_root(root, tmp_path):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.md").write_text("# Secret\n")
    source = Source.objects.create(kind="markdown", name="Earlier", location=str(tmp_path / "outside"))

    with pytest.raises(SourceError, match="is not under KOOKEE_IMPORT_ROOT"):
        sync(source, confined=True)

    source.refresh_from_db()
    assert "is not under KOOKEE_IMPORT_ROOT" in source.last_error and source.running_since is None
    assert not Article.objects.exists()


def test_the_command_from_a_shell_still_reads_any_folder(tmp_path, settings):
    settings.KOOKEE_IMPORT_ROOT = ""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "refunds.md").write_text("# Refunds\n\nWithin 14 days.\n")

    call_command("import_help_center", "markdown", str(tmp_path / "docs"), "--no-embed", stdout=io.StringIO())
    call_command("sync_help_center", "--all", stdout=io.StringIO())  # cron's syncs, also not confined

    assert Source.objects.get().last_error == ""
    assert Article.objects.get().title == "Refunds"
