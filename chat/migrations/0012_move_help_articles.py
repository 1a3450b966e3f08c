# Help-center articles move to the helpcenter app (helpcenter 0001): the table,
# rows and ids stay where they are. Their content type and permissions are
# renamed rather than made anew, so that the Support group, any user granted
# them, and the admin's history of edits keep pointing at them.

from django.db import migrations

OLD = ("chat", "helparticle")
NEW = ("helpcenter", "article")
ACTIONS = ("add", "change", "delete", "view")


def _move(apps, source, target):
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    LogEntry = apps.get_model("admin", "LogEntry")
    old = ContentType.objects.filter(app_label=source[0], model=source[1]).first()
    if old is None:
        return  # a new database: post_migrate makes the new ones
    new = ContentType.objects.filter(app_label=target[0], model=target[1]).first()
    if new is None:
        old.app_label, old.model = target
        old.save(update_fields=["app_label", "model"])
        for action in ACTIONS:
            Permission.objects.filter(content_type=old, codename=f"{action}_{source[1]}").update(
                codename=f"{action}_{target[1]}"
            )
        return
    # Both exist (post_migrate ran between the two apps' migrations): whoever
    # held an old permission gets the new one, then the old type goes.
    for action in ACTIONS:
        before = Permission.objects.filter(content_type=old, codename=f"{action}_{source[1]}").first()
        after = Permission.objects.filter(content_type=new, codename=f"{action}_{target[1]}").first()
        if before is None or after is None:
            continue
        for group in before.group_set.all():
            group.permissions.add(after)
        for user in before.user_set.all():
            user.user_permissions.add(after)
    LogEntry.objects.filter(content_type=old).update(content_type=new)
    old.delete()


def forwards(apps, schema_editor):
    _move(apps, OLD, NEW)


def backwards(apps, schema_editor):
    _move(apps, NEW, OLD)


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0011_day_budgets"),
        ("helpcenter", "0001_initial"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("admin", "0003_logentry_add_action_flag_choices"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="HelpArticle")],
            database_operations=[],
        ),
        migrations.RunPython(forwards, backwards),
    ]
