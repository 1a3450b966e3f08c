"""A helpdesk's message id is unique across all requests, not per request
(a signed reply replayed into another request stored it again); a
conversation records its erasure, and erasure closes its requests for a
person (a reply after it was stored).

Rows from before: an id that several requests share keeps its first
message, the others are qualified by their request's id (so the constraint
holds and no message is lost); conversations whose turns or messages were
erased are marked erased, and their waiting requests closed."""

from django.db import migrations, models
from django.db.models import Min


def qualify_shared_ids(apps, schema_editor):
    Message = apps.get_model("chat", "Message")
    shared = (
        Message.objects.exclude(external_id="")
        .values("external_id")
        .annotate(n=models.Count("id"))
        .filter(n__gt=1)
        .values_list("external_id", flat=True)
    )
    for external_id in list(shared):
        first, *others = Message.objects.filter(external_id=external_id).order_by("id")
        for message in others:
            message.external_id = f"{message.handoff_id}:{external_id}"[:200]
            message.save(update_fields=["external_id"])


def mark_erased(apps, schema_editor):
    Conversation = apps.get_model("chat", "Conversation")
    Handoff = apps.get_model("chat", "Handoff")
    Turn = apps.get_model("chat", "Turn")
    Message = apps.get_model("chat", "Message")
    erased = {}
    for model in (Turn, Message):
        rows = model.objects.filter(erased_at__isnull=False).values("conversation_id").annotate(at=Min("erased_at"))
        for row in rows:
            at = erased.get(row["conversation_id"])
            erased[row["conversation_id"]] = min(at, row["at"]) if at else row["at"]
    for conversation_id, at in erased.items():
        Conversation.objects.filter(pk=conversation_id).update(erased_at=at)
        Handoff.objects.filter(conversation_id=conversation_id, status__in=["open", "claimed"]).update(
            status="closed", closed_at=at
        )


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0014_feedback_review"),
    ]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="erased_at",
            field=models.DateTimeField(blank=True, editable=False, null=True, verbose_name="erased at"),
        ),
        migrations.RemoveConstraint(
            model_name="message",
            name="one_message_per_helpdesk_id",
        ),
        migrations.RunPython(qualify_shared_ids, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="message",
            constraint=models.UniqueConstraint(
                condition=models.Q(("external_id", ""), _negated=True),
                fields=("external_id",),
                name="one_message_per_helpdesk_id_anywhere",
            ),
        ),
        migrations.RunPython(mark_erased, migrations.RunPython.noop),
    ]
