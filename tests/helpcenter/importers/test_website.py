"""A website, against a local server: robots.txt, a sitemap index, a crawl
within its prefix, main content only, conditional requests on re-runs,
redirect loops, and what the crawler refuses to fetch (SSRF)."""

import io

import pytest
from django.core.management import CommandError, call_command

from helpcenter.importers import fetch
from helpcenter.importers.fetch import Fetcher, URLRefused
from helpcenter.models import Article, Source

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = io.StringIO()
    call_command("import_help_center", *[str(a) for a in args], "--no-embed", stdout=out)
    return out.getvalue()


def test_a_crawl_stays_in_its_prefix_and_obeys_robots(site):
    out = run("website", f"{site.url}/docs/", "--name", "Acme docs")

    assert "4 added, 0 updated, 0 unchanged, 0 unpublished" in out
    assert sorted(Article.objects.values_list("external_id", flat=True)) == [
        "/docs/",
        "/docs/api/webhooks.html",
        "/docs/billing/refunds.html",
        "/docs/getting-started.html",
    ]
    fetched = site.paths()
    assert fetched[0] == "/robots.txt"
    assert "/docs/private/secret.html" not in fetched  # Disallow
    assert "/blog/" not in fetched and "/pricing" not in fetched  # outside /docs/


def test_a_page_keeps_its_main_content_headings_links_and_code(site):
    run("website", f"{site.url}/docs/")

    webhooks = Article.objects.get(external_id="/docs/api/webhooks.html")
    assert webhooks.title == "Webhooks"  # its <h1>, out of the body
    assert webhooks.locale == "en"
    assert webhooks.source_url == f"{site.url}/docs/api/webhooks.html"
    assert webhooks.body.startswith("Webhooks tell your systems")
    assert "## Verify the signature" in webhooks.body
    assert "```python\nimport hmac, hashlib\n\ndef verify(" in webhooks.body
    for noise in ("dataLayer", "Pricing", "Privacy", "Accept all", "Was this page helpful", "Search the docs"):
        assert noise not in webhooks.body
    index = Article.objects.get(external_id="/docs/")
    assert f"[Getting started]({site.url}/docs/getting-started.html)" in index.body  # links made absolute


def test_a_sitemap_index_lists_the_pages_robots_allow(site):
    out = run("website", f"{site.url}/sitemap_index.xml")

    assert "5 added" in out  # four docs and the blog; not the disallowed page
    assert Article.objects.filter(external_id="/blog/").exists()
    assert not Article.objects.filter(external_id="/docs/private/secret.html").exists()
    assert "/docs/private/secret.html" not in site.paths()


def test_a_rerun_asks_conditionally_and_counts_edits_and_removals(site):
    run("website", f"{site.url}/docs/")
    site.requests.clear()
    site.pages["/docs/billing/refunds.html"] = (site_file("docs/billing/refunds.html")).replace("30 days", "45 days")
    site.gone.add("/docs/api/webhooks.html")

    out = run("website", f"{site.url}/docs/")

    assert "0 added, 1 updated, 2 unchanged, 1 unpublished" in out
    conditional = [r for r in site.requests if "if-none-match" in r["headers"]]
    assert {r["path"] for r in conditional} == {
        "/docs/",
        "/docs/getting-started.html",
        "/docs/billing/refunds.html",
        "/docs/api/webhooks.html",
    }
    assert "45 days" in Article.objects.get(external_id="/docs/billing/refunds.html").body
    assert Article.objects.get(external_id="/docs/api/webhooks.html").published is False


def test_a_redirect_loop_and_a_redirect_away_are_skipped(site):
    site.redirects["/docs/loop-a.html"] = "/docs/loop-b.html"
    site.redirects["/docs/loop-b.html"] = "/docs/loop-a.html"
    site.redirects["/docs/away.html"] = "http://example.com/phish"
    site.pages["/docs/"] = site_file("docs/index.html").replace(
        "<h2>Popular topics</h2>",
        '<h2>Popular topics</h2><a href="/docs/loop-a.html">loop</a> <a href="/docs/away.html">away</a>',
    )

    assert "4 added" in run("website", f"{site.url}/docs/")

    assert site.paths().count("/docs/loop-a.html") == 1
    assert not Article.objects.filter(external_id__contains="loop").exists()


def test_the_page_limit_holds(site):
    assert "2 added" in run("website", f"{site.url}/docs/", "--max-pages", "2")
    assert len([p for p in site.paths() if p.startswith("/docs/")]) == 2


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/",
        "http://localhost:9/",
        "http://10.0.0.8/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]:9/",
        "http://[::ffff:127.0.0.1]:9/",
        "http://192.168.1.1/",
    ],
)
def test_private_addresses_are_refused(settings, url):
    settings.KOOKEE_IMPORT_ALLOW_PRIVATE = False
    with Fetcher(url) as fetcher, pytest.raises(URLRefused, match="private or local address"):
        fetcher.get(url)


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/", "gopher://example.com/", "data:,hi"])
def test_other_schemes_are_refused(url):
    with pytest.raises(URLRefused, match="not an http"):
        Fetcher(url)


def test_a_site_on_a_private_address_is_refused_whole(site, settings):
    settings.KOOKEE_IMPORT_ALLOW_PRIVATE = False

    with pytest.raises(CommandError, match="private or local address"):
        run("website", f"{site.url}/docs/")
    assert site.requests == []
    assert not Article.objects.exists()


def test_a_redirect_to_another_host_is_refused(site):
    site.redirects["/robots.txt"] = "http://169.254.169.254/latest/meta-data/"
    with Fetcher(site.url) as fetcher, pytest.raises(URLRefused, match="not on the source's host"):
        fetcher.get(f"{site.url}/robots.txt")


def test_a_page_larger_than_the_limit_is_not_read(site, settings):
    settings.KOOKEE_IMPORT_MAX_BYTES = 1000
    with Fetcher(site.url) as fetcher, pytest.raises(fetch.FetchError, match="larger than 1000 bytes"):
        fetcher.get(f"{site.url}/docs/getting-started.html")


def test_a_fetch_that_takes_too_long_is_abandoned(site, settings):
    from tests.helpcenter.import_servers import Fault

    settings.KOOKEE_IMPORT_TIMEOUT = 0.2
    site.faults.extend([Fault(200, stall=1.0)] * 5)
    with Fetcher(site.url) as fetcher, pytest.raises(fetch.FetchError, match="ReadTimeout"):
        fetcher.get(f"{site.url}/docs/")


def test_a_website_source_must_be_a_url(tmp_path):
    with pytest.raises(CommandError, match="is a URL"):
        run("website", tmp_path)
    assert not Source.objects.exists()


def site_file(path: str) -> str:
    from tests.helpcenter.import_servers import SITE

    return (SITE / path).read_text()


def test_a_page_at_two_addresses_is_one_article_and_files_are_not_fetched(site):
    index = site_file("docs/index.html")
    site.pages["/docs/index.html"] = index
    site.pages["/docs/"] = index.replace(
        "<h2>Popular topics</h2>",
        '<h2>Popular topics</h2><a href="/docs/index.html">home</a> <a href="/docs/guide.pdf">the PDF</a>',
    ).replace("<head>", '<head><link rel="canonical" href="/docs/">')
    site.pages["/docs/index.html"] = site.pages["/docs/"]

    assert "4 added" in run("website", f"{site.url}/docs/")

    assert "/docs/guide.pdf" not in site.paths()
    assert Article.objects.filter(external_id="/docs/").count() == 1


def test_a_start_page_robots_disallow_is_not_read(site):
    site.pages["/robots.txt"] = "User-agent: *\nDisallow: /docs/\n"

    assert "0 added" in run("website", f"{site.url}/docs/")
    assert site.paths() == ["/robots.txt"]


def test_a_start_url_without_its_slash_is_its_folder(site):
    assert "4 added" in run("website", f"{site.url}/docs")
    assert "/blog/" not in site.paths()


def test_the_refusal_says_how_to_allow_a_source_on_this_machine(settings):
    settings.KOOKEE_IMPORT_ALLOW_PRIVATE = False
    with Fetcher("http://127.0.0.1:9/") as fetcher, pytest.raises(URLRefused, match="KOOKEE_IMPORT_ALLOW_PRIVATE=true"):
        fetcher.get("http://127.0.0.1:9/")


def test_a_rerun_through_a_redirect_or_a_canonical_address_keeps_its_articles(site):
    # The guide names another address as its own, which nothing links to.
    site.pages["/docs/getting-started.html"] = site_file("docs/getting-started.html").replace(
        "<head>", '<head><link rel="canonical" href="/docs/start/">'
    )
    run("website", f"{site.url}/docs")  # redirected to /docs/
    assert Article.objects.filter(external_id="/docs/start/").exists()

    out = run("website", f"{site.url}/docs")  # every page answers 304

    assert "0 added, 0 updated, 4 unchanged, 0 unpublished" in out
    assert Article.objects.filter(published=True).count() == 4


@pytest.fixture
def sitemap_bomb():
    from tests.helpcenter.import_servers import SitemapBombServer

    server = SitemapBombServer()
    yield server
    server.close()


def test_a_sitemap_index_of_huge_sitemaps_is_read_only_until_max_pages(sitemap_bomb):
    """The audit's: 6 gzip sitemaps of 900,000 URLs each, read whole (1.09 GB)
    although --max-pages 3."""
    out = run("website", f"{sitemap_bomb.url}/sitemap_index.xml", "--max-pages", "3")

    assert "3 added" in out
    fetched = sitemap_bomb.paths()
    assert fetched[:3] == ["/robots.txt", "/sitemap_index.xml", "/sitemaps/1.xml.gz"]  # not sitemaps 2 to 6
    assert sorted(fetched[3:]) == ["/0", "/1", "/2"]


def test_a_sitemap_is_read_up_to_its_limit_of_urls(monkeypatch):
    from helpcenter.importers import website
    from tests.helpcenter.import_servers import SitemapBombServer

    monkeypatch.setattr(website, "MAX_SITEMAP_URLS", 5)
    server = SitemapBombServer(sitemaps=1, urls=8)
    try:
        assert "5 added" in run("website", f"{server.url}/sitemaps/1.xml.gz")
    finally:
        server.close()
    assert sorted(p for p in server.paths() if p.strip("/").isdigit()) == ["/0", "/1", "/2", "/3", "/4"]


def test_an_index_is_read_up_to_its_limit_of_sitemaps(monkeypatch):
    from helpcenter.importers import website
    from tests.helpcenter.import_servers import SitemapBombServer

    monkeypatch.setattr(website, "MAX_SITEMAPS", 3)  # the index and two of its sitemaps
    server = SitemapBombServer(sitemaps=6, urls=2)
    try:
        run("website", f"{server.url}/sitemap_index.xml")
    finally:
        server.close()
    assert [p for p in server.paths() if p.startswith("/sitemaps/")] == ["/sitemaps/1.xml.gz", "/sitemaps/2.xml.gz"]


def test_a_gzip_sitemap_is_ungzipped_only_up_to_its_limit(monkeypatch):
    from helpcenter.importers import website
    from tests.helpcenter.import_servers import SitemapBombServer

    monkeypatch.setattr(website, "MAX_SITEMAP_BYTES", 100_000)
    server = SitemapBombServer(sitemaps=1, urls=100_000)  # 4 MB of XML, 0.2 MB gzipped
    try:
        with pytest.raises(CommandError, match="larger than 100000 bytes"):
            run("website", f"{server.url}/sitemaps/1.xml.gz", "--max-pages", "100000")
    finally:
        server.close()
    assert not [p for p in server.paths() if p.strip("/").isdigit()]  # no page read before the refusal


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE urlset [
  <!ENTITY a "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa">
  <!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">
  <!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">
  <!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">
  <!ENTITY e "&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;">
]>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>{origin}/docs/&e;</loc></url></urlset>
"""


def test_a_sitemap_with_a_doctype_is_refused_and_unpublishes_nothing(site):
    assert "5 added" in run("website", f"{site.url}/sitemap_index.xml")
    site.pages["/sitemap-docs.xml"] = BILLION_LAUGHS

    with pytest.raises(CommandError, match="a sitemap with a DOCTYPE is refused"):
        run("website", f"{site.url}/sitemap_index.xml")

    assert Article.objects.filter(published=True).count() == 5


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("<html><body>Not a sitemap</body></html>", r"is not a sitemap \(<html>\)"),
        ('<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>', "not XML"),
    ],
)
def test_a_sitemap_that_is_not_one_is_a_clear_error(site, body, error):
    site.pages["/sitemap-docs.xml"] = body
    with pytest.raises(CommandError, match=error):
        run("website", f"{site.url}/sitemap-docs.xml")


def test_image_locations_in_a_sitemap_are_not_pages(site):
    site.pages["/sitemap-docs.xml"] = (
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        'xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">'
        "<url><loc>{origin}/docs/</loc><image:image><image:loc>{origin}/logo.png</image:loc></image:image></url>"
        "</urlset>"
    )
    assert "1 added" in run("website", f"{site.url}/sitemap-docs.xml")
    assert "/logo.png" not in site.paths()
