"""Bounded work: a sync's deadline (KOOKEE_IMPORT_DEADLINE_SECONDS), which
every reader's fetches and waits respect, the API page ceiling a sync reads
at most, and (slow) the audit's two hostile sources imported as an
operator imports them, in a child process, within 100 MB of RSS over the
same command on a benign source and 10 s."""

import io
import time

import pytest
from django.core.management import CommandError, call_command

from helpcenter import importers
from helpcenter.importers import Run, secrets
from helpcenter.importers.sync import sync
from helpcenter.models import Article, Source
from tests.helpcenter.import_servers import Fault, IntercomServer, SitemapBombServer, SiteServer, ZendeskServer
from tests.helpcenter.importers.measure import Importer

pytestmark = pytest.mark.django_db

RSS_MB = 100
SECONDS = 10


def run(*args) -> str:
    out = io.StringIO()
    call_command("import_help_center", *[str(a) for a in args], "--no-embed", stdout=out)
    return out.getvalue()


def test_a_run_has_the_deadline_of_the_setting(settings):
    settings.KOOKEE_IMPORT_DEADLINE_SECONDS = 60
    assert 59 < Run(source=None).deadline - time.monotonic() <= 60


def test_a_wait_longer_than_the_time_left_stops_the_sync_at_once(zendesk, settings):
    run("zendesk", zendesk.url)
    settings.KOOKEE_IMPORT_DEADLINE_SECONDS = 0.5
    zendesk.faults.append(Fault(503, retry_after="1"))

    started = time.monotonic()
    with pytest.raises(CommandError, match=r"out of time \(0\.5 s, KOOKEE_IMPORT_DEADLINE_SECONDS\).*Nothing was"):
        run("zendesk", zendesk.url)

    assert time.monotonic() - started < 0.5  # it did not wait in vain
    assert Article.objects.filter(published=True).count() == 22


def test_a_fetch_is_cut_short_at_the_deadline(site, settings):
    run("website", f"{site.url}/docs/")
    settings.KOOKEE_IMPORT_DEADLINE_SECONDS = 0.5  # the fetch's own timeout is 20 s
    site.faults.append(Fault(200, stall=5))

    started = time.monotonic()
    with pytest.raises(CommandError, match="ran out of time"):
        run("website", f"{site.url}/docs/")

    assert time.monotonic() - started < 2
    assert Article.objects.filter(published=True).count() == 4


def test_a_crawl_delay_past_the_deadline_stops_the_crawl(site, settings):
    site.pages["/robots.txt"] = "User-agent: *\nCrawl-delay: 5\n"
    settings.KOOKEE_IMPORT_DEADLINE_SECONDS = 2

    with pytest.raises(CommandError, match="waiting 5 s more"):
        run("website", f"{site.url}/docs/")
    assert not Article.objects.exists()


def test_an_api_reader_stops_at_the_deadline_too(settings):
    server = IntercomServer([importers_article(n) for n in range(1, 6)])
    source = Source.objects.create(
        kind="intercom", name="I", location=server.url, token_encrypted=secrets.encrypt("ic-token")
    )
    settings.KOOKEE_IMPORT_DEADLINE_SECONDS = 0.5
    server.faults.append(Fault(200, stall=5))
    try:
        with pytest.raises(importers.FetchError, match="ran out of time"):
            sync(source)
    finally:
        server.close()
    assert not Article.objects.exists()
    assert "ran out of time" in Source.objects.get().last_error


def importers_article(number: int) -> dict:
    from tests.helpcenter.import_servers import intercom_article

    return intercom_article(number, f"Article {number}", "<p>Text.</p>")


def test_a_sync_reads_no_more_api_pages_than_its_ceiling(zendesk, monkeypatch):
    monkeypatch.setattr(importers, "MAX_API_PAGES", 3)
    # en-us takes 3 pages, pt-br 1: the fourth page of the sync is not read.
    with pytest.raises(CommandError, match="more than 3 pages in one sync"):
        run("zendesk", zendesk.url, "--locale", "en-us,pt-br")
    assert len(zendesk.requests) == 3


@pytest.mark.slow
def test_the_hostile_sitemap_index_costs_what_a_small_site_does(tmp_path):
    importer = Importer(tmp_path)
    benign, hostile = SiteServer(), SitemapBombServer()
    try:
        baseline = importer.run("website", f"{benign.url}/sitemap_index.xml", "--max-pages", "3")
        cost = importer.run("website", f"{hostile.url}/sitemap_index.xml", "--max-pages", "3", limit=60)
    finally:
        benign.close()
        hostile.close()

    assert baseline.returncode == 0 and cost.returncode == 0, cost.output
    assert "3 added" in cost.output
    assert cost.peak_rss_mb - baseline.peak_rss_mb < RSS_MB
    assert cost.seconds < SECONDS


@pytest.mark.slow
def test_the_self_linking_api_costs_what_a_small_help_center_does(tmp_path):
    importer = Importer(tmp_path)
    benign, hostile = ZendeskServer(), ZendeskServer(loop=True)
    try:
        baseline = importer.run("zendesk", benign.url)
        cost = importer.run("zendesk", hostile.url, limit=60)
    finally:
        benign.close()
        hostile.close()

    assert baseline.returncode == 0, baseline.output
    assert cost.returncode == 1 and "the pages loop" in cost.output, cost.output
    assert len(hostile.requests) == 2
    assert cost.peak_rss_mb - baseline.peak_rss_mb < RSS_MB
    assert cost.seconds < SECONDS
