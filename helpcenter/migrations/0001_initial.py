# The article model, moved from chat: its table (chat_helparticle) was made by
# chat's migrations, so this only tells Django that helpcenter owns it now.
# chat 0012 removes it from chat's state and moves its content type and
# permissions, so that groups, users and the admin's history keep them.

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [("chat", "0011_day_budgets")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Article",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("title", models.CharField(max_length=200, verbose_name="title")),
                        ("slug", models.SlugField(max_length=200, unique=True, verbose_name="slug")),
                        ("body", models.TextField(help_text="Markdown.", verbose_name="body")),
                        ("published", models.BooleanField(default=True, verbose_name="published")),
                        ("created_at", models.DateTimeField(auto_now_add=True, verbose_name="created at")),
                        ("updated_at", models.DateTimeField(auto_now=True, verbose_name="updated at")),
                    ],
                    options={
                        "db_table": "chat_helparticle",
                        "ordering": ["title"],
                        "verbose_name": "help article",
                        "verbose_name_plural": "help articles",
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
