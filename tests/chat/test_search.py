"""Help-center ranking over the demo help center."""

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from chat.models import HelpArticle
from chat.tools import search_help_center_sync

# Written by the content author with the articles.
AUTHOR_QUESTIONS = json.loads((Path(__file__).parent / "search_questions.json").read_text())

# Written separately, without looking at the ranking.
OWN_QUESTIONS = [
    ("How much does the Growth plan cost per month?", "plans-and-pricing"),
    ("I think my API key leaked, how do I rotate it?", "api-keys"),
    ("how do I turn on 2FA for my account", "two-factor-authentication"),
    ("can new posts show up in our Slack channel?", "integrations-slack-jira-linear-intercom"),
    ("How do I download all my posts and votes as a CSV?", "export-your-data"),
    ("what happens to my bill if I switch to a cheaper plan mid-month?", "upgrade-downgrade-and-proration"),
    ("I get too many emails from Kookee, how do I turn them off?", "email-notification-settings"),
    ("How do I mark an idea as planned or in progress?", "roadmap-statuses"),
    ("how do I write a changelog post for a new release", "publish-changelog-entries"),
    ("I want to permanently delete my workspace", "delete-account-and-data"),
    ("Can we move our existing feedback over from Canny?", "import-feedback-from-another-tool"),
    ("how many requests per minute can I make to the API?", "api-rate-limits"),
    ("where do I download my invoices for accounting?", "invoices-receipts-and-vat"),
    ("how do I create a new board for feature requests?", "create-and-manage-feedback-boards"),
]


@pytest.fixture
def help_center(db):
    call_command("load_demo_help_center", stdout=io.StringIO())


def top_slug(question):
    articles = search_help_center_sync(question)["articles"]
    return articles[0]["url"].strip("/").split("/")[-1] if articles else None


@pytest.mark.parametrize(("question", "slug"), [(q["question"], q["slug"]) for q in AUTHOR_QUESTIONS])
def test_author_questions_find_the_right_article_first(help_center, question, slug):
    assert top_slug(question) == slug


@pytest.mark.parametrize(("question", "slug"), OWN_QUESTIONS)
def test_own_questions_find_the_right_article_first(help_center, question, slug):
    assert top_slug(question) == slug


def test_the_demo_help_center_is_big_enough(help_center):
    assert HelpArticle.objects.filter(published=True).count() >= 25


def test_results_carry_id_title_url_and_a_snippet(help_center):
    [first, *_] = search_help_center_sync("install the widget script tag")["articles"]
    assert set(first) == {"id", "title", "url", "snippet", "score"}
    article = HelpArticle.objects.get(pk=first["id"])
    assert (first["title"], first["url"]) == (article.title, article.get_absolute_url())
    assert 0 < len(first["snippet"]) <= 281


def test_unpublished_articles_are_never_returned(help_center):
    draft = HelpArticle.objects.filter(published=False).first()
    assert draft is not None
    found = search_help_center_sync(draft.title)["articles"]
    assert draft.id not in [a["id"] for a in found]


def test_a_query_of_only_stopwords_finds_nothing(help_center):
    assert search_help_center_sync("how do I")["articles"] == []


def test_an_empty_query_is_an_error(help_center):
    with pytest.raises(ValueError):
        search_help_center_sync("  ")


def test_loading_the_demo_twice_keeps_edits(help_center):
    article = HelpArticle.objects.get(slug="refund-policy")
    article.title = "Refunds (edited)"
    article.save()
    call_command("load_demo_help_center", stdout=io.StringIO())
    assert HelpArticle.objects.get(slug="refund-policy").title == "Refunds (edited)"
    assert HelpArticle.objects.filter(slug="refund-policy").count() == 1
