"""Calibration: each model's characters per token, learnt from what the
provider reported, so that a round cut short is estimated in its terms."""

import asyncio
import json
import math

import pytest
from channels.db import database_sync_to_async

from billing import calibration
from billing.calibration import MIN_SAMPLES, Ratio
from billing.models import Calibration, LedgerEntry
from billing.tokens import CHARS_PER_TOKEN as DEFAULT_CHARS_PER_TOKEN
from tests.chat.chat_client import ChatClient
from tests.provider import CHUNK_BASE, DONE, WaitFor, chunk, finish, text

pytestmark = pytest.mark.django_db

# --- the moving average -------------------------------------------------------------------------


def test_the_first_samples_are_averaged():
    ratio = Ratio()
    for chars, tokens in [(250, 100), (300, 100), (200, 100)]:
        ratio.add(chars, tokens)
    assert ratio.samples == 3
    assert ratio.chars_per_token == pytest.approx(2.5)


def test_the_default_holds_until_there_are_enough_samples():
    ratio = Ratio()
    for _ in range(MIN_SAMPLES - 1):
        ratio.add(250, 100)
    assert ratio.in_use == DEFAULT_CHARS_PER_TOKEN
    ratio.add(250, 100)
    assert ratio.in_use == pytest.approx(2.5)


def test_later_samples_move_the_average_a_little_each():
    ratio = Ratio(2.5, 1000)
    ratio.add(500, 100)  # one odd round
    assert 2.5 < ratio.chars_per_token < 2.7


def test_samples_are_kept_within_sane_bounds():
    ratio = Ratio()
    for _ in range(MIN_SAMPLES):
        ratio.add(100_000, 20)  # 5,000 characters a token: a broken count
    assert ratio.in_use == calibration.BOUNDS[1]
    low = Ratio()
    for _ in range(MIN_SAMPLES):
        low.add(20, 2000)
    assert low.in_use == pytest.approx(calibration.BOUNDS[0])


def test_tiny_rounds_teach_nothing():
    ratio = Ratio()
    ratio.add(9, 3)  # mostly framing
    ratio.add(0, 50)
    assert ratio.samples == 0


# --- shared through the database ------------------------------------------------------------------


def observe_many(model, prompt_ratio, output_ratio, count=5):
    for _ in range(count):
        calibration.observe(model, int(1000 * prompt_ratio), 1000, int(200 * output_ratio), 200)


def test_what_a_process_learns_is_saved_and_read_by_another():
    observe_many("m1", 2.5, 3.0)
    assert calibration.ratios("m1") == pytest.approx((2.5, 3.0))
    assert not Calibration.objects.exists()  # memory first: estimates never wait for the database

    calibration.flush()

    row = Calibration.objects.get(model="m1")
    assert (row.input_samples, row.output_samples) == (5, 5)
    assert (row.input_chars_per_token, row.output_chars_per_token) == pytest.approx((2.5, 3.0))
    calibration.forget()  # another process, which learnt nothing itself
    assert calibration.ratios("m1") == (DEFAULT_CHARS_PER_TOKEN, DEFAULT_CHARS_PER_TOKEN)
    calibration.load("m1")
    assert calibration.ratios("m1") == pytest.approx((2.5, 3.0))


def test_two_processes_samples_are_merged_not_overwritten():
    observe_many("m1", 2.0, 2.0)
    calibration.flush()
    calibration.forget()  # the second process
    observe_many("m1", 3.0, 3.0)
    calibration.flush()

    row = Calibration.objects.get(model="m1")
    assert row.input_samples == 10
    assert row.input_chars_per_token == pytest.approx(2.5)


def test_loading_keeps_what_was_learnt_here_and_not_yet_saved():
    Calibration.objects.create(model="m1", input_chars_per_token=2.0, input_samples=5)
    observe_many("m1", 3.0, 3.0, count=5)

    calibration.load("m1")

    assert calibration.ratios("m1")[0] == pytest.approx(2.5)


def test_models_are_calibrated_apart():
    observe_many("m1", 2.5, 2.5)
    observe_many("m2", 5.0, 5.0)
    assert calibration.ratios("m1") == pytest.approx((2.5, 2.5))
    assert calibration.ratios("m2") == pytest.approx((5.0, 5.0))


# --- end to end: a provider whose tokenizer is not 4 characters a token ---------------------------

CHARS_PER_TOKEN = 2.5  # the scripted provider's tokenizer, like Llama's on Portuguese
ANSWERS = [
    "Para instalar o widget, cole a tag de script no HTML do seu site, antes do fechamento do body. "
    "Depois publique a página e recarregue: o botão de feedback aparece no canto inferior direito.",
    "Você pode exportar os pedidos do quadro em CSV na página de configurações, em Exportar. O arquivo "
    "traz título, votos, status e a data de criação de cada pedido, com os comentários em uma coluna.",
    "O roadmap público mostra o que está planejado, em andamento e concluído. Cada item vem de um pedido "
    "do quadro, e os votantes recebem um e-mail quando o status muda, se ativaram as notificações.",
]
STOPPED = (
    "Para conectar o SSO, abra Configurações, depois Segurança, e escolha o provedor SAML da sua empresa. "
    "Cole a URL de metadados fornecida pelo seu provedor de identidade e salve. Os membros entram com o "
    "e-mail corporativo a partir do próximo login, e quem ainda não tem conta é criado automaticamente."
)


def counted_prompt(body):
    """What this provider bills for a request: every message's role and text,
    its tool calls, and the tool definitions, plus 5 tokens a message."""
    chars = sum(
        len(m["role"]) + len(m.get("content") or "") + len(json.dumps(m.get("tool_calls") or ""))
        for m in body["messages"]
    )
    chars += len(json.dumps(body.get("tools") or []))
    return math.ceil(chars / CHARS_PER_TOKEN) + 5 * len(body["messages"])


def counted_output(content):
    return math.ceil(len(content) / CHARS_PER_TOKEN)


def counting_answer(content):
    def script(body):
        pieces = [text(content[i : i + 12]) for i in range(0, len(content), 12)]
        usage = {"prompt_tokens": counted_prompt(body), "completion_tokens": counted_output(content)}
        return [chunk(delta={"role": "assistant", "content": ""}), *pieces, finish("stop"), _usage(usage), DONE]

    return script


def _usage(usage):
    return {**CHUNK_BASE, "choices": [], "usage": {**usage, "total_tokens": sum(usage.values())}}


async def stopped_turn(chat, provider, content, stop_after):
    """A turn stopped after `stop_after` characters were shown; returns its
    ledger entry and what the provider counted for the same text."""
    shown_part = content[:stop_after]
    pieces = [text(shown_part[i : i + 12]) for i in range(0, len(shown_part), 12)]
    provider.queue([chunk(delta={"role": "assistant", "content": ""}), *pieces, WaitFor(asyncio.Event())])
    turn_id = await chat.ask("Como conecto o SSO?")
    request = await provider.wait_for_request(len(provider.requests) + 1)
    while chat.text_of(turn_id) != shown_part.rstrip():
        await chat.receive_until("delta", turn_id=turn_id)
    await chat.send({"type": "stop"})
    ended = await chat.finish(turn_id)
    assert ended["status"] == "interrupted"
    entry = await database_sync_to_async(LedgerEntry.objects.get)(turn_id=turn_id)
    assert entry.estimated
    return entry, counted_prompt(request.body), counted_output(shown_part)


def off_by(estimate, actual):
    return abs(estimate - actual) / actual


@pytest.mark.django_db(transaction=True)
async def test_a_stopped_round_is_estimated_within_10_percent_once_calibrated(use_provider):
    chat = await ChatClient.connect()
    try:
        # Before calibration: 4 characters a token undercounts this tokenizer.
        entry, prompt, output = await stopped_turn(chat, use_provider, STOPPED, 150)
        assert off_by(entry.input_tokens, prompt) > 0.2
        assert off_by(entry.output_tokens, output) > 0.2

        for content in ANSWERS:
            use_provider.queue(counting_answer(content))
            turn_id = await chat.ask("Uma pergunta")
            await chat.finish(turn_id)

        for stop_after in (40, len(STOPPED) - 30):  # stopped early, and late
            entry, prompt, output = await stopped_turn(chat, use_provider, STOPPED, stop_after)
            assert off_by(entry.input_tokens, prompt) < 0.10, (entry.input_tokens, prompt)
            assert off_by(entry.output_tokens, output) < 0.10, (entry.output_tokens, output)
    finally:
        await chat.close()
