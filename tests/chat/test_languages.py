"""The socket speaks each tab's language: what the server tells a visitor
(an error, why a turn failed) is in the language their browser asked for
on the handshake, while the codes stay the same."""

import pytest
from channels.testing import WebsocketCommunicator

from kookee.asgi import application
from tests.chat.chat_client import HOST, ORIGIN, ChatClient, new_session_key
from tests.provider import HTTPError

pytestmark = pytest.mark.django_db(transaction=True)


async def tab(session_key: str, language: str) -> ChatClient:
    headers = [(b"origin", ORIGIN), (b"host", HOST), (b"cookie", f"sessionid={session_key}".encode())]
    if language:
        headers.append((b"accept-language", language.encode()))
    client = ChatClient(WebsocketCommunicator(application, "/ws/chat/", headers=headers))
    client.connected, _ = await client.communicator.connect()
    return client


@pytest.mark.parametrize(
    ("accept_language", "message"),
    [
        ("pt-BR,pt;q=0.9,en;q=0.8", "As mensagens podem ter no máximo 4000 caracteres."),
        ("pt", "As mensagens podem ter no máximo 4000 caracteres."),
        ("en-US,en;q=0.9", "Messages are limited to 4000 characters."),
        ("de-DE,fr;q=0.8", "Messages are limited to 4000 characters."),
        ("", "Messages are limited to 4000 characters."),
    ],
)
async def test_a_refused_frame_is_explained_in_the_tabs_language(settings, accept_language, message):
    settings.KOOKEE_MAX_MESSAGE_CHARS = 4000
    client = await tab(await new_session_key(), accept_language)
    try:
        await client.send({"type": "message", "text": "x" * 4001})
        frame = await client.receive_until("error")
    finally:
        await client.close()
    assert (frame["code"], frame["message"]) == ("too_long", message)


async def test_a_failed_turn_is_explained_to_each_tab_in_its_own_language(use_provider):
    use_provider.queue([HTTPError(400, {"error": {"message": "unknown model"}})])
    key = await new_session_key()
    portuguese, english = await tab(key, "pt-BR"), await tab(key, "en")
    try:
        turn_id = await english.ask("hello?")
        in_english = await english.receive_until("error", turn_id=turn_id)
        in_portuguese = await portuguese.receive_until("error", turn_id=turn_id)
        await english.finish(turn_id)
    finally:
        await portuguese.close()
        await english.close()
    assert in_english["code"] == in_portuguese["code"] == "provider_rejected"
    assert in_english["message"] == "The assistant could not take this request. Please try again later."
    assert in_portuguese["message"] != in_english["message"]
    assert "tente novamente" in in_portuguese["message"].lower()
