"""Help-center ranking over the demo help center."""

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from chat.engine.tools import NO_GOOD_MATCH, with_advice
from helpcenter import index as help_center_module
from helpcenter import passages
from helpcenter import ranking as search
from helpcenter.models import Article
from helpcenter.search import RESULTS
from helpcenter.search import search_sync as search_help_center_sync

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
    return slug_of(articles[0]["url"]) if articles else None


def rank_of(question, slug):
    returned = [slug_of(a["url"]) for a in search_help_center_sync(question)["articles"]]
    return returned.index(slug) + 1 if slug in returned else None


# By words alone, sections ranked and fused with their articles: the right
# article among the three for every question, and first for all but two
# (measured: "can I get my money back if I cancel?" gets Cancel your
# subscription first, "too many emails" the changelog's email section).
def test_author_and_own_questions_find_the_right_article(help_center):
    asked = [(q["question"], q["slug"]) for q in AUTHOR_QUESTIONS] + OWN_QUESTIONS
    ranks = {question: rank_of(question, slug) for question, slug in asked}

    assert all(ranks.values()), [q for q, rank in ranks.items() if rank is None]
    assert sum(rank != 1 for rank in ranks.values()) <= 2, [q for q, rank in ranks.items() if rank != 1]


def test_the_demo_help_center_is_big_enough(help_center):
    assert Article.objects.filter(published=True).count() >= 25


def test_results_carry_id_title_url_and_a_snippet(help_center):
    [first, *_] = search_help_center_sync("install the widget script tag")["articles"]
    assert {"id", "title", "url", "snippet", "score", "confidence"} <= set(first)
    assert first["confidence"] == "high"
    article = Article.objects.get(pk=first["id"])
    # The link goes to the section that matched, on the article's page.
    assert first["title"] == article.title
    assert first["url"].startswith(article.get_absolute_url() + "#")
    assert first["url"].split("#")[1] in passages.anchors(article.body)
    assert first["section"] in article.body
    assert 0 < len(first["snippet"]) <= 281


def test_unpublished_articles_are_never_returned(help_center):
    draft = Article.objects.filter(published=False).first()
    assert draft is not None
    found = search_help_center_sync(draft.title)["articles"]
    assert draft.id not in [a["id"] for a in found]


def test_a_query_of_only_stopwords_finds_nothing(help_center):
    assert search_help_center_sync("how do I")["articles"] == []


def test_an_empty_query_is_an_error(help_center):
    with pytest.raises(ValueError):
        search_help_center_sync("  ")


def test_loading_the_demo_twice_keeps_edits(help_center):
    article = Article.objects.get(slug="refund-policy")
    article.title = "Refunds (edited)"
    article.save()
    call_command("load_demo_help_center", stdout=io.StringIO())
    assert Article.objects.get(slug="refund-policy").title == "Refunds (edited)"
    assert Article.objects.filter(slug="refund-policy").count() == 1


# --- the relevance floor ----------------------------------------------------------------------

# Questions the demo help center does not answer (measured: the floor separates
# them from the two lists above).
UNANSWERED_QUESTIONS = [
    "Can I pay with bitcoin?",
    "do you have a desktop app for windows?",
    "what's the weather in Paris today",
    "how do I bake sourdough bread",
    "is Kookee HIPAA compliant?",
    "do you offer a discount for nonprofits",
    "can I self-host kookee on premise",
    "does kookee integrate with salesforce",
    "can I pay by paypal",
    "what is the meaning of life",
    "tell me a joke",
    "do you support right to left languages like arabic",
    "can I translate the portal into german",
    "crypto payments",
]
ANSWERED_QUESTIONS = [(q["question"], q["slug"]) for q in AUTHOR_QUESTIONS] + OWN_QUESTIONS


def slug_of(url):
    return url.split("#")[0].strip("/").split("/")[-1]


@pytest.mark.parametrize(("question", "slug"), ANSWERED_QUESTIONS)
def test_answered_questions_find_their_article_above_the_floor(help_center, question, slug):
    result = search_help_center_sync(question)
    assert "no_good_match" not in result
    [article] = [a for a in result["articles"] if slug_of(a["url"]) == slug]
    assert article["confidence"] == "high"
    hits = {hit.document.id: hit for hit in help_center_module.current_sync().index.hits(question, limit=100)}
    assert hits[article["id"]].good
    assert article["score"] == round(hits[article["id"]].relevance, 2)
    assert result["top_score"] == max(a["score"] for a in result["articles"])


# Stems match more than plurals did: by words alone, "desktop app for
# windows" now clears the floor on an article that says window.KookeeWidget
# and "app", and "translate the portal into german" on the one that says
# Germany. Meaning (the default) is what tells those apart.
LOOSE_BY_WORDS = {"do you have a desktop app for windows?", "can I translate the portal into german"}


def test_unanswered_questions_mostly_clear_no_floor(help_center):
    cleared = {q for q in UNANSWERED_QUESTIONS if any(h.good for h in help_center_module.current_sync().index.hits(q))}
    assert cleared <= LOOSE_BY_WORDS


@pytest.mark.parametrize("question", [q for q in UNANSWERED_QUESTIONS if q not in LOOSE_BY_WORDS])
def test_unanswered_questions_get_no_good_match(help_center, question):
    hits = help_center_module.current_sync().index.hits(question)
    assert not any(hit.good for hit in hits)

    result = with_advice(search_help_center_sync(question))  # as the model reads it

    assert set(result) == {"articles", "confidence", "no_good_match", "top_score", "closest", "note"}
    assert result["no_good_match"] is True
    assert result["confidence"] == ("low" if hits else "none")
    # The closest are still the model's to judge, marked as such; never hidden.
    by_id = {hit.document.id: hit for hit in help_center_module.current_sync().index.hits(question, limit=100)}
    assert len(result["articles"]) == min(RESULTS, len(by_id))
    assert {a["id"] for a in result["articles"]} <= set(by_id)  # each shares a word with the question
    assert {a["confidence"] for a in result["articles"]} <= {"low"}
    assert result["note"] == NO_GOOD_MATCH
    # The closest articles by title and score, with nothing to quote.
    assert result["closest"] == [
        {"id": a["id"], "title": by_id[a["id"]].document.title, "score": round(by_id[a["id"]].relevance, 2)}
        for a in result["articles"]
    ]
    scores = [c["score"] for c in result["closest"]]
    assert result["top_score"] == (max(scores) if scores else None)


def test_a_question_that_shares_words_with_articles_still_has_a_top_score(help_center):
    result = search_help_center_sync("Can I pay with bitcoin?")
    assert result["no_good_match"] is True
    assert result["top_score"] > 0  # "pay" is in articles: the closest ones have scores
    assert len(result["closest"]) == RESULTS
    assert all(set(c) == {"id", "title", "score"} for c in result["closest"])


def test_a_question_sharing_no_word_with_any_article_has_no_closest(help_center):
    result = search_help_center_sync("how do I bake sourdough bread")
    assert (result["no_good_match"], result["top_score"], result["closest"]) == (True, None, [])
    assert (result["articles"], result["confidence"]) == ([], "none")


def test_articles_above_the_floor_come_first_with_high_confidence(help_center):
    question = "How do I download all my posts and votes as a CSV?"
    hits = help_center_module.current_sync().index.hits(question, limit=RESULTS)
    result = search_help_center_sync(question)
    returned = [(a["id"], a["confidence"]) for a in result["articles"]]
    assert any(hit.good for hit in hits)  # the question is answered
    confidences = [confidence for _, confidence in returned]
    assert confidences == sorted(confidences, key=lambda c: c != "high")  # high ones first
    good = {hit.document.id for hit in help_center_module.current_sync().index.hits(question, limit=100) if hit.good}
    assert returned == [(article, "high" if article in good else "low") for article, _ in returned]
    assert "no_good_match" not in result
    assert result["confidence"] == "high"


# The floor's rules, at its thresholds (helpcenter/ranking.py's docstring).
def hit(relevance, coverage, strength):
    return search.Hit(search.Document(1, "t", "/help/t/", "b"), relevance, coverage, strength)


@pytest.mark.parametrize(
    ("relevance", "coverage", "strength", "good"),
    [
        (search.MIN_RELEVANCE, search.MIN_COVERAGE, 0.0, True),  # enough relevance and coverage
        (search.MIN_RELEVANCE - 0.01, 1.0, 0.0, False),  # too little relevance
        (5.0, search.MIN_COVERAGE - 0.01, 0.0, False),  # relevant to the filler words only
        (search.STRONG_RELEVANCE, 0.1, search.STRONG_STRENGTH, True),  # strong: the missed words are filler
        (search.STRONG_RELEVANCE - 0.01, 0.1, 9.0, False),
        (9.0, 0.1, search.STRONG_STRENGTH - 0.01, False),
    ],
)
def test_the_floor_at_its_thresholds(relevance, coverage, strength, good):
    assert hit(relevance, coverage, strength).good is good


def document(number, title, body):
    return search.Document(number, title, f"/help/{number}/", body)


def test_relevance_is_one_for_every_term_once_in_an_article_of_average_length():
    for filler in (1, 9):  # whatever the size of the help center
        others = [document(n, f"other{n}", "lorem ipsum dolor sit") for n in range(2, 2 + filler)]
        index = search.Index([document(1, "First", "alpha beta gamma delta"), *others])
        [best] = index.hits("beta", limit=1)
        assert best.document.id == 1
        assert best.relevance == pytest.approx(1.0)
        assert best.coverage == pytest.approx(1.0)


def test_coverage_is_the_share_of_the_querys_weight_an_article_contains():
    index = search.Index(
        [document(1, "Paying", "pay by card"), document(2, "Plans", "plans and pricing"), document(3, "Cards", "card")]
    )
    [best] = index.hits("pay card bitcoin", limit=1)
    pay, card, bitcoin = index._idf("pay"), index._idf("card"), index._idf("bitcoin")
    # A term no article contains weighs as much as the rarest one an article
    # does, no more: "pay" here (a typo or a word of asking must not outweigh
    # the subject).
    rarest = min(bitcoin, pay)
    assert bitcoin > pay > card and rarest == pay
    assert best.coverage == pytest.approx((pay + card) / (pay + card + rarest))
    assert best.strength == pytest.approx(best.relevance * (pay + card + rarest) / bitcoin)


@pytest.mark.parametrize("articles", [1, 3])
def test_a_tiny_help_center_answers_a_one_word_query_an_article_contains(db, articles):
    bodies = [
        ("Billing", "Download invoices from the billing page."),
        ("Boards", "Create a board for each product."),
        ("Widget", "Paste the script tag into your site."),
    ][:articles]
    for number, (title, body) in enumerate(bodies):
        Article.objects.create(title=title, slug=f"article-{number}", body=body)

    result = search_help_center_sync("invoices")

    assert "no_good_match" not in result
    assert [a["title"] for a in result["articles"]] == ["Billing"]
    [best] = help_center_module.current_sync().index.hits("invoices", limit=1)
    assert best.good


def test_normalised_groups_the_same_question_in_other_words():
    assert search.normalised("Can I pay with bitcoin?") == search.normalised("pay in bitcoins") == "bitcoin pay"
    assert search.normalised("pay by card") != search.normalised("pay in bitcoins")
    assert search.normalised("how do I") == ""


@pytest.mark.parametrize(
    ("question", "slug"),
    [
        ("explain how sso works", "saml-single-sign-on"),
        ("how do refunds work", "refund-policy"),
        ("tell me about refunds", "refund-policy"),
        ("please explain how to export data", "export-your-data"),
    ],
)
def test_words_of_asking_do_not_weigh_as_the_subject(help_center, question, slug):
    # "explain", "tell", "work" are in no article: as the query's rarest
    # words, they would sink the coverage of the article that answers it.
    result = search_help_center_sync(question)
    assert slug_of(result["articles"][0]["url"]) == slug


def test_a_query_of_only_asking_words_finds_nothing(help_center):
    assert search_help_center_sync("tell me a joke")["articles"] == []


def test_a_tiny_help_center_answers_a_question_with_words_it_does_not_use(db):
    Article.objects.create(title="Invoices", slug="invoices", body="Download your invoices from Billing.")
    Article.objects.create(title="Install the widget", slug="widget", body="Paste the script tag.")

    assert top_slug("where can I find my invoices for accounting") == "invoices"
    assert search_help_center_sync("can I pay with bitcoin?")["articles"] == []


def test_accents_neither_split_words_nor_tell_them_apart():
    assert search.terms("Não consigo ver a cobrança") == search.terms("nao consigo ver a cobranca")
    assert search.terms("cobrança") == search.terms("cobranca") == search.terms("COBRANCA")
    assert search.normalised("Como faço para cancelar minha assinatura?") == "assinatura cancelar"
