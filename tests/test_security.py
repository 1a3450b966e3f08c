"""Security boundaries: visitors are kept apart, conversation ids are not
guessable, the admin is for staff, and production settings pass Django's
deployment checks.

The WebSocket handshake's refusals (a foreign Origin, no session, an expired
session) are tested in tests/chat/engine/test_consumers.py: test_refused_from_a_foreign_origin,
test_refused_without_a_session and test_refused_with_an_expired_session.
"""

import asyncio
import json
import os
import re
import secrets
import string
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from channels.db import database_sync_to_async
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.test import AsyncClient

from chat.models import Conversation, Turn
from chat.visitors.identity import hash_key
from tests.chat.chat_client import ChatClient
from tests.provider import WaitFor, answer, finish, text, usage

ROOT = Path(__file__).resolve().parent.parent
HISTORY_SCRIPT = re.compile(r'<script id="history" type="application/json">(.*?)</script>', re.DOTALL)


async def open_page(page: AsyncClient) -> str:
    response = await page.get("/")
    assert response.status_code == 200
    return response.content.decode()


def embedded_history(page: str) -> list[dict]:
    [found] = HISTORY_SCRIPT.findall(page)
    return json.loads(found)["turns"]


@database_sync_to_async
def conversation_of(turn_id: int) -> Conversation:
    return Turn.objects.select_related("conversation").get(pk=turn_id).conversation


# --- visitors are kept apart -------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_visitor_cannot_read_or_continue_another_visitors_conversation(use_provider):
    a_page, b_page = AsyncClient(), AsyncClient()
    await open_page(a_page)
    await open_page(b_page)
    a = await ChatClient.connect(a_page.cookies["sessionid"].value)
    b = await ChatClient.connect(b_page.cookies["sessionid"].value)
    try:
        use_provider.queue(answer("Order 4242 ships on Monday."), answer("Hello, B."))
        a_turn = await a.ask("Where is my order 4242?")
        await a.finish(a_turn)
        a_conversation = await conversation_of(a_turn)

        # B names A's conversation and turn in every field a server might read.
        await b.send(
            {
                "type": "message",
                "text": "hi",
                "conversation": str(a_conversation.public_id),
                "conversation_id": a_conversation.pk,
                "public_id": str(a_conversation.public_id),
                "turn_id": a_turn,
            }
        )
        b_turn = (await b.receive_until("turn.started"))["turn_id"]
        await b.finish(b_turn)

        b_conversation = await conversation_of(b_turn)
        assert b_conversation.pk != a_conversation.pk
        # The model saw B's conversation only.
        messages = use_provider.requests[1].body["messages"]
        assert [(m["role"], m["content"]) for m in messages[1:]] == [("user", "hi")]
        assert not any(f.get("turn_id") == a_turn for f in b.frames)
        assert not any(f.get("turn_id") == b_turn for f in a.frames)
    finally:
        await a.close()
        await b.close()

    b_view = await open_page(b_page)
    assert [t["turn_id"] for t in embedded_history(b_view)] == [b_turn]
    assert "4242" not in b_view
    a_view = await open_page(a_page)
    assert [t["turn_id"] for t in embedded_history(a_view)] == [a_turn]
    assert "Hello, B." not in a_view


@pytest.mark.django_db(transaction=True)
async def test_a_visitors_stop_does_not_stop_another_visitors_turn(use_provider):
    a = await ChatClient.connect()
    b = await ChatClient.connect()
    try:
        release = asyncio.Event()
        use_provider.queue([text("Still"), WaitFor(release), text(" going."), finish("stop"), usage(10, 3)])
        a_turn = await a.ask("hi")
        request = await use_provider.wait_for_request(1)
        await a.receive_until("delta", turn_id=a_turn)

        await b.send({"type": "stop"})
        await b.send({"type": "stop", "turn_id": a_turn})
        assert await b.communicator.receive_nothing(timeout=0.3)
        assert not request.hung_up.is_set()

        release.set()
        ended = await a.finish(a_turn)
        assert ended["status"] == "completed"
        assert a.text_of(a_turn) == "Still going."
    finally:
        await a.close()
        await b.close()


@pytest.mark.django_db
def test_conversation_public_ids_are_random_uuid4s():
    ids = [Conversation.objects.create(visitor_hash=f"visitor-{n}").public_id for n in range(50)]

    assert all(isinstance(i, uuid.UUID) and i.version == 4 and i.variant == uuid.RFC_4122 for i in ids)
    assert len(set(ids)) == 50
    # Not a counter in disguise: consecutive ids share no leading digits.
    assert len({i.hex[:8] for i in ids}) == 50


@pytest.mark.django_db(transaction=True)
async def test_the_conversation_pk_never_leaves_the_server(use_provider):
    page = AsyncClient()
    await open_page(page)
    key = page.cookies["sessionid"].value
    # A pk no page or frame would contain by chance.
    pk = 987654321
    await database_sync_to_async(Conversation.objects.create)(id=pk, visitor_hash=hash_key(key))
    chat = await ChatClient.connect(key)
    try:
        use_provider.queue(answer("Hello!"))
        turn_id = await chat.ask("hi")
        await chat.finish(turn_id)
        await chat.send("not json")
        await chat.receive()
    finally:
        await chat.close()

    assert (await conversation_of(turn_id)).pk == pk
    view = await open_page(page)
    assert [t["turn_id"] for t in embedded_history(view)] == [turn_id]
    assert str(pk) not in view
    assert str(pk) not in json.dumps(chat.frames)


# --- the admin is for staff ----------------------------------------------------------------


CHANGELISTS = sorted(f"/admin/{m._meta.app_label}/{m._meta.model_name}/" for m in admin.site._registry)
ADMIN_URLS = ["/admin/", *CHANGELISTS]


@pytest.mark.django_db
@pytest.mark.parametrize("url", ADMIN_URLS)
def test_anonymous_visitors_are_sent_to_the_admin_login(client, url):
    response = client.get(url)

    assert response.status_code == 302
    assert response.url == f"/admin/login/?next={url}"


@pytest.mark.django_db
@pytest.mark.parametrize("url", ADMIN_URLS)
def test_users_who_are_not_staff_are_sent_to_the_admin_login(client, django_user_model, url):
    user = django_user_model.objects.create_user("visitor", password="not-staff")
    # Permissions alone do not open the admin: is_staff does.
    user.user_permissions.set(Permission.objects.all())
    client.force_login(user)

    response = client.get(url)

    assert response.status_code == 302
    assert response.url == f"/admin/login/?next={url}"


@pytest.mark.django_db
@pytest.mark.parametrize("url", ADMIN_URLS)
def test_staff_open_every_admin_page(admin_client, url):
    assert admin_client.get(url).status_code == 200


# --- production settings ---------------------------------------------------------------------


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    """Runs manage.py with only the given DJANGO_* settings in its environment.
    (A .env file beside manage.py would add its own: tests assume none.)"""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    environment.update(env)
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=environment,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_deployment_checks_pass_with_production_settings(tmp_path):
    secret_key = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(50))

    result = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        DJANGO_DEBUG="false",
        DJANGO_SECRET_KEY=secret_key,
        DJANGO_ALLOWED_HOSTS="chat.example.com",
        DATABASE_URL=f"sqlite:///{tmp_path / 'x.sqlite3'}",
        EMAIL_URL="smtp+tls://kookee:secret@smtp.example.com:587",
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_sends_no_email_to_its_log_and_says_so(tmp_path):
    # The console backend writes visitors' words (a handoff's reason and
    # question) to the process's log: production has none unless EMAIL_URL says.
    production = {
        "DJANGO_DEBUG": "false",
        "DJANGO_SECRET_KEY": STRONG,
        "DJANGO_ALLOWED_HOSTS": "chat.example.com",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'x.sqlite3'}",
    }
    backend = manage(
        "shell", "-v", "0", "-c", "from django.conf import settings; print(settings.EMAIL_BACKEND)", **production
    )
    check = manage("check", "--deploy", **production)

    assert backend.stdout.strip() == "django.core.mail.backends.dummy.EmailBackend", backend.stderr
    assert "chat.W001" in check.stdout + check.stderr


def test_deployment_checks_fail_when_production_prints_its_email(tmp_path):
    # Each handoff email quotes the visitor: printed, it lands in the logs.
    result = manage(
        "check",
        "--deploy",
        DJANGO_DEBUG="false",
        DJANGO_SECRET_KEY=STRONG,
        DJANGO_ALLOWED_HOSTS="chat.example.com",
        DATABASE_URL=f"sqlite:///{tmp_path / 'x.sqlite3'}",
        EMAIL_URL="consolemail://",
    )

    assert result.returncode != 0
    assert "ERRORS:" in result.stderr and "chat.E002" in result.stderr, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("debug", "email_url"),
    [
        ("false", "smtp+tls://kookee:secret@smtp.example.com:587"),
        ("false", "filemail://{tmp_path}/mail"),
        ("true", "consolemail://"),
    ],
)
def test_deployment_checks_accept_email_that_is_not_printed_or_printed_in_debug(tmp_path, debug, email_url):
    result = manage(
        "check",
        "--deploy",
        DJANGO_DEBUG=debug,
        DJANGO_SECRET_KEY=STRONG,
        DJANGO_ALLOWED_HOSTS="chat.example.com",
        DATABASE_URL=f"sqlite:///{tmp_path / 'x.sqlite3'}",
        EMAIL_URL=email_url.format(tmp_path=tmp_path),
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "chat.E002" not in result.stdout + result.stderr


def test_production_refuses_to_start_without_a_secret_key(tmp_path):
    result = manage(
        "check",
        DJANGO_DEBUG="false",
        DJANGO_ALLOWED_HOSTS="chat.example.com",
        DATABASE_URL=f"sqlite:///{tmp_path / 'x.sqlite3'}",
    )

    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY" in result.stderr


def show_settings(**env: str) -> subprocess.CompletedProcess:
    return manage(
        "shell",
        "-v",
        "0",
        "-c",
        "from django.conf import settings; print(settings.DEBUG, len(settings.SECRET_KEY))",
        DATABASE_URL="sqlite:///:memory:",
        **env,
    )


STRONG = "kX8" + secrets.token_urlsafe(48)


def test_debug_is_off_unless_asked_for():
    result = show_settings(DJANGO_SECRET_KEY=STRONG)

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", str(len(STRONG))]


@pytest.mark.parametrize(
    "weak",
    [
        "change-me",
        "CHANGE-ME",
        "django-insecure-" + "a1b2c3d4e5" * 5,
        "short-but-random-Xq9",
        "a" * 60,
        "abab" * 20,
    ],
)
def test_production_refuses_a_weak_secret_key(weak):
    result = show_settings(DJANGO_SECRET_KEY=weak, DJANGO_DEBUG="false")

    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is too weak" in result.stderr


def test_the_example_configuration_cannot_serve_production():
    example = dict(
        re.findall(r"^([A-Z_]+)=(.*)$", (ROOT / ".env.example").read_text(), re.MULTILINE),
    )
    production = {k: v for k, v in example.items() if k.startswith("DJANGO_")} | {"DJANGO_DEBUG": "false"}
    result = show_settings(**production)

    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY" in result.stderr


def test_a_wildcard_host_with_debug_refuses_to_start():
    result = show_settings(DJANGO_DEBUG="true", DJANGO_SECRET_KEY=STRONG, DJANGO_ALLOWED_HOSTS="*")

    assert result.returncode != 0
    assert "DJANGO_ALLOWED_HOSTS=*" in result.stderr


def test_local_use_makes_its_own_secret_once():
    first = show_settings(DJANGO_DEBUG="true")
    second = show_settings(DJANGO_DEBUG="true")

    assert first.returncode == 0, first.stderr
    assert first.stdout.split()[0] == "True"
    assert int(first.stdout.split()[1]) >= 50
    assert first.stdout == second.stdout
    secret_file = ROOT / ".secret_key"
    assert secret_file.stat().st_mode & 0o077 == 0  # readable by its owner only
    assert ".secret_key" in (ROOT / ".gitignore").read_text().split()
