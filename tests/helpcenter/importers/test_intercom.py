"""Intercom Articles, against a local server that plays its API (a Bearer
token, Intercom-Version, pages.next), and from its JSON export."""

import io
import json

import pytest
from django.core.management import CommandError, call_command

from helpcenter.importers import SourceError, secrets
from helpcenter.importers.sync import sync
from helpcenter.models import Article, Source
from tests.helpcenter.import_servers import Fault, IntercomServer, intercom_article

pytestmark = pytest.mark.django_db

ARTICLES = [
    intercom_article(
        1,
        "Export your data",
        "<p>Go to <b>Settings → Export</b>.</p><h2>CSV</h2><p>Every post, as CSV.</p>",
        translated_content={
            "type": "article_translated_content",
            "pt-BR": {
                "type": "article_content",
                "title": "Exportar seus dados",
                "body": "<p>Vá em <b>Configurações → Exportar</b>.</p>",
                "state": "published",
                "url": "https://help.acme.example/pt-BR/articles/8000001",
                "updated_at": 1_734_600_000,
            },
            "es": {"type": "article_content", "title": "", "body": ""},
        },
    ),
    intercom_article(2, "Two-factor authentication", "<p>Use an authenticator app.</p>"),
    intercom_article(3, "Coming soon: SCIM", "<p>Not yet.</p>", state="draft"),
    intercom_article(4, "API keys", "<p>Create them in <a href='/en/articles/8000002'>settings</a>.</p>"),
    intercom_article(5, "Webhooks", "<pre><code>curl -X POST https://example.com/hook</code></pre>"),
]


@pytest.fixture
def intercom():
    server = IntercomServer([dict(a) for a in ARTICLES])
    yield server
    server.close()


@pytest.fixture
def source(intercom):
    return Source.objects.create(
        kind="intercom", name="Intercom", location=intercom.url, token_encrypted=secrets.encrypt("ic-token")
    )


def test_every_page_and_translation_imports(intercom, source):
    result = sync(source)

    assert (result.added, result.updated, result.unchanged, result.unpublished) == (6, 0, 0, 0)
    assert len(intercom.requests) == 3  # five articles, two a page
    assert all(r["headers"]["intercom-version"] for r in intercom.requests)
    export = Article.objects.get(title="Export your data")
    exportar = Article.objects.get(title="Exportar seus dados")
    assert exportar.locale == "pt-br" and export.locale == "en"
    assert exportar.translation_key == export.translation_key == "8000001"
    assert export.body == "Go to **Settings → Export**.\n\n## CSV\n\nEvery post, as CSV.\n"
    assert export.section == "6871118"
    assert Article.objects.get(title="Coming soon: SCIM").published is False
    assert "```\ncurl -X POST https://example.com/hook\n```" in Article.objects.get(title="Webhooks").body
    assert "(https://help.acme.example/en/articles/8000002)" in Article.objects.get(title="API keys").body


def test_a_resync_unpublishes_what_intercom_no_longer_has(intercom, source):
    sync(source)
    intercom.articles.pop(1)
    intercom.articles[0]["translated_content"]["pt-BR"]["body"] = "<p>Vá em <b>Exportar</b>.</p>"

    result = sync(source)

    assert (result.added, result.updated, result.unchanged, result.unpublished) == (0, 1, 4, 1)
    assert Article.objects.get(title="Two-factor authentication").published is False


def test_rate_limits_are_waited_out(intercom, source, monkeypatch):
    from helpcenter.importers import fetch

    waited = []
    monkeypatch.setattr(fetch, "pause", waited.append)
    intercom.faults.append(Fault(429, retry_after="2"))

    assert sync(source).added == 6
    assert waited == [2.0]


def test_the_stored_token_is_encrypted_and_a_wrong_one_is_refused(intercom, source):
    assert "ic-token" not in source.token_encrypted
    source.token_encrypted = secrets.encrypt("wrong")
    source.save()

    with pytest.raises(Exception, match="answered 401"):
        sync(source)
    source.refresh_from_db()
    assert "wrong" not in source.last_error


def test_the_json_export_imports_the_same(tmp_path):
    (tmp_path / "articles.json").write_text(json.dumps({"type": "list", "data": ARTICLES}))
    out = io.StringIO()

    call_command("import_help_center", "intercom", str(tmp_path / "articles.json"), "--no-embed", stdout=out)

    assert "6 added" in out.getvalue()


def test_an_export_that_is_not_an_article_list_is_refused(tmp_path):
    (tmp_path / "x.json").write_text('{"type": "list", "items": 3}')
    with pytest.raises(CommandError, match="not an Intercom article list"):
        call_command("import_help_center", "intercom", str(tmp_path / "x.json"), "--no-embed", stdout=io.StringIO())


@pytest.mark.parametrize(
    ("pages", "following"),
    [
        (
            {"page": 1, "total_pages": 3, "next": "https://api.intercom.io/articles?page=2"},
            "https://api.intercom.io/articles?page=2",
        ),
        (
            {"page": 1, "next": {"page": 2, "starting_after": "WzE3MDc="}},
            "https://api.intercom.io/articles?per_page=50&starting_after=WzE3MDc%3D",
        ),
        ({"page": 2, "total_pages": 3}, "https://api.intercom.io/articles?per_page=50&page=3"),
        ({"page": 3, "total_pages": 3}, None),
        ({"page": 1, "total_pages": 3, "next": None}, None),
    ],
)
def test_every_shape_of_intercoms_next_page(pages, following):
    from helpcenter.importers.intercom import _next

    assert _next("https://api.intercom.io", pages) == following


def test_the_articles_endpoint_itself_works_as_the_location(intercom):
    source = Source.objects.create(
        kind="intercom", name="I", location=intercom.url + "/articles", token_encrypted=secrets.encrypt("ic-token")
    )
    assert sync(source).added == 6


def test_a_next_page_read_already_is_refused(intercom, source, monkeypatch):
    original = intercom.answer

    def back_to_the_first(path, query, headers):
        answer = original(path, query, headers)
        page = json.loads(answer.body)
        page["pages"]["next"] = f"{intercom.url}/articles?page=1"  # page 2 leads back to page 1, and so on
        answer.body = json.dumps(page).encode()
        return answer

    monkeypatch.setattr(intercom, "answer", back_to_the_first)
    with pytest.raises(SourceError, match=r"the next page after page 2 .* read already in this sync"):
        sync(source)
    assert [r["query"] for r in intercom.requests] == ["per_page=50", "page=1"]
    assert not Article.objects.exists()
