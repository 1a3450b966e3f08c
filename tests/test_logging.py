"""The log: each event once, a refusal without a traceback, the turn id on
a turn's lines, and never what a visitor or the model wrote at INFO."""

import io
import logging
from contextlib import contextmanager

import pytest
from django.contrib.auth.models import Group, User

from chat.roles import ensure_roles
from tests.chat.chat_client import ChatClient
from tests.provider import answer


@contextmanager
def console_output():
    """What the project's console handler prints (every logger's one handler)."""

    def ours(name):  # pytest adds capturing handlers of its own beside it
        return [h for h in logging.getLogger(name).handlers if type(h) is logging.StreamHandler]

    [handler] = ours("kookee")
    # One handler for everything: Django's records are not printed twice.
    assert ours("django") == ours("") == [handler]
    assert not logging.getLogger("django").propagate
    output = io.StringIO()
    # Not setStream(): it flushes the old stream, which may be a capture
    # file pytest has closed since the handler was made.
    previous, handler.stream = handler.stream, output
    try:
        yield output
    finally:
        handler.stream = previous


@pytest.fixture
def support(db, client):
    ensure_roles()
    user = User.objects.create_user("sam", password="x", is_staff=True)
    user.groups.add(Group.objects.get(name="Support"))
    client.force_login(user)
    return client


def test_a_refused_admin_page_is_one_line_without_a_traceback(support):
    with console_output() as output:
        response = support.get("/admin/billing/ledgerentry/")

    assert response.status_code == 403
    lines = output.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert "Forbidden" in lines[0]
    assert "Traceback" not in output.getvalue()


def test_a_refused_lookup_is_one_line_without_a_traceback(support):
    with console_output() as output:
        response = support.get("/admin/chat/turn/?user_text__startswith=a")

    assert response.status_code == 400
    lines = output.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert "Traceback" not in output.getvalue()


def test_a_server_fault_keeps_its_traceback(rf):
    logger = logging.getLogger("django.request")
    with console_output() as output:
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logger.error("Internal Server Error: /", exc_info=True, extra={"status_code": 500})

    assert "Traceback" in output.getvalue()
    assert output.getvalue().count("Internal Server Error") == 1


@pytest.mark.django_db(transaction=True)
async def test_info_lines_carry_the_turn_id_and_never_the_words(use_provider):
    secret_question = "my account number is 4111-SECRET-QUESTION"
    secret_answer = "Your number 4111-SECRET-ANSWER is noted."
    use_provider.queue(answer(secret_answer))
    chat = await ChatClient.connect()
    try:
        with console_output() as output:
            turn_id = await chat.ask(secret_question)
            await chat.finish(turn_id)
    finally:
        await chat.close()

    log = output.getvalue()
    assert f"turn={turn_id}" in log
    assert "SECRET" not in log
    assert "token=" not in log.replace("_tokens=", "")
