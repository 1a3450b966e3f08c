"""The move of the help-center articles from chat (chat.HelpArticle) to
helpcenter (helpcenter.Article), run on a site that had articles, their
content type and permissions, groups and users holding them, and the admin's
history of edits (chat 0012, helpcenter 0001)."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from helpcenter.models import Article

# The migrate targets for "before the move": chat's articles, no helpcenter.
BEFORE = [("chat", "0011_day_budgets"), ("helpcenter", None)]
AFTER = [("chat", "0012_move_help_articles"), ("helpcenter", "0001_initial")]
# The state before the move, with the apps whose rows the move rewrites.
BEFORE_STATE = [
    ("chat", "0011_day_budgets"),
    ("contenttypes", "0002_remove_content_type_name"),
    ("auth", "0012_alter_user_first_name_max_length"),
    ("admin", "0003_logentry_add_action_flag_choices"),
]
ACTIONS = ("add", "change", "delete", "view")
CHANGE = 2  # admin.models.CHANGE


def migrate(targets):
    MigrationExecutor(connection).migrate(targets)


def migrate_to_the_present():
    """The app's own model needs every later migration's columns (helpcenter 0003's sources)."""
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    ContentType.objects.clear_cache()


def state(nodes):
    return MigrationExecutor(connection).loader.project_state(nodes).apps


@pytest.fixture
def present(transactional_db):
    """Back to the present after the test, even a failed one, so that later
    tests see the full schema and no stale content type is cached."""
    ContentType.objects.clear_cache()
    yield
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    ContentType.objects.clear_cache()


def before_the_move():
    """Migrates back to chat 0011 and returns its models, without the help
    articles' content types that the test database's post_migrate made (and
    the backwards migration renamed): each test makes its own."""
    migrate(BEFORE)
    apps = state(BEFORE_STATE)
    apps.get_model("contenttypes", "ContentType").objects.filter(
        app_label__in=["chat", "helpcenter"], model__in=["helparticle", "article"]
    ).delete()
    return apps


def content_type_with_permissions(apps, app_label, model, verbose_name="help article"):
    """As post_migrate makes them."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    content_type = ContentType.objects.create(app_label=app_label, model=model)
    permissions = {
        action: Permission.objects.create(
            content_type=content_type, codename=f"{action}_{model}", name=f"Can {action} {verbose_name}"
        )
        for action in ACTIONS
    }
    return content_type, permissions


def old_site(apps):
    """Articles, the chat/helparticle content type and permissions, an editors'
    group, a user granted a permission directly, an admin history entry."""
    HelpArticle = apps.get_model("chat", "HelpArticle")
    Group, User = apps.get_model("auth", "Group"), apps.get_model("auth", "User")
    LogEntry = apps.get_model("admin", "LogEntry")
    articles = [
        HelpArticle.objects.create(
            title=f"Article {n}", slug=f"article-{n}", body=f"Body **{n}**.", published=n % 2 == 0
        )
        for n in range(5)
    ]
    HelpArticle.objects.filter(pk__in=[articles[1].pk, articles[3].pk]).delete()  # ids with gaps
    articles = [articles[0], articles[2], articles[4]]
    content_type, permissions = content_type_with_permissions(apps, "chat", "helparticle")
    group = Group.objects.create(name="Editors")
    group.permissions.add(permissions["change"])
    editor = User.objects.create(username="editor")
    editor.groups.add(group)
    reader = User.objects.create(username="reader")
    reader.user_permissions.add(permissions["view"])
    entry = LogEntry.objects.create(
        user=editor,
        content_type=content_type,
        object_id=str(articles[0].pk),
        object_repr=articles[0].title,
        action_flag=CHANGE,
        change_message="[]",
    )
    return {
        "articles": articles,
        "content_type": content_type,
        "permissions": permissions,
        "group": group,
        "editor": editor,
        "reader": reader,
        "entry": entry,
    }


def fields(article):
    return (article.pk, article.title, article.slug, article.body, article.published, article.created_at)


@pytest.mark.django_db(transaction=True)
def test_articles_keep_their_table_rows_and_ids(present):
    apps = before_the_move()
    HelpArticle = apps.get_model("chat", "HelpArticle")
    old = old_site(apps)["articles"]
    ids = [a.pk for a in old]
    assert ids[1] - ids[0] == ids[2] - ids[1] == 2  # the gaps are there to keep
    before = sorted(fields(a) for a in HelpArticle.objects.all())
    assert [row[4] for row in before] == [True, True, True]  # 0, 2, 4: even
    HelpArticle.objects.filter(pk=ids[1]).update(published=False)
    before = sorted(fields(a) for a in HelpArticle.objects.all())

    migrate(AFTER)
    historical = state(AFTER).get_model("helpcenter", "Article")
    assert historical._meta.db_table == Article._meta.db_table == "chat_helparticle"
    assert sorted(fields(a) for a in historical.objects.all()) == before
    migrate_to_the_present()
    assert sorted(fields(a) for a in Article.objects.all()) == before
    assert {a.locale for a in Article.objects.all()} == {"en"}  # the site's language, for the articles before it
    assert [(a.pk, a.slug, a.published) for a in Article.objects.order_by("pk")] == [
        (ids[0], "article-0", True),
        (ids[1], "article-2", False),
        (ids[2], "article-4", True),
    ]
    assert Article.objects.get(pk=ids[2]).body == "Body **4**."
    new = Article.objects.create(title="New", slug="new", body="After the move.")
    assert new.pk > max(ids)


@pytest.mark.django_db(transaction=True)
def test_the_content_type_and_permissions_are_renamed_not_made_anew(present):
    apps = before_the_move()
    site = old_site(apps)
    content_type, permissions = site["content_type"], site["permissions"]

    migrate(AFTER)

    new = state(AFTER)
    ContentTypeThen, Permission = new.get_model("contenttypes", "ContentType"), new.get_model("auth", "Permission")
    moved = ContentTypeThen.objects.get(pk=content_type.pk)
    assert (moved.app_label, moved.model) == ("helpcenter", "article")
    assert not ContentTypeThen.objects.filter(app_label="chat", model="helparticle").exists()
    assert ContentTypeThen.objects.filter(app_label="helpcenter", model="article").count() == 1
    assert ContentType.objects.get_for_model(Article).pk == content_type.pk
    assert {p.pk: (p.codename, p.content_type_id) for p in Permission.objects.filter(content_type=moved)} == {
        permissions[action].pk: (f"{action}_article", content_type.pk) for action in ACTIONS
    }
    assert not Permission.objects.filter(codename__endswith="_helparticle").exists()

    User = get_user_model()
    editor, reader = User.objects.get(pk=site["editor"].pk), User.objects.get(pk=site["reader"].pk)
    assert list(editor.groups.get().permissions.values_list("pk", flat=True)) == [permissions["change"].pk]
    assert editor.has_perm("helpcenter.change_article")
    assert not editor.has_perm("chat.change_helparticle")
    assert not editor.has_perm("helpcenter.view_article")
    assert list(reader.user_permissions.values_list("pk", flat=True)) == [permissions["view"].pk]
    assert reader.has_perm("helpcenter.view_article")
    assert not reader.has_perm("chat.view_helparticle")

    LogEntry = new.get_model("admin", "LogEntry")
    assert LogEntry.objects.get(pk=site["entry"].pk).content_type_id == content_type.pk
    from django.contrib.admin.models import LogEntry as RealLogEntry

    entry = RealLogEntry.objects.get(pk=site["entry"].pk)
    migrate_to_the_present()
    assert entry.get_edited_object() == Article.objects.get(pk=site["articles"][0].pk)


@pytest.mark.django_db(transaction=True)
def test_when_both_content_types_exist_holders_get_the_new_permissions(present):
    apps = before_the_move()
    site = old_site(apps)
    # post_migrate already made helpcenter's, as when helpcenter was migrated first.
    new_type, new_permissions = content_type_with_permissions(apps, "helpcenter", "article")
    old_permission_ids = [p.pk for p in site["permissions"].values()]

    migrate(AFTER)

    new = state(AFTER)
    ContentTypeThen, Permission = new.get_model("contenttypes", "ContentType"), new.get_model("auth", "Permission")
    assert not ContentTypeThen.objects.filter(pk=site["content_type"].pk).exists()
    assert not ContentTypeThen.objects.filter(app_label="chat", model="helparticle").exists()
    assert ContentTypeThen.objects.get(app_label="helpcenter", model="article").pk == new_type.pk
    assert not Permission.objects.filter(pk__in=old_permission_ids).exists()
    assert {p.pk: p.codename for p in Permission.objects.filter(content_type_id=new_type.pk)} == {
        new_permissions[action].pk: f"{action}_article" for action in ACTIONS
    }

    User = get_user_model()
    editor, reader = User.objects.get(pk=site["editor"].pk), User.objects.get(pk=site["reader"].pk)
    assert list(editor.groups.get().permissions.values_list("pk", flat=True)) == [new_permissions["change"].pk]
    assert editor.has_perm("helpcenter.change_article")
    assert list(reader.user_permissions.values_list("pk", flat=True)) == [new_permissions["view"].pk]
    assert reader.has_perm("helpcenter.view_article")

    LogEntry = new.get_model("admin", "LogEntry")
    assert LogEntry.objects.get(pk=site["entry"].pk).content_type_id == new_type.pk
    assert sorted(Article.objects.values_list("pk", flat=True)) == [a.pk for a in site["articles"]]


@pytest.mark.django_db(transaction=True)
def test_a_site_without_the_content_type_is_left_to_post_migrate(present):
    apps = before_the_move()
    articles = old_site(apps)["articles"]
    apps.get_model("contenttypes", "ContentType").objects.filter(app_label="chat", model="helparticle").delete()

    migrate(AFTER)

    ContentTypeThen = state(AFTER).get_model("contenttypes", "ContentType")
    assert not ContentTypeThen.objects.filter(app_label__in=["chat", "helpcenter"], model__contains="article").exists()
    assert sorted(Article.objects.values_list("pk", flat=True)) == [a.pk for a in articles]


@pytest.mark.django_db(transaction=True)
def test_the_move_reverses(present):
    apps = before_the_move()
    site = old_site(apps)
    content_type, permissions = site["content_type"], site["permissions"]
    migrate(AFTER)
    assert ContentType.objects.get_for_model(Article).pk == content_type.pk

    migrate(BEFORE)

    old = state(BEFORE_STATE)
    ContentTypeThen, Permission = old.get_model("contenttypes", "ContentType"), old.get_model("auth", "Permission")
    back = ContentTypeThen.objects.get(pk=content_type.pk)
    assert (back.app_label, back.model) == ("chat", "helparticle")
    assert not ContentTypeThen.objects.filter(app_label="helpcenter", model="article").exists()
    assert {p.pk: p.codename for p in Permission.objects.filter(content_type=back)} == {
        permissions[action].pk: f"{action}_helparticle" for action in ACTIONS
    }
    Group, User = old.get_model("auth", "Group"), old.get_model("auth", "User")
    assert list(Group.objects.get(pk=site["group"].pk).permissions.values_list("codename", flat=True)) == [
        "change_helparticle"
    ]
    assert list(User.objects.get(pk=site["reader"].pk).user_permissions.values_list("codename", flat=True)) == [
        "view_helparticle"
    ]
    assert old.get_model("admin", "LogEntry").objects.get(pk=site["entry"].pk).content_type_id == content_type.pk
    HelpArticle = old.get_model("chat", "HelpArticle")
    assert sorted(HelpArticle.objects.values_list("pk", "slug")) == [(a.pk, a.slug) for a in site["articles"]]
    recorder = MigrationExecutor(connection).loader.applied_migrations
    assert ("chat", "0012_move_help_articles") not in recorder
    assert ("helpcenter", "0001_initial") not in recorder

    # And forward again: the same type is helpcenter's once more.
    migrate(AFTER)
    assert ContentType.objects.get_for_model(Article).pk == content_type.pk
