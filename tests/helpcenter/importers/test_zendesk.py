"""Zendesk Help Center, against a local server that plays its API: pages,
locales, drafts and restricted articles, rate limits and 5xx, a token, saved
JSON, and a sync after edits with the right counts."""

import base64
import io
import json

import pytest
from django.core.management import CommandError, call_command

from helpcenter.models import Article, Source
from tests.helpcenter.import_servers import ZENDESK, Fault

pytestmark = pytest.mark.django_db


def run(*args, **kwargs) -> str:
    out = io.StringIO()
    call_command("import_help_center", *[str(a) for a in args], "--no-embed", stdout=out, **kwargs)
    return out.getvalue()


def test_the_api_imports_every_page_of_two_locales_linked(zendesk):
    out = run("zendesk", zendesk.url, "--locale", "en-us,pt-br", "--name", "Acme")

    # 24 in English, less the restricted one; 2 in Portuguese
    assert "25 added, 0 updated, 0 unchanged, 0 unpublished" in out
    pages = [r for r in zendesk.requests if r["path"].endswith("articles.json")]
    assert len(pages) == 3 + 1  # 24 articles at 10 a page, then pt-br's one page
    refunds = Article.objects.get(title="Refund policy")
    reembolso = Article.objects.get(title="Política de reembolso")
    assert refunds.locale == "en-us" and reembolso.locale == "pt-br"
    assert refunds.translation_key == reembolso.translation_key == refunds.external_id
    assert refunds.source_url.startswith("https://acme.zendesk.com/hc/en-us/articles/")
    assert refunds.section == "360002222"
    assert refunds.source_updated_at is not None
    assert refunds.published


def test_html_becomes_markdown_with_its_headings_links_and_code(zendesk):
    run("zendesk", zendesk.url)

    widget = Article.objects.get(title="Installing the feedback widget on your website")
    assert "## Add the script tag" in widget.body
    assert '```html\n<script\n  src="https://widget.kookee.io/v1/widget.js"' in widget.body
    assert "<p>" not in widget.body and "h_01J" not in widget.body
    assert "1. Go to **Settings → Widget → Installation**." in widget.body


def test_drafts_come_in_unpublished_and_restricted_articles_stay_out(zendesk):
    articles = json.loads((ZENDESK / "articles.en-us.json").read_text())
    draft, restricted = articles[22], articles[23]

    run("zendesk", zendesk.url)

    assert Article.objects.get(external_id=str(draft["id"])).published is False
    assert not Article.objects.filter(external_id=str(restricted["id"])).exists()


def test_a_resync_after_edits_counts_each_kind(zendesk):
    run("zendesk", zendesk.url, "--locale", "en-us", "--locale", "pt-br")
    en = zendesk.articles["en-us"]
    en[0]["body"] += "<h2>Troubleshooting</h2><p>Clear the cache.</p>"
    en[1]["updated_at"] = "2026-12-01T00:00:00Z"  # touched, not changed
    removed = en.pop(5)
    en.append({**en[2], "id": 999, "title": "Brand new", "name": "Brand new", "body": "<p>New.</p>"})

    out = run("zendesk", zendesk.url)  # the locales are the source's now

    assert "1 added, 1 updated, 23 unchanged, 1 unpublished" in out
    assert "## Troubleshooting" in Article.objects.get(external_id=str(en[0]["id"])).body
    assert Article.objects.get(external_id=str(removed["id"])).published is False
    assert "0 added, 0 updated, 25 unchanged, 0 unpublished" in run("zendesk", zendesk.url)


def test_429_waits_for_retry_after_and_5xx_is_retried(zendesk, monkeypatch):
    from helpcenter.importers import fetch

    waited = []
    monkeypatch.setattr(fetch, "pause", waited.append)
    zendesk.faults.extend([Fault(429, retry_after="3"), Fault(503), Fault(500)])

    assert "23 added" in run("zendesk", zendesk.url)

    assert waited == [3.0, fetch.BACKOFF_SECONDS[1], fetch.BACKOFF_SECONDS[2]]  # Retry-After, then backoff
    assert len(zendesk.requests) == 3 + 3  # the three faults, then the three pages


def test_a_server_that_keeps_failing_stops_the_sync_and_unpublishes_nothing(zendesk):
    run("zendesk", zendesk.url)
    zendesk.faults.extend([Fault(502)] * 10)

    with pytest.raises(CommandError, match="answered 502 after 5 attempts"):
        run("zendesk", zendesk.url)

    assert Article.objects.filter(published=True).count() == 22
    assert "502" in Source.objects.get().last_error


def test_a_token_from_the_environment_is_sent_and_never_stored(zendesk, monkeypatch):
    credentials = "agent@acme.example/token:s3cr3t"
    zendesk.token = "Basic " + base64.b64encode(credentials.encode()).decode()
    monkeypatch.setenv("KOOKEE_SOURCE_TOKEN_ZENDESK", credentials)

    assert "23 added" in run("zendesk", zendesk.url, "--token-env", "KOOKEE_SOURCE_TOKEN_ZENDESK")

    source = Source.objects.get()
    assert source.token_env == "KOOKEE_SOURCE_TOKEN_ZENDESK"
    assert "s3cr3t" not in json.dumps([source.settings, source.state, source.token_encrypted, source.last_error])


def test_a_refused_token_is_a_clear_error(zendesk, monkeypatch):
    zendesk.token = "Bearer right"
    monkeypatch.setenv("KOOKEE_SOURCE_TOKEN_ZENDESK", "wrong")

    with pytest.raises(CommandError, match="answered 401"):
        run("zendesk", zendesk.url, "--token-env", "KOOKEE_SOURCE_TOKEN_ZENDESK")
    assert not Article.objects.exists()


def test_a_next_page_on_another_host_is_not_followed(zendesk, monkeypatch):
    original = zendesk.answer

    def elsewhere(*args):
        answer = original(*args)
        page = json.loads(answer.body)
        page["next_page"] = "http://169.254.169.254/latest/meta-data/"
        answer.body = json.dumps(page).encode()
        return answer

    monkeypatch.setattr(zendesk, "answer", elsewhere)
    with pytest.raises(CommandError, match="another host"):
        run("zendesk", zendesk.url)
    assert all(r["path"].startswith("/api/v2/help_center/") for r in zendesk.requests)


def test_saved_json_files_import_the_same(tmp_path):
    folder = tmp_path / "export"
    folder.mkdir()
    for name in ("en-us", "pt-br"):
        articles = json.loads((ZENDESK / f"articles.{name}.json").read_text())
        (folder / f"{name}.json").write_text(json.dumps({"articles": articles, "next_page": None}))

    assert "25 added" in run("zendesk", folder)
    assert Article.objects.filter(locale="pt-br").count() == 2


def test_a_link_out_of_a_saved_folder_is_not_read(tmp_path):
    # The folder may be all that KOOKEE_IMPORT_ROOT lets a source read: a
    # link in it to a file elsewhere reads nothing, as in a Markdown folder.
    outside = tmp_path / "elsewhere.json"
    articles = json.loads((ZENDESK / "articles.en-us.json").read_text())
    outside.write_text(json.dumps({"articles": articles, "next_page": None}))
    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "en-us.json").write_text(json.dumps({"articles": articles[:1], "next_page": None}))
    (folder / "more.json").symlink_to(outside)

    assert "1 added" in run("zendesk", folder)
    assert Article.objects.count() == 1


def test_a_saved_file_that_is_not_a_zendesk_page_is_refused(tmp_path):
    (tmp_path / "x.json").write_text('{"results": []}')
    with pytest.raises(CommandError, match="not a Zendesk articles page"):
        run("zendesk", tmp_path / "x.json")


def test_cursor_pagination_is_followed_too(zendesk, monkeypatch):
    """Zendesk's newer pagination: meta.has_more and links.next, no next_page."""
    original = zendesk.answer

    def cursor(path, query, headers):
        answer = original(path, query, headers)
        page = json.loads(answer.body)
        following = page.pop("next_page")
        page["meta"] = {"has_more": following is not None, "after_cursor": "xyz" if following else None}
        page["links"] = {"next": following, "prev": None}
        answer.body = json.dumps(page).encode()
        return answer

    monkeypatch.setattr(zendesk, "answer", cursor)

    assert "23 added" in run("zendesk", zendesk.url)
    assert len(zendesk.requests) == 3


def test_hostile_html_never_reaches_the_markdown_or_the_page(zendesk, client):
    zendesk.articles["en-us"] = [
        {
            **zendesk.articles["en-us"][0],
            "title": "Hostile",
            "body": (
                '<p onclick="steal()">Hello <img src=x onerror="alert(1)"> <a href="javascript:alert(2)">click</a></p>'
                "<script>alert(3)</script><style>body{display:none}</style>"
                '<iframe src="https://evil.example"></iframe>'
                "<p>&lt;script&gt;alert(4)&lt;/script&gt;</p>"
            ),
        }
    ]
    run("zendesk", zendesk.url)
    article = Article.objects.get(title="Hostile")

    for gone in ("onclick", "onerror", "javascript:", "alert(3)", "display:none", "iframe", "evil.example"):
        assert gone not in article.body
    assert article.body.startswith("Hello")
    page = client.get(article.get_absolute_url()).content.decode()
    assert "<script>alert(4)" not in page  # the text is data for the renderer, escaped
    assert "alert(3)" not in page


def test_the_token_never_reaches_a_log_line_or_an_error(zendesk, monkeypatch, caplog):
    monkeypatch.setenv("KOOKEE_SOURCE_TOKEN_ZENDESK", "agent@acme.example/token:s3cr3t-value")
    zendesk.token = "Basic nope"
    caplog.set_level("DEBUG")

    with pytest.raises(CommandError) as raised:
        run("zendesk", zendesk.url, "--token-env", "KOOKEE_SOURCE_TOKEN_ZENDESK")

    assert "s3cr3t-value" not in str(raised.value)
    assert "s3cr3t-value" not in caplog.text
    assert "s3cr3t-value" not in Source.objects.get().last_error


@pytest.mark.parametrize(
    "location",
    [
        "{url}/hc/en-us",  # the help center's own page, pasted
        "{url}/api/v2/help_center/en-us/articles.json",  # the endpoint itself
    ],
)
def test_a_help_center_page_or_the_endpoint_itself_works_as_the_location(zendesk, location):
    assert "23 added" in run("zendesk", location.format(url=zendesk.url))


def test_a_relative_next_page_is_followed(zendesk, monkeypatch):
    original = zendesk.answer

    def relative(*args):
        answer = original(*args)
        page = json.loads(answer.body)
        if page["next_page"]:
            page["next_page"] = page["next_page"].replace(zendesk.url, "")
        answer.body = json.dumps(page).encode()
        return answer

    monkeypatch.setattr(zendesk, "answer", relative)
    assert "23 added" in run("zendesk", zendesk.url)


def test_a_saved_plain_list_of_articles_imports(tmp_path):
    (tmp_path / "articles.json").write_text((ZENDESK / "articles.en-us.json").read_text())
    assert "23 added" in run("zendesk", tmp_path / "articles.json")


def test_a_next_page_that_is_the_page_itself_is_refused_after_one_repeat(zendesk):
    """The audit's: a next_page pointing back at itself was fetched 120 times in 6 s."""
    run("zendesk", zendesk.url)
    zendesk.requests.clear()
    zendesk.loop = True

    with pytest.raises(CommandError, match=r"articles\.json, read already in this sync \(the pages loop\)"):
        run("zendesk", zendesk.url)

    # The first page, then itself at its own address: its next page is that one again.
    assert [r["query"] for r in zendesk.requests] == ["per_page=100", "page=1&per_page=10"]
    assert Article.objects.filter(published=True).count() == 22  # nothing unpublished
    assert "the pages loop" in Source.objects.get().last_error


def test_no_more_pages_are_read_than_the_first_announces(zendesk, monkeypatch):
    original = zendesk.answer

    def endless(path, query, headers):
        answer = original(path, query, headers)
        page = json.loads(answer.body)
        page["next_page"] = f"{zendesk.url}{path}?page={page['page'] + 1}&per_page=10"  # new, empty pages forever
        answer.body = json.dumps(page).encode()
        return answer

    monkeypatch.setattr(zendesk, "answer", endless)
    with pytest.raises(CommandError, match="more than 4 pages"):
        run("zendesk", zendesk.url)
    # 24 articles at 10 a page are 3 pages; one more for articles added while it is read.
    assert len(zendesk.requests) == 4
    assert not Article.objects.exists()
