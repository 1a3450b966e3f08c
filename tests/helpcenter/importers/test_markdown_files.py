"""A folder of Markdown files: front matter, titles, languages, and a sync
that adds, updates, keeps and unpublishes with the right counts."""

import pytest
from django.core.management import CommandError, call_command

from helpcenter.importers.sync import sync
from helpcenter.models import Article, Source

pytestmark = pytest.mark.django_db


def write(root, path, text):
    file = root / path
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(text)


@pytest.fixture
def docs(tmp_path):
    root = tmp_path / "docs"
    write(
        root,
        "billing/refunds.md",
        "---\ntitle: Refund policy\nslug: refunds\n---\nAnnual plans: 14 days.\n\n## How to ask\n\nEmail billing.\n",
    )
    write(root, "getting-started.md", "# Getting started\n\nCreate a workspace.\n\n```bash\nkookee init\n```\n")
    write(root, "draft.md", "---\ntitle: Coming soon\npublished: false\n---\nNot yet.\n")
    write(root, "pt-br/billing/refunds.md", "---\ntitle: Política de reembolso\n---\nPlanos anuais: 14 dias.\n")
    write(root, ".git/notes.md", "# Not an article\n")
    write(root, "README.txt", "not markdown")
    return root


def test_a_folder_imports_with_its_front_matter_titles_and_languages(docs):
    out = run("markdown", docs)

    assert "4 added, 0 updated, 0 unchanged, 0 unpublished" in out
    refunds = Article.objects.get(external_id="billing/refunds.md")
    assert (refunds.title, refunds.slug, refunds.locale, refunds.published) == ("Refund policy", "refunds", "en", True)
    assert refunds.body.startswith("Annual plans: 14 days.\n\n## How to ask")
    started = Article.objects.get(external_id="getting-started.md")
    assert started.title == "Getting started"  # its first heading, out of the body
    assert started.body == "Create a workspace.\n\n```bash\nkookee init\n```\n"
    assert Article.objects.get(external_id="draft.md").published is False
    portuguese = Article.objects.get(external_id="pt-br/billing/refunds.md")
    assert portuguese.locale == "pt-br"
    assert portuguese.translation_key == refunds.translation_key == "billing/refunds"
    assert portuguese.slug != refunds.slug


def test_a_second_run_syncs_edits_removals_and_nothing_else(docs):
    run("markdown", docs)
    typed = Article.objects.create(title="Typed in the admin", slug="typed", body="Mine.")
    before = {a.external_id: a.updated_at for a in Article.objects.exclude(pk=typed.pk)}
    write(docs, "getting-started.md", "# Getting started\n\nCreate a workspace in two minutes.\n")
    (docs / "pt-br/billing/refunds.md").unlink()
    write(docs, "new.md", "# Webhooks\n\nSigned with HMAC.\n")

    out = run("markdown", docs)

    assert "1 added, 1 updated, 2 unchanged, 1 unpublished" in out
    assert Article.objects.get(external_id="getting-started.md").body == "Create a workspace in two minutes.\n"
    assert Article.objects.get(external_id="billing/refunds.md").updated_at == before["billing/refunds.md"]
    gone = Article.objects.get(external_id="pt-br/billing/refunds.md")  # unpublished, not deleted
    assert gone.published is False
    typed.refresh_from_db()
    assert (typed.title, typed.body, typed.published, typed.source) == ("Typed in the admin", "Mine.", True, None)
    assert Source.objects.count() == 1

    assert "0 added, 0 updated, 4 unchanged, 0 unpublished" in run("markdown", docs)  # idempotent


def test_an_article_back_at_the_source_is_published_again(docs):
    run("markdown", docs)
    text = (docs / "getting-started.md").read_text()
    (docs / "getting-started.md").unlink()
    run("markdown", docs)
    write(docs, "getting-started.md", text)

    assert "0 added, 1 updated" in run("markdown", docs)
    assert Article.objects.get(external_id="getting-started.md").published is True


def test_bad_front_matter_fails_the_sync_and_unpublishes_nothing(docs):
    run("markdown", docs)
    write(docs, "zz-broken.md", "---\ntitle: [unclosed\n---\nBody\n")
    (docs / "getting-started.md").unlink()

    with pytest.raises(CommandError, match=r"zz-broken\.md: its front matter is not valid YAML"):
        run("markdown", docs)

    assert Article.objects.get(external_id="getting-started.md").published is True
    source = Source.objects.get()
    assert "zz-broken.md" in source.last_error
    assert source.running_since is None  # the lease is given back


def test_a_missing_folder_is_a_clear_error_that_creates_nothing(tmp_path):
    with pytest.raises(CommandError, match="no such file or folder"):
        run("markdown", tmp_path / "nowhere")
    assert not Source.objects.exists()


def test_a_slug_taken_by_an_admin_article_gets_another(docs):
    Article.objects.create(title="Refunds, by hand", slug="refunds", body="Mine.")

    run("markdown", docs)

    assert Article.objects.get(external_id="billing/refunds.md").slug == "refunds-2"
    assert Article.objects.get(slug="refunds").source is None


def test_sync_is_the_same_through_the_function(docs):
    source = Source.objects.create(kind="markdown", name="Docs", location=str(docs))

    result = sync(source)

    assert (result.added, result.updated, result.unchanged, result.unpublished) == (4, 0, 0, 0)
    source.refresh_from_db()
    assert source.synced_at is not None and source.last_result["added"] == 4
    assert source.progress_done == 4 and source.progress_total == 4


def run(*args) -> str:
    from io import StringIO

    out = StringIO()
    call_command("import_help_center", *[str(a) for a in args], "--no-embed", stdout=out)
    return out.getvalue()


def test_two_syncs_of_one_source_never_run_at_once(docs):
    from datetime import timedelta

    from django.utils import timezone

    from helpcenter.importers.sync import LEASE_SECONDS, Busy, acquire

    source = Source.objects.create(kind="markdown", name="Docs", location=str(docs.resolve()))
    acquire(source)  # another process's sync, running

    with pytest.raises(Busy):
        sync(source)
    with pytest.raises(CommandError, match="already running"):
        run("markdown", docs)
    assert not Article.objects.exists()

    # A sync that stopped renewing its lease (a killed process) is presumed dead.
    Source.objects.filter(pk=source.pk).update(running_since=timezone.now() - timedelta(seconds=LEASE_SECONDS + 1))
    assert sync(source).added == 4


def test_sync_help_center_syncs_the_sources_that_are_due(docs, tmp_path, settings):
    from datetime import timedelta
    from io import StringIO

    from django.utils import timezone

    settings.KOOKEE_SYNC_HOURS = 24
    due = Source.objects.create(kind="markdown", name="Due", location=str(docs.resolve()))
    other = tmp_path / "other"
    write(other, "a.md", "# A\n\nText.\n")
    fresh = Source.objects.create(kind="markdown", name="Fresh", location=str(other), synced_at=timezone.now())
    Source.objects.filter(pk=due.pk).update(synced_at=timezone.now() - timedelta(hours=25))
    out = StringIO()

    call_command("sync_help_center", stdout=out)

    assert "Due: 4 added, 0 updated, 0 unchanged, 0 unpublished." in out.getvalue()
    assert "Fresh" not in out.getvalue()
    assert not Article.objects.filter(source=fresh).exists()
    out = StringIO()
    call_command("sync_help_center", "--all", stdout=out)
    assert "Fresh: 1 added" in out.getvalue() and "Due: 0 added, 0 updated, 4 unchanged" in out.getvalue()
