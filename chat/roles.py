"""The staff roles, as Django groups. Users also need "staff status" to log
in to the admin; superusers see everything.

- Support reads transcripts (conversations, turns, generations, tool calls,
  the calls of actions),
  ratings, searches, the unanswered questions and the support report; works
  the queue of requests for a person; edits the help center; shapes the
  assistant (its guidance, name, greeting and starter questions: drafts,
  publishes, restores; chat/admin/assistant.py). No prices, no ledger.
- Finance reads the usage ledger and its reports and edits the price table.
  Nothing that visitors or the model wrote, nor the team's guidance (only
  what it costs, on the ledger).
"""

from django.apps import apps
from django.contrib.auth.management import create_permissions
from django.contrib.auth.models import Group, Permission

ROLES = {
    "Support": [
        "chat.view_conversation",
        "chat.view_turn",
        "chat.view_generation",
        "chat.view_toolcall",
        "chat.view_actioncall",  # the customer's API called in turns (never the actions or their credentials)
        "chat.view_feedback",
        "chat.change_feedback",  # the review queue: assign, mark reviewed (never the rating)
        "chat.view_search",
        "chat.view_unansweredquestion",
        "chat.view_supportreport",
        "chat.view_handoff",
        "chat.change_handoff",
        "helpcenter.view_article",
        "helpcenter.add_article",
        "helpcenter.change_article",
        "helpcenter.delete_article",
        "chat.view_assistantversion",  # the Assistant page
        "chat.add_assistantversion",  # Save draft, Restore (each makes a version)
        "chat.change_assistantversion",  # Publish, Restore
    ],
    "Finance": [
        "billing.view_ledgerentry",
        "billing.view_embeddingentry",
        "billing.view_calibration",
        "billing.view_price",
        "billing.add_price",
        "billing.change_price",
        "billing.delete_price",
    ],
}


def ensure_roles() -> None:
    """Creates the groups and sets exactly their permissions; idempotent."""
    for label in ("chat", "billing", "helpcenter"):
        # Right after a migrate, an app's permissions may not exist yet.
        create_permissions(apps.get_app_config(label), verbosity=0)
    for name, codenames in ROLES.items():
        group, _ = Group.objects.get_or_create(name=name)
        permissions = [
            Permission.objects.get(content_type__app_label=app, codename=codename)
            for app, codename in (perm.split(".") for perm in codenames)
        ]
        group.permissions.set(permissions)
