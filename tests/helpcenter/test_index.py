"""The help center's in-memory index: built once per process, dropped when an
article is saved or deleted here, rechecked (one aggregate) at most every
KOOKEE_HELP_CENTER_RECHECK_SECONDS for changes made by another process."""

import io
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.core.management import call_command
from django.db import connection

from chat.engine import prompt
from chat.engine.tools import SEARCH_HELP_CENTER, with_advice
from helpcenter import index as help_center
from helpcenter.models import Article
from helpcenter.search import search_sync as search_help_center_sync

HOUR = 3600


class Clock:
    """Stands in for the `time` module in helpcenter.index only (asyncio keeps the real one)."""

    def __init__(self, now=1000.0):
        self.now = now

    def monotonic(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(help_center, "time", fake)
    return fake


@pytest.fixture
def slow_recheck(settings):
    settings.KOOKEE_HELP_CENTER_RECHECK_SECONDS = HOUR
    return settings


def add(title, body, slug=None, published=True):
    return Article.objects.create(
        title=title, slug=slug or title.lower().replace(" ", "-"), body=body, published=published
    )


def found_titles(query):
    return [a["title"] for a in search_help_center_sync(query)["articles"]]


def behind_the_orms_back(article, **fields):
    """An update as another process would make it: no signal reaches this one."""
    later = Article.objects.get(pk=article.pk).updated_at + timedelta(seconds=1)
    assert Article.objects.filter(pk=article.pk).update(updated_at=later, **fields) == 1


@pytest.fixture
def articles(db, slow_recheck):
    return {
        "widget": add("Install the widget", "Paste the script tag before the closing body tag."),
        "refunds": add("Refund policy", "Refunds are given within 30 days of purchase."),
        "draft": add("Secret roadmap", "Quantum feedback boards, not announced.", published=False),
    }


# --- the snapshot -------------------------------------------------------------------------------


def test_a_snapshot_holds_the_published_articles(articles):
    snapshot = help_center.current_sync()
    assert isinstance(snapshot, help_center.Snapshot)
    assert snapshot.titles == ["Install the widget", "Refund policy"]
    assert [d.title for d in snapshot.index.rank("refund")] == ["Refund policy"]
    assert snapshot.index.rank("quantum") == []
    assert snapshot.stamp == (3, Article.objects.latest("updated_at").updated_at, None, 0)


def test_a_fresh_snapshot_costs_no_query(articles, django_assert_num_queries):
    first = help_center.current_sync()
    with django_assert_num_queries(0):
        assert help_center.current_sync() is first
        assert found_titles("widget") == ["Install the widget"]


def test_an_empty_help_center(db):
    snapshot = help_center.current_sync()
    assert (snapshot.titles, snapshot.index.rank("anything")) == ([], [])
    found = search_help_center_sync("widget")
    assert (found["articles"], found["no_good_match"], found["top_score"]) == ([], True, None)
    add("Install the widget", "Paste it.")
    assert found_titles("widget") == ["Install the widget"]


# --- changes made in this process: seen at once --------------------------------------------------


def test_saving_an_article_is_seen_at_once(articles):
    assert found_titles("widget") == ["Install the widget"]
    article = articles["widget"]
    article.title = "Embed the feedback widget"
    article.save()
    assert found_titles("widget") == ["Embed the feedback widget"]
    assert "Embed the feedback widget" in help_center.current_sync().titles


def test_a_new_article_is_seen_at_once(articles):
    assert found_titles("invoices") == []
    add("Download invoices", "Invoices are under Billing.")
    assert found_titles("invoices") == ["Download invoices"]


def test_the_singular_finds_the_plural(articles):
    add("Download invoices", "Invoices are under Billing.")
    assert found_titles("invoice") == ["Download invoices"]


def test_deleting_an_article_is_seen_at_once(articles):
    assert found_titles("refund") == ["Refund policy"]
    articles["refunds"].delete()
    assert found_titles("refund") == []


def test_a_queryset_delete_is_seen_at_once(articles):
    assert found_titles("refund") == ["Refund policy"]
    Article.objects.filter(slug="refund-policy").delete()
    assert found_titles("refund") == []


def test_unpublishing_removes_it_from_search_and_the_system_prompt(articles):
    assert found_titles("refund") == ["Refund policy"]
    assert "- Refund policy" in prompt.system_prompt()
    article = articles["refunds"]
    article.published = False
    article.save()
    assert found_titles("refund") == []
    assert "Refund policy" not in prompt.system_prompt()
    assert "- Install the widget" in prompt.system_prompt()


def test_publishing_a_draft_adds_it(articles):
    assert found_titles("quantum") == []
    draft = articles["draft"]
    draft.published = True
    draft.save()
    assert found_titles("quantum") == ["Secret roadmap"]
    assert "- Secret roadmap" in prompt.system_prompt()


# --- changes made by another process: seen after the recheck interval ---------------------------


def test_a_change_behind_the_orms_back_waits_for_the_recheck(articles, settings):
    before = help_center.current_sync()
    behind_the_orms_back(articles["widget"], title="Embed the widget")
    assert help_center.current_sync() is before
    assert found_titles("widget") == ["Install the widget"]
    assert "- Install the widget" in prompt.system_prompt()

    settings.KOOKEE_HELP_CENTER_RECHECK_SECONDS = 0
    after = help_center.current_sync()
    assert after is not before
    assert found_titles("widget") == ["Embed the widget"]
    assert "- Embed the widget" in prompt.system_prompt()
    assert "Install the widget" not in prompt.system_prompt()


def test_the_recheck_is_due_exactly_after_the_interval(articles, settings, clock, django_assert_num_queries):
    settings.KOOKEE_HELP_CENTER_RECHECK_SECONDS = 5
    before = help_center.current_sync()
    behind_the_orms_back(articles["refunds"], title="Refunds and credits")
    clock.now += 4.99
    with django_assert_num_queries(0):
        assert help_center.current_sync() is before
    clock.now += 0.01
    after = help_center.current_sync()
    assert after is not before
    assert after.checked_at == clock.now
    assert "Refunds and credits" in after.titles


def test_an_unchanged_stamp_costs_one_query_and_keeps_the_index(articles, settings, clock, django_assert_num_queries):
    settings.KOOKEE_HELP_CENTER_RECHECK_SECONDS = 5
    before = help_center.current_sync()
    clock.now += 60
    with django_assert_num_queries(1):
        after = help_center.current_sync()
    assert after.index is before.index
    assert after.titles is before.titles
    assert after.checked_at == clock.now
    # Checked again just now: fresh for another interval.
    with django_assert_num_queries(0):
        assert help_center.current_sync() is after


def test_unpublished_behind_the_orms_back(articles, settings):
    help_center.current_sync()
    behind_the_orms_back(articles["refunds"], published=False)
    assert found_titles("refund") == ["Refund policy"]
    settings.KOOKEE_HELP_CENTER_RECHECK_SECONDS = 0
    assert found_titles("refund") == []
    assert "Refund policy" not in prompt.system_prompt()


def test_deleted_behind_the_orms_back(articles, settings):
    help_center.current_sync()
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {Article._meta.db_table} WHERE id = %s", [articles["refunds"].pk])
    assert found_titles("refund") == ["Refund policy"]
    settings.KOOKEE_HELP_CENTER_RECHECK_SECONDS = 0
    assert found_titles("refund") == []


def test_added_behind_the_orms_back(articles, settings):
    help_center.current_sync()
    Article.objects.bulk_create([Article(title="Export to CSV", slug="export", body="Export your posts.")])
    assert found_titles("export") == []
    settings.KOOKEE_HELP_CENTER_RECHECK_SECONDS = 0
    assert found_titles("export") == ["Export to CSV"]


# --- from the event loop ------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_current_from_the_event_loop_needs_no_thread_hop_while_fresh(slow_recheck, django_db_blocker):
    await database_sync_to_async(add)("Install the widget", "Paste the script tag.")
    snapshot = await help_center.current()
    assert snapshot.titles == ["Install the widget"]
    # Fresh: it returns without suspending once, so without any database thread...
    coroutine = help_center.current()
    with pytest.raises(StopIteration) as returned:
        coroutine.send(None)
    assert returned.value.value is snapshot
    # ...and with the database blocked in every thread, it still answers.
    with django_db_blocker.block():
        assert await help_center.current() is snapshot
        result = await SEARCH_HELP_CENTER.run(query="widget")
    assert [a["title"] for a in result["articles"]] == ["Install the widget"]


@pytest.mark.django_db(transaction=True)
async def test_current_from_the_event_loop_sees_changes(slow_recheck, settings):
    article = await database_sync_to_async(add)("Install the widget", "Paste the script tag.")
    before = await help_center.current()

    article.title = "Embed the widget"
    await database_sync_to_async(article.save)()
    changed = await help_center.current()
    assert changed.titles == ["Embed the widget"]

    await database_sync_to_async(behind_the_orms_back)(article, title="Widget setup")
    assert await help_center.current() is changed
    settings.KOOKEE_HELP_CENTER_RECHECK_SECONDS = 0
    rechecked = await help_center.current()
    assert rechecked.titles == ["Widget setup"]
    assert before is not changed is not rechecked


# --- the two ways to the search tool ------------------------------------------------------------

QUERIES = [
    "How do I install the widget?",
    "refund for an annual plan",
    "rotate an API key",
    "SSO with SAML",
    "export my data as CSV",
    "zzzz qqqq",
]


@pytest.mark.django_db(transaction=True)
async def test_the_sync_and_async_tools_give_the_same_results(slow_recheck):
    await database_sync_to_async(call_command)("load_demo_help_center", stdout=io.StringIO())
    for query in QUERIES:
        # Each way builds its own index (the cache dropped as a save would).
        help_center.forget()
        from_the_loop = await SEARCH_HELP_CENTER.run(query=query)
        help_center.forget()
        from_a_thread = with_advice(await database_sync_to_async(search_help_center_sync)(query))
        assert from_the_loop == from_a_thread
    assert (await SEARCH_HELP_CENTER.run(query="install the widget"))["articles"], "the demo content is searchable"
    assert (await SEARCH_HELP_CENTER.run(query="zzzz qqqq"))["articles"] == []


@pytest.mark.django_db(transaction=True)
async def test_both_tools_refuse_an_empty_query(slow_recheck):
    with pytest.raises(ValueError):
        await SEARCH_HELP_CENTER.run(query="  ")
    with pytest.raises(ValueError):
        await database_sync_to_async(search_help_center_sync)("")


def test_results_point_at_the_live_article(articles):
    [result] = search_help_center_sync("refund")["articles"]
    article = articles["refunds"]
    assert (result["id"], result["title"], result["url"]) == (article.pk, article.title, article.get_absolute_url())
    assert "30 days" in result["snippet"]


def test_published_behind_the_orms_back(articles, settings):
    """Unpublished articles count in the stamp: publishing one elsewhere
    (its updated_at bumped) is seen at the next recheck."""
    assert help_center.current_sync().stamp[0] == 3
    behind_the_orms_back(articles["draft"], published=True)
    assert found_titles("quantum") == []
    settings.KOOKEE_HELP_CENTER_RECHECK_SECONDS = 0
    assert found_titles("quantum") == ["Secret roadmap"]
    assert "- Secret roadmap" in prompt.system_prompt()
