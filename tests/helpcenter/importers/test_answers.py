"""Imported articles answer visitors: through the WebSocket, from the
imported article, with its section's link; in the visitor's language when
the article has a version in it, and in the other when not."""

import io

import pytest
from django.core.management import call_command

from helpcenter import search
from helpcenter.models import Article
from tests.chat.chat_client import ChatClient
from tests.chat.engine.test_offline import offline_model  # noqa: F401  (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def imported(zendesk):
    call_command(
        "import_help_center", "zendesk", zendesk.url, "--locale", "en-us,pt-br", "--no-embed", stdout=io.StringIO()
    )
    return {a.title: a for a in Article.objects.all()}


def test_a_search_shows_one_version_of_an_article_in_the_visitors_language(imported):
    refunds, reembolso = imported["Refund policy"], imported["Política de reembolso"]

    english = search.search_sync("How do I request a refund of an annual plan?", language="en")
    portuguese = search.search_sync("How do I request a refund of an annual plan?", language="pt-br")

    assert english["articles"][0]["id"] == refunds.pk
    assert portuguese["articles"][0]["id"] == reembolso.pk  # the same article, in Portuguese
    assert portuguese["articles"][0]["confidence"] == english["articles"][0]["confidence"]
    for found in (english, portuguese):
        ids = [a["id"] for a in found["articles"]]
        assert not {refunds.pk, reembolso.pk} <= set(ids), "one version of an article, not both"


def test_an_article_without_the_visitors_language_is_found_in_the_other(imported):
    found = search.search_sync("install the feedback widget script tag", language="pt-br")

    assert found["articles"][0]["title"] == "Installing the feedback widget on your website"


@pytest.mark.usefixtures("offline_model")
async def test_a_visitor_is_answered_from_the_imported_article_with_its_section_link(imported):
    refunds = imported["Refund policy"]
    client = await ChatClient.connect(language="en-US,en;q=0.9")
    try:
        turn_id = await client.ask("How do I request a refund?")
        ended = await client.finish(turn_id)
    finally:
        await client.close()

    answer = client.text_of(turn_id)
    assert ended["status"] == "completed"
    assert f"(/help/{refunds.slug}/#how-to-request-a-refund)" in answer
    assert "Approved refunds go back to the original payment method" in answer  # the imported article's words
    assert [s["url"] for s in ended["sources"]] == [f"/help/{refunds.slug}/#how-to-request-a-refund"]


@pytest.mark.usefixtures("offline_model")
async def test_a_portuguese_visitor_is_answered_from_the_portuguese_version(imported):
    reembolso = imported["Política de reembolso"]
    client = await ChatClient.connect(language="pt-BR,pt;q=0.9")
    try:
        turn_id = await client.ask("Como pedir reembolso do plano anual?")
        ended = await client.finish(turn_id)
    finally:
        await client.close()

    assert [s["url"].split("#")[0] for s in ended["sources"]] == [f"/help/{reembolso.slug}/"]
    answer = client.text_of(turn_id)
    assert "Reembolsos aprovados voltam para o meio de pagamento original" in answer
    assert "(em inglês)" not in answer  # it is in Portuguese


def test_the_model_is_told_which_languages_the_articles_are_in(imported):
    from chat.engine import prompt

    told = prompt.system_prompt()

    assert "The articles are in English and Portuguese: search in the visitor's language" in told
    assert "Política de reembolso" in told
    Article.objects.filter(locale="pt-br").update(published=False)
    from helpcenter import index

    index.forget()
    assert prompt.IN_ENGLISH in prompt.system_prompt()


async def test_a_language_that_is_not_text_is_a_bad_tool_call():
    from chat.engine import tools

    with pytest.raises(ValueError, match="language must be a string"):
        await tools.SEARCH_HELP_CENTER.run(query="refunds", language=["pt"])
