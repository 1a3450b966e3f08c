"""The log: each event once, a refusal without a traceback, the turn id on
a turn's lines, and never what a visitor or the model wrote at INFO."""

import io
import logging
import traceback
from contextlib import contextmanager

import pytest
from django.contrib.auth.models import Group, User

from chat.engine.provider_errors import StreamError
from chat.roles import ensure_roles
from tests.chat.chat_client import ChatClient
from tests.provider import HTTPError, answer

SECRET = "ABC123"
QUESTION = f"my secret question {SECRET}"
# As providers answer a request they refuse: the message quotes the prompt.
QUOTING = {"error": {"message": f"Invalid content: '{QUESTION}'", "type": "invalid_request_error", "code": "bad"}}


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


@contextmanager
def every_record(caplog):
    """Every record of every logger, DEBUG up ("kookee" and "django" do not
    propagate to pytest's handler on the root)."""
    caplog.set_level(logging.DEBUG)
    quiet = [logging.getLogger(name) for name in ("kookee", "django")]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.DEBUG)
        logger.addHandler(caplog.handler)
    try:
        yield caplog.records
    finally:
        for logger, level in zip(quiet, levels, strict=True):
            logger.removeHandler(caplog.handler)
            logger.setLevel(level)


def printed(record: logging.LogRecord) -> str:
    """A record as a handler prints it: its message, traceback and stack."""
    return logging.Formatter("%(levelname)s %(name)s %(message)s").format(record)


@pytest.mark.django_db(transaction=True)
async def test_a_provider_error_that_quotes_the_visitor_is_logged_without_the_quote(use_provider, settings, caplog):
    settings.KOOKEE_PROVIDER_RETRIES = 1
    settings.KOOKEE_PROVIDER_BACKOFF_SECONDS = 0.01
    use_provider.queue([HTTPError(503, QUOTING)], [HTTPError(400, QUOTING)])
    chat = await ChatClient.connect()
    try:
        with every_record(caplog) as records, console_output() as output:
            turn_id = await chat.ask(QUESTION)
            assert (await chat.receive_until("error"))["code"] == "provider_rejected"
            await chat.finish(turn_id)
    finally:
        await chat.close()

    assert [printed(r) for r in records if SECRET in printed(r)] == []
    assert SECRET not in output.getvalue()
    assert len(use_provider.requests) == 2  # the 503 was retried once
    [retry] = [r for r in records if r.name == "kookee.provider"]
    assert retry.levelno == logging.WARNING
    assert "HTTP 503" in retry.getMessage()
    assert "type=invalid_request_error" in retry.getMessage()  # the body's codes may be told


async def test_a_provider_error_logged_with_its_traceback_does_not_carry_the_body(provider, open_stream):
    provider.queue([HTTPError(400, QUOTING)])
    with pytest.raises(StreamError) as refused:
        await open_stream(messages=[{"role": "user", "content": QUESTION}], tools=None, tool_choice="auto")

    assert SECRET in refused.value.detail  # kept for Support, on the turn, until erased
    assert SECRET not in "".join(traceback.format_exception(refused.value))
