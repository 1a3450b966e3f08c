"""Which conversation a visitor's key reaches, once their tab proved who they
are (chat/visitors/access.py `identify`, through the socket's `identify`
frame): an anonymous conversation becomes the verified person's, a person's
stays theirs, and proving another person starts the key afresh, so that
nobody sees the earlier person's conversation. The token is never stored."""

import logging
import time

import jwt
import pytest
from channels.db import database_sync_to_async

from chat.engine.consumers import CLOSE_REFUSED
from chat.models import Conversation, RevokedKey
from chat.visitors.identity import hash_key
from tests.chat.chat_client import ChatClient, new_session_key
from tests.provider import answer

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "the customer's signing key, shared with Kookee only"


@pytest.fixture(autouse=True)
def secret(settings):
    settings.KOOKEE_IDENTITY_SECRET = SECRET


def token(sub="user-42", secret=SECRET, **claims):
    return jwt.encode({"sub": sub, "exp": int(time.time()) + 600, **claims}, secret, algorithm="HS256")


def conversations():
    return database_sync_to_async(lambda: list(Conversation.objects.order_by("id")))()


async def identify(client, signed):
    await client.send({"type": "identify", "token": signed})
    return await client.receive_until("identified")


async def test_a_verified_visitors_first_message_makes_their_conversation(use_provider):
    client = await ChatClient.connect()
    signed = token(name="Ana", email="ana@example.com", attributes={"plan": "pro", "seats": 3})
    assert await identify(client, signed) == {"type": "identified", "id": "user-42", "name": "Ana"}
    use_provider.queue(answer("Hello Ana."))
    await client.finish(await client.ask("hi"))
    (conversation,) = await conversations()
    assert (conversation.verified_id, conversation.verified_name, conversation.verified_email) == (
        "user-42",
        "Ana",
        "ana@example.com",
    )
    assert conversation.verified_attributes == {"plan": "pro", "seats": 3}
    # Only what it vouched for: the token is in no field.
    row = await _row(conversation.pk)
    assert signed not in str(row)
    await client.close()


async def _row(pk):
    return await database_sync_to_async(lambda: Conversation.objects.filter(pk=pk).values().get())()


async def test_an_anonymous_conversation_becomes_the_persons_who_signs_in(use_provider):
    client = await ChatClient.connect()
    use_provider.queue(answer("Hello."), answer("Welcome back."))
    await client.finish(await client.ask("hi"))
    assert (await conversations())[0].verified_id == ""
    await identify(client, token(name="Ana"))
    (conversation,) = await conversations()
    assert (conversation.verified_id, conversation.verified_name) == ("user-42", "Ana")
    # The same person again, with a newer name: still their conversation.
    await identify(client, token(name="Ana Silva"))
    await client.finish(await client.ask("again"))
    (conversation,) = await conversations()
    assert (conversation.verified_id, conversation.verified_name) == ("user-42", "Ana Silva")
    await client.close()


async def test_proving_another_person_starts_afresh_and_never_shows_the_earlier_ones(use_provider):
    key = await new_session_key()
    first = await ChatClient.connect(session_key=key)
    await identify(first, token("user-42", name="Ana"))
    use_provider.queue(answer("Your order ships tomorrow, Ana."))
    await first.finish(await first.ask("where is my order?"))

    await first.send({"type": "identify", "token": token("user-77", name="Bruno")})

    assert await first.refusal() == CLOSE_REFUSED
    # The key reaches nothing now, in any tab: Bruno's page starts afresh.
    assert await database_sync_to_async(RevokedKey.objects.filter(visitor_hash=hash_key(key)).exists)()
    again = await ChatClient.connect(session_key=key)
    assert await again.refusal() == CLOSE_REFUSED
    # A fresh key, proved as Bruno, reaches a conversation of his own, with nothing of Ana's.
    fresh = await ChatClient.connect()
    await identify(fresh, token("user-77", name="Bruno"))
    await fresh.send({"type": "history"})
    history = await fresh.receive_until("history")
    assert history["turns"] == []
    use_provider.queue(answer("Hello Bruno."))
    await fresh.finish(await fresh.ask("hi"))
    anas, brunos = await conversations()
    assert (anas.verified_id, anas.visitor_hash) == ("user-42", "")  # kept for Support, reachable by nobody
    assert brunos.verified_id == "user-77"
    await fresh.close()


@pytest.mark.parametrize(
    "signed",
    [
        pytest.param(lambda: token(secret="somebody else's key, as long as a good one must be"), id="forged"),
        pytest.param(lambda: jwt.encode({"sub": "user-42", "exp": int(time.time()) - 120}, SECRET), id="expired"),
        pytest.param(lambda: jwt.encode({"exp": int(time.time()) + 600}, SECRET), id="no-sub"),
        pytest.param(lambda: jwt.encode({"sub": "user-42"}, SECRET), id="no-exp"),
        pytest.param(lambda: token(exp=int(time.time()) + 10 * 86_400), id="too-far-ahead"),
        pytest.param(lambda: "not.a.jwt", id="garbage"),
        pytest.param(lambda: 42, id="not-a-string"),
    ],
)
async def test_a_token_that_proves_nothing_is_refused_and_changes_nothing(use_provider, signed):
    client = await ChatClient.connect()
    use_provider.queue(answer("Hello."), answer("Still here."))
    await client.finish(await client.ask("hi"))

    await client.send({"type": "identify", "token": signed()})

    error = await client.receive_until("error")
    assert error["code"] == "bad_identity"
    assert (await conversations())[0].verified_id == ""
    # The chat goes on, anonymously.
    ended = await client.finish(await client.ask("still there?"))
    assert ended["status"] == "completed"
    await client.close()


async def test_without_a_secret_nobody_can_be_verified(use_provider, settings):
    settings.KOOKEE_IDENTITY_SECRET = ""
    client = await ChatClient.connect()
    await client.send({"type": "identify", "token": token()})
    assert (await client.receive_until("error"))["code"] == "bad_identity"
    await client.close()


async def test_identify_is_answered_in_the_tabs_language(use_provider):
    client = await ChatClient.connect(language="pt-BR")
    await client.send({"type": "identify", "token": token(secret="a forger's key, long enough to be taken")})
    error = await client.receive_until("error")
    assert error["code"] == "bad_identity" and "verificar o seu login" in error["message"]
    await client.close()


async def test_no_token_reaches_the_log(use_provider, caplog):
    # The reason a token was refused is logged, for the site's developers; the token never is.
    caplog.set_level(logging.DEBUG, logger="kookee")
    logger = logging.getLogger("kookee")
    logger.addHandler(caplog.handler)
    try:
        client = await ChatClient.connect()
        forged = token(secret="a forger's key, long enough to be taken")
        good = token("user-42", name="Ana")
        await client.send({"type": "identify", "token": forged})
        await client.receive_until("error")
        await identify(client, good)
        use_provider.queue(answer("Hello Ana."))
        await client.finish(await client.ask("hi"))
        await client.close()
    finally:
        logger.removeHandler(caplog.handler)
    assert "identify refused" in caplog.text
    assert forged not in caplog.text and good not in caplog.text
    for part in (*forged.split("."), *good.split(".")):
        assert part not in caplog.text
