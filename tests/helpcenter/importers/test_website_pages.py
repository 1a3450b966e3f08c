"""Real manuals read as a reader sees them, against a local server: a
DocBook handbook in two languages (tests/helpcenter/site/handbook/, as
Publican writes it) and a Sphinx manual (tests/helpcenter/site/sphinx/, as
Django's docs theme writes it). Their languages and translations, their
pages' own titles without the site's chrome, the indexes left out, the
crawl's scope, the passages' size, and the progress shown meanwhile."""

import io

import pytest
from django.core.management import CommandError, call_command

from helpcenter import passages
from helpcenter.importers import html
from helpcenter.importers.sync import Progress
from helpcenter.models import Article, Source

pytestmark = pytest.mark.django_db


def run(*args, out: io.StringIO | None = None) -> str:
    out = out or io.StringIO()
    call_command("import_help_center", *[str(a) for a in args], "--no-embed", stdout=out)
    return out.getvalue()


def by_id() -> dict[str, Article]:
    return {a.external_id: a for a in Article.objects.all()}


def test_a_manual_imported_language_by_language_is_stored_in_each_and_linked(site):
    english = run("website", f"{site.url}/handbook/en-US/index.html")
    portuguese = run("website", f"{site.url}/handbook/pt-BR/index.html")

    # The book's front page is its table of contents: no article, but the crawl follows it.
    assert "2 added, 0 updated, 0 unchanged, 0 unpublished, 1 skipped" in english
    assert "2 added, 0 updated, 0 unchanged, 0 unpublished, 1 skipped" in portuguese
    found = by_id()
    # Its chapters say their language on <div class="chapter" lang>; its
    # sections say nothing: their folder does.
    assert {external_id: a.locale for external_id, a in found.items()} == {
        "/handbook/en-US/apt.html": "en-us",
        "/handbook/en-US/sect.apt-get.html": "en-us",
        "/handbook/pt-BR/apt.html": "pt-br",
        "/handbook/pt-BR/sect.apt-get.html": "pt-br",
    }
    for page in ("apt.html", "sect.apt-get.html"):
        english_page, portuguese_page = found[f"/handbook/en-US/{page}"], found[f"/handbook/pt-BR/{page}"]
        assert english_page.source_id != portuguese_page.source_id
        assert english_page.translation_key == portuguese_page.translation_key
        assert english_page.translation_key == f"127.0.0.1:{site.port}/handbook/{page}"
    assert found["/handbook/pt-BR/sect.apt-get.html"].title == "6.2. Comandos aptitude, apt-get e apt"


def test_a_docbook_page_keeps_its_own_title_and_text_and_leaves_the_books_chrome(site):
    run("website", f"{site.url}/handbook/en-US/index.html")

    section = Article.objects.get(external_id="/handbook/en-US/sect.apt-get.html")
    chapter = Article.objects.get(external_id="/handbook/en-US/apt.html")
    assert section.title == "6.2. aptitude, apt-get, and apt Commands"  # its <h2>, out of the body
    assert section.body.startswith("APT is a vast project")
    assert "### 6.2.1. Initialization" in section.body
    assert chapter.title == "Chapter 6. Maintenance and Updates: The APT Tools"
    assert "***BACK TO BASICS* Package source and source package**" in chapter.body  # DocBook's sidebar is text
    assert "6.2. aptitude" not in chapter.body  # its table of contents is not
    for article in (section, chapter):
        for chrome in ("Download the ebook", "Prev", "Next", "Home", "The Debian Administrator's Handbook"):
            assert chrome not in article.body


def test_a_sphinx_manual_is_titled_by_its_pages_and_leaves_out_its_indexes(site):
    out = run("website", f"{site.url}/sphinx/index.html")

    # Left out: the hub page (mostly links), the general index, the search
    # page and a module's source listing. The one article is reached only
    # through the hub: an index's links are followed.
    assert "1 added, 0 updated, 0 unchanged, 0 unpublished, 4 skipped" in out
    left_out = {"/sphinx/genindex.html", "/sphinx/search.html", "/sphinx/_modules/django/sessions.html"}
    assert left_out <= set(site.paths())
    sessions = Article.objects.get()
    assert sessions.external_id == "/sphinx/topics/sessions.html"
    assert sessions.title == "How to use sessions"  # not the site's <h1>, "Django 3.2 documentation"
    assert sessions.body.startswith("Django provides full support for anonymous sessions.")
    assert "## Enabling sessions\n" in sessions.body
    for chrome in ("¶", "Django 3.2 documentation", "Previous topic", "Quick search", "Browse", "previous", "next"):
        assert chrome not in sessions.body


def test_a_page_without_a_heading_is_titled_by_its_title_without_the_sites_name(site):
    site.pages["/notes/page.html"] = (
        '<html lang="en"><head><title>Backups \u2014 Acme Admin Guide 2.1</title></head>'
        '<body><div id="hd"><h1><a href="/notes/">Acme Admin Guide 2.1</a></h1></div>'
        "<div><p>Back up the database every night.</p></div></body></html>"
    )
    run("website", f"{site.url}/notes/page.html")

    article = Article.objects.get()
    assert article.title == "Backups"
    assert article.body == "Back up the database every night.\n"


def test_a_page_that_asks_not_to_be_indexed_is_skipped_but_followed(site):
    site.pages["/wiki/start.html"] = (
        '<html lang="en"><head><meta name="robots" content="noindex, follow"></head>'
        '<body><h1>Start</h1><p>Where to begin.</p><a href="/wiki/page.html">the page</a></body></html>'
    )
    site.pages["/wiki/page.html"] = '<html lang="en"><body><h1>The page</h1><p>Its words.</p></body></html>'

    assert "1 added, 0 updated, 0 unchanged, 0 unpublished, 1 skipped" in run("website", f"{site.url}/wiki/start.html")
    assert Article.objects.get().title == "The page"


def test_a_page_wrapped_in_a_form_is_still_an_article(site):
    # ASP.NET WebForms put a whole page in one <form>.
    words = " ".join(["Reset your password from the sign-in page."] * 6)
    site.pages["/kb/reset.aspx"] = (
        f'<html lang="en"><body><form id="aspnetForm" method="post"><div id="content"><h1>Reset your password</h1>'
        f'<p>{words}</p><input type="hidden" name="__VIEWSTATE" value="x"></div></form></body></html>'
    )

    assert "1 added" in run("website", f"{site.url}/kb/reset.aspx")
    assert Article.objects.get().title == "Reset your password"


@pytest.mark.parametrize(
    ("page", "expected"),
    [
        ('<html><head><meta http-equiv="content-language" content="pt-BR"></head><body>', "pt-br"),
        ('<html><head><meta property="og:locale" content="pt_BR"></head><body>', "pt-br"),
        ('<html><body><div class="book" lang="pt-BR">', "pt-br"),
        ('<html lang="en"><body><div class="section" lang="pt-BR">', "pt-br"),  # the content's own, not the site's
        ('<html><body lang="de"><div>', "de"),
    ],
)
def test_a_pages_language_is_what_it_declares_wherever_it_declares_it(site, page, expected):
    site.pages["/lang/page.html"] = f"{page}<h1>Título</h1><p>Algumas palavras.</p></div></body></html>"
    run("website", f"{site.url}/lang/page.html")

    assert Article.objects.get().locale == expected


def test_a_pages_declaration_beats_its_folder_and_an_undeclared_page_takes_its_referrers(site):
    # GIMP's pt_BR help keeps some pages in English, and says so.
    site.pages["/help/pt_BR/preface.html"] = (
        '<html><body><div class="sect1" lang="en"><h2>Preface</h2><p>Not translated yet.</p>'
        '<a href="/help/pt_BR/next.html">next</a></div></body></html>'
    )
    site.pages["/help/pt_BR/next.html"] = "<html><body><h1>Próximo</h1><p>Em português.</p></body></html>"
    site.pages["/books/start.html"] = (
        '<html lang="fr"><body><h1>Début</h1><p>Bonjour.</p><a href="/books/more.html">suite</a></body></html>'
    )
    site.pages["/books/more.html"] = "<html><body><h1>Suite</h1><p>Encore.</p></body></html>"
    run("website", f"{site.url}/help/pt_BR/preface.html")
    run("website", f"{site.url}/books/start.html")

    assert {external_id: a.locale for external_id, a in by_id().items()} == {
        "/help/pt_BR/preface.html": "en",
        "/help/pt_BR/next.html": "pt-br",  # its folder
        "/books/start.html": "fr",
        "/books/more.html": "fr",  # the page that linked to it
    }


def test_hreflang_alternates_link_a_pages_translations_across_sources(site):
    alternates = (
        '<link rel="alternate" hreflang="en" href="/intl/en/pricing.html">'
        '<link rel="alternate" hreflang="pt-BR" href="/intl/pt-br/precos.html">'
        '<link rel="alternate" hreflang="x-default" href="/intl/en/pricing.html">'
    )
    site.pages["/intl/en/pricing.html"] = (
        f'<html lang="en"><head>{alternates}</head><body><main><h1>Pricing</h1><p>Plans.</p></main></body></html>'
    )
    site.pages["/intl/pt-br/precos.html"] = (
        f'<html lang="pt-BR"><head>{alternates}</head><body><main><h1>Preços</h1><p>Planos.</p></main></body></html>'
    )
    run("website", f"{site.url}/intl/en/pricing.html")
    run("website", f"{site.url}/intl/pt-br/precos.html")

    english, portuguese = Article.objects.order_by("source_id")
    assert (english.locale, portuguese.locale) == ("en", "pt-br")
    assert english.translation_key == portuguese.translation_key == f"127.0.0.1:{site.port}/intl/pricing.html"


def test_an_explicit_locale_applies_to_every_page_even_unchanged_ones(site):
    run("website", f"{site.url}/docs/")
    before = dict(Article.objects.values_list("external_id", "pk"))
    site.requests.clear()

    out = run("website", f"{site.url}/docs/", "--locale", "pt-br")

    assert "settings updated" in out
    assert "0 added, 4 updated, 0 unchanged, 0 unpublished" in out
    assert not [r for r in site.requests if "if-none-match" in r["headers"]]  # read again, whatever a 304 would say
    assert set(Article.objects.values_list("locale", flat=True)) == {"pt-br"}
    assert dict(Article.objects.values_list("external_id", "pk")) == before  # the same articles, slugs and links kept
    assert Article.objects.filter(published=True).count() == 4
    # Then asked conditionally again.
    assert "0 added, 0 updated, 4 unchanged, 0 unpublished" in run("website", f"{site.url}/docs/", "--locale", "pt-br")


def test_a_new_converter_reads_every_page_again(site, monkeypatch):
    run("website", f"{site.url}/docs/")
    site.requests.clear()
    monkeypatch.setattr(html, "VERSION", html.VERSION + 1)

    assert "0 added, 4 updated, 0 unchanged, 0 unpublished" in run("website", f"{site.url}/docs/")
    assert not [r for r in site.requests if "if-none-match" in r["headers"]]


def test_a_crawl_stays_in_its_start_folder_unless_its_scope_is_wider(site):
    run("website", f"{site.url}/handbook/en-US/index.html")
    assert {p for p in site.paths() if not p.startswith("/handbook/en-US/")} == {"/robots.txt"}
    site.requests.clear()

    run("website", f"{site.url}/handbook/en-US/index.html", "--scope", "/handbook/")

    assert "/handbook/other-manual/en-US/index.html" in site.paths()
    assert Article.objects.filter(title="Another manual").exists()
    assert Source.objects.get().settings == {"scope": "/handbook/"}


def test_a_scope_on_another_host_is_refused(site):
    with pytest.raises(CommandError, match="not on the start URL's host"):
        run("website", f"{site.url}/docs/", "--scope", "https://example.com/docs/")
    assert not Article.objects.exists()


def test_an_imported_listing_is_cut_into_passages_a_model_reads_whole(site):
    run("website", f"{site.url}/handbook/en-US/index.html")

    section = Article.objects.get(external_id="/handbook/en-US/sect.apt-get.html")
    found = passages.split(section.pk, section.title, section.body)
    assert max(len(p.text.split()) for p in found) <= passages.MAX_WORDS
    listing = [p for p in found if "```" in p.text]
    assert len(listing) > 1
    assert all(p.text.count("```") == 2 and p.text.rstrip().endswith("```") for p in listing)  # each a fenced block
    assert {p.anchor for p in listing} == {"621-initialization"}


def test_the_progress_counts_skipped_pages_and_ends_at_its_total(site):
    run("website", f"{site.url}/sphinx/index.html")
    source = Source.objects.get()
    assert source.progress_done == source.progress_total == 5

    out = run("website", f"{site.url}/sphinx/index.html")  # every page answers 304

    assert "0 added, 0 updated, 1 unchanged, 0 unpublished, 4 skipped" in out
    source.refresh_from_db()
    assert source.progress_done == source.progress_total == 5


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_sees_one_progress_line_updated_in_place(site):
    out = Terminal()
    run("website", f"{site.url}/sitemap_index.xml", out=out)

    importing, progress, result, end = out.getvalue().split("\n")
    assert importing.startswith("Importing Website from")
    assert progress.startswith("\r  read ") and progress.endswith("\r  read 5/5\033[K")
    assert "5 added" in result and end == ""


def test_a_log_sees_a_progress_line_now_and_then(site):
    out = run("website", f"{site.url}/sitemap_index.xml")

    lines = out.splitlines()
    assert len(lines) == 3 and lines[1].startswith("  read ") and "\r" not in out


def test_a_progress_line_says_the_time_left_when_the_total_is_known():
    assert str(Progress(50, 200, 2, seconds=10.0)) == "read 50/200 (2 skipped), ~30 s left"
    assert str(Progress(50, 200, 0, seconds=100.0)) == "read 50/200, ~5 min left"
    assert str(Progress(50, 80, 0, seconds=10.0, growing=True)) == "read 50 of 80 found so far"
    assert str(Progress(80, 80, 1, seconds=10.0, growing=True, finished=True)) == "read 80/80 (1 skipped)"
    assert str(Progress(7, None, 0, seconds=1.0)) == "read 7"
