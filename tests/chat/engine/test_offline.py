"""The built-in offline model, through the app's own provider path: the real
openai client, SSE over the in-process transport, the real search tool."""

import io
import json

import pytest
from channels.db import database_sync_to_async
from django.core.management import call_command

from chat.engine import offline, offline_transport, provider
from chat.models import Generation, Search, ToolCall
from tests.chat.chat_client import ChatClient

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def offline_model(settings):
    settings.OPENAI_API_KEY = ""
    settings.OPENAI_BASE_URL = ""
    settings.KOOKEE_OFFLINE_TOKENS_PER_SECOND = 5000
    settings.KOOKEE_OFFLINE_FIRST_TOKEN_MS = 0


@pytest.fixture
async def chat(offline_model):
    await database_sync_to_async(call_command)("load_demo_help_center", stdout=io.StringIO())
    client = await ChatClient.connect()
    yield client
    await client.close()


def tool_calls_of(turn_id):
    return database_sync_to_async(list)(
        ToolCall.objects.filter(generation__turn_id=turn_id).values_list("generation__round", "arguments")
    )


def test_it_is_the_default(offline_model):
    assert provider.is_offline()
    assert provider.model_name() == "kookee-offline"


@pytest.mark.parametrize("question", ["hi", "Hello!", "hey there", "thanks!"])
async def test_greetings_are_answered_in_one_round(chat, question):
    turn_id = await chat.ask(question)
    ended = await chat.finish(turn_id)
    assert (ended["status"], ended["generations"]) == ("completed", 1)
    assert chat.text_of(turn_id) == offline.GREETING_ANSWER
    assert ended["usage"]["estimated"] is False
    assert ended["usage"]["output_tokens"] > 0
    assert await tool_calls_of(turn_id) == []


async def test_what_can_you_do_is_one_round(chat):
    turn_id = await chat.ask("What can you do?")
    ended = await chat.finish(turn_id)
    assert ended["generations"] == 1
    assert chat.text_of(turn_id) == offline.CAPABILITIES_ANSWER


async def test_a_help_question_narrates_searches_and_cites(chat):
    turn_id = await chat.ask("How do I install the feedback widget on my website?")
    ended = await chat.finish(turn_id)
    assert (ended["status"], ended["generations"]) == ("completed", 2)
    answer = chat.text_of(turn_id)
    narration, _, rest = answer.partition("\n\n")
    assert narration == "Let me search the help center for that."
    assert "(/help/install-feedback-widget/#" in rest  # the section it answers from
    tools = [(f["name"], f["status"]) for f in chat.frames if f["type"] == "tool"]
    assert tools == [("search_help_center", "started"), ("search_help_center", "finished")]
    [(round_number, arguments)] = await tool_calls_of(turn_id)
    assert round_number == 1
    assert "widget" in arguments


async def test_a_two_part_question_makes_two_parallel_calls(chat):
    turn_id = await chat.ask("How do I get a refund? And how do I export my data as CSV?")
    ended = await chat.finish(turn_id)
    assert ended["generations"] == 2
    calls = await tool_calls_of(turn_id)
    assert [r for r, _ in calls] == [1, 1]  # both in the first round
    answer = chat.text_of(turn_id)
    assert "(/help/refund-policy/" in answer
    assert "(/help/export-your-data/" in answer


async def test_it_is_deterministic(chat):
    first = await chat.ask("Can I use SAML single sign-on with Okta?")
    await chat.finish(first)
    second = await chat.ask("Can I use SAML single sign-on with Okta?")
    await chat.finish(second)
    assert chat.text_of(first) == chat.text_of(second)
    assert chat.text_of(first)


async def test_it_records_timings_for_each_round(chat):
    turn_id = await chat.ask("How do webhooks work?")
    await chat.finish(turn_id)
    generations = await database_sync_to_async(list)(Generation.objects.filter(turn_id=turn_id))
    assert [g.finish_reason for g in generations] == ["tool_calls", "stop"]
    assert all(g.started_at <= g.first_delta_at <= g.ended_at for g in generations)


async def test_stop_mid_answer_with_the_offline_model(chat, settings):
    settings.KOOKEE_OFFLINE_TOKENS_PER_SECOND = 20  # slow enough to stop mid-sentence
    turn_id = await chat.ask("hi")
    await chat.receive_until("delta", turn_id=turn_id)
    await chat.send({"type": "stop"})
    ended = await chat.finish(turn_id)
    assert ended["status"] == "interrupted"
    assert 0 < len(chat.text_of(turn_id)) < len(offline.GREETING_ANSWER)
    assert offline.GREETING_ANSWER.startswith(chat.text_of(turn_id))
    assert ended["usage"]["estimated"] is True


async def test_the_stream_stops_generating_when_the_client_closes():
    stream = offline_transport.PacedSSEStream([{"n": i} for i in range(100)], delay=0, first_delay=0)
    received = []
    async for data in stream:
        received.append(data)
        if len(received) == 3:
            await stream.aclose()
    assert len(received) == 3


def test_answers_only_from_tools_when_tools_are_refused():
    reply = offline.respond([{"role": "user", "content": "How do I export data?"}], ["search_help_center"], "none")
    assert reply.queries == []
    assert reply.text == offline.NO_TOOLS_ANSWER


# --- no good match, and Portuguese -------------------------------------------------------------


async def test_a_question_the_help_center_does_not_answer_offers_a_person(chat):
    turn_id = await chat.ask("Can I pay with bitcoin?")
    ended = await chat.finish(turn_id)

    assert (ended["status"], ended["generations"]) == ("completed", 2)
    assert ended["sources"] == []  # the closest articles are not sources
    said = offline.SAID["en"]
    narration, _, answer = chat.text_of(turn_id).partition("\n\n")
    assert narration == said["narration"]
    assert answer.startswith(said["not_covered"]) and answer.endswith(offline.OFFER["en"])
    # It says plainly that what it found is about something else.
    assert "which is something else" in answer
    [(round_number, arguments)] = await tool_calls_of(turn_id)
    assert round_number == 1
    assert json.loads(arguments) == {"query": "Can I pay with bitcoin?"}
    [search] = await database_sync_to_async(list)(Search.objects.filter(turn_id=turn_id))
    assert (search.matched, search.cited, search.article_ids) == (False, False, [])
    assert "handoff" not in ended  # offered, not requested


async def test_an_answered_question_still_cites_its_article(chat):
    turn_id = await chat.ask("Can I get my money back if I cancel?")
    ended = await chat.finish(turn_id)
    assert "/help/refund-policy/" in [s["url"].split("#")[0] for s in ended["sources"]]
    assert offline.OFFER["en"] not in chat.text_of(turn_id)


@pytest.mark.parametrize("greeting", ["oi", "Olá!", "bom dia", "Boa noite!"])
async def test_a_portuguese_greeting_is_answered_in_portuguese(chat, greeting):
    turn_id = await chat.ask(greeting)
    ended = await chat.finish(turn_id)
    assert (ended["status"], ended["generations"]) == ("completed", 1)
    assert chat.text_of(turn_id) == offline.SAID["pt"]["greeting"]
    assert await tool_calls_of(turn_id) == []


@pytest.mark.parametrize("greeting", ["hello", "Good morning!", "hey there"])
async def test_an_english_greeting_stays_english(chat, greeting):
    turn_id = await chat.ask(greeting)
    ended = await chat.finish(turn_id)
    assert ended["generations"] == 1
    assert chat.text_of(turn_id) == offline.GREETING_ANSWER
    assert chat.text_of(turn_id) != offline.SAID["pt"]["greeting"]


async def test_a_portuguese_question_is_searched_in_english_and_answered_in_portuguese(chat):
    turn_id = await chat.ask("Como exportar meus dados para CSV?")
    ended = await chat.finish(turn_id)

    [(_, arguments)] = await tool_calls_of(turn_id)
    assert json.loads(arguments) == {"query": "como export meus data para csv"}  # the help center's words
    assert chat.text_of(turn_id).startswith(offline.SAID["pt"]["narration"])
    assert "Estes são os passos, segundo [" in chat.text_of(turn_id)
    assert "\n1. Go to **Settings → Data → Export**." in chat.text_of(turn_id)
    assert [s["url"].split("#")[0] for s in ended["sources"]] == ["/help/export-your-data/"]


async def test_a_portuguese_question_the_help_center_does_not_answer_offers_a_person_in_portuguese(chat):
    turn_id = await chat.ask("Posso pagar com bitcoin?")
    ended = await chat.finish(turn_id)

    said = offline.SAID["pt"]
    narration, _, answer = chat.text_of(turn_id).partition("\n\n")
    assert narration == said["narration"]
    assert answer.startswith(said["not_covered"]) and answer.endswith(offline.OFFER["pt"])
    assert "que é outra coisa" in answer
    assert ended["sources"] == []


TOOLS_OFFERED = ["search_help_center", "request_human"]


@pytest.mark.parametrize(
    "question",
    [
        "Is the public roadmap human-readable?",
        "How do I chat with customers in the widget, like support does?",
        "Who should I talk to about the API rate limits?",
    ],
)
def test_only_an_explicit_request_hands_over(question):
    reply = offline.respond([{"role": "user", "content": question}], TOOLS_OFFERED, "auto")
    assert reply.handoff is None and reply.queries


@pytest.mark.parametrize(
    ("answer", "handed_over"),
    [
        ("yes please", True),
        ("Sim, por favor!", True),
        ("ok", True),
        ("ok how do I export my data", False),
        ("sure. what are the plans?", False),
        ("quero exportar meus dados", False),
    ],
)
def test_only_a_plain_yes_takes_up_the_offer_of_a_person(answer, handed_over):
    offer = f"{offline.SAID['en']['not_covered']} {offline.OFFER['en']}"
    messages = [
        {"role": "user", "content": "Can I pay with bitcoin?"},
        {"role": "assistant", "content": offer},
        {"role": "user", "content": answer},
    ]
    reply = offline.respond(messages, TOOLS_OFFERED, "auto")
    assert (reply.handoff == "Can I pay with bitcoin?") is handed_over


# --- an answer composed from the passage, not a quoted fragment --------------------------------


@pytest.mark.parametrize(
    ("question", "article", "first_step"),
    [
        ("How do I install the feedback widget?", "/help/install-feedback-widget/", "1. Go to **Settings → Widget"),
        ("How do I merge duplicate posts?", "/help/moderate-posts-duplicates-and-spam/", "1. Open the duplicate post"),
        ("Como cancelar minha assinatura?", "/help/cancel-subscription/", "1. Go to **Settings → Billing**."),
    ],
)
async def test_a_how_to_question_gets_the_steps_with_their_section(chat, question, article, first_step):
    turn_id = await chat.ask(question)
    ended = await chat.finish(turn_id)
    answer = chat.text_of(turn_id).partition("\n\n")[2]

    assert first_step in answer
    assert f"]({article}#" in answer, "the section's link"
    assert [s["url"].split("#")[0] for s in ended["sources"]] == [article]
    _no_bare_heading(answer)


@pytest.mark.parametrize(
    "question", ["How do I set up SSO?", "How much does the Business plan cost?", "Can I get my money back?"]
)
async def test_an_answer_is_part_of_the_passage_never_a_bare_heading(chat, question):
    turn_id = await chat.ask(question)
    await chat.finish(turn_id)
    answer = chat.text_of(turn_id).partition("\n\n")[2]

    _no_bare_heading(answer)
    assert "More in [" in answer or "Here are the steps" in answer


@pytest.mark.parametrize(
    ("question", "language"),
    [("What are the API rate limits?", "en"), ("qual o limite de requisições por minuto da API?", "pt")],
)
async def test_the_table_that_answers_is_quoted_whole_and_its_section_is_the_source(chat, question, language):
    turn_id = await chat.ask(question)
    ended = await chat.finish(turn_id)
    answer = chat.text_of(turn_id).partition("\n\n")[2]

    # The rows of limits, as the article has them (the chat renders Markdown tables).
    assert "| Growth | 60 | 20 per second |" in answer
    assert "| Business | 300 | 50 per second |" in answer
    assert "](/help/api-rate-limits/#limits-per-plan)" in answer
    assert ended["sources"] == [{"title": "REST API rate limits", "url": "/help/api-rate-limits/#limits-per-plan"}]
    assert offline.SAID[language]["more"].partition("%s")[0] + "[REST API rate limits: Limits per plan]" in answer


async def test_the_sources_link_the_section_the_answer_quotes(chat):
    # The search matches the article as a whole (its opening); the answer quotes its steps.
    turn_id = await chat.ask("How do I set up two-factor authentication?")
    ended = await chat.finish(turn_id)
    answer = chat.text_of(turn_id).partition("\n\n")[2]

    assert "1. Click your avatar and go to **Account → Security**." in answer
    assert "](/help/two-factor-authentication/#turn-on-2fa)" in answer
    assert [s["url"] for s in ended["sources"]] == ["/help/two-factor-authentication/#turn-on-2fa"]


def _no_bare_heading(answer: str) -> None:
    assert not [line for line in answer.splitlines() if line.lstrip().startswith("#")], "a bare heading"
