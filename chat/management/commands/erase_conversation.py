"""Erases conversations at their visitors' request, by public id: the same
erasure as the conversation admin's action (erasure.erase_conversations).
All or nothing: one unknown or malformed id, and nothing is erased."""

import uuid

from django.core.management.base import BaseCommand, CommandError

from chat.models import Conversation
from chat.support import erasure


class Command(BaseCommand):
    help = (
        "Erases what the visitors and the assistant wrote in these conversations, at the visitors' request "
        "(the turns' numbers and the ledger stay), and revokes the visitors' keys."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("public_ids", nargs="+", metavar="public_id", help="A conversation's public id (a UUID).")

    def handle(self, *args, public_ids: list[str], **options) -> None:
        malformed = [value for value in public_ids if _uuid(value) is None]
        if malformed:
            raise CommandError(f"Not a conversation id (a UUID): {', '.join(malformed)}. Nothing erased.")
        wanted = {_uuid(value) for value in public_ids}
        found = dict(Conversation.objects.filter(public_id__in=wanted).values_list("public_id", "pk"))
        unknown = sorted(str(public_id) for public_id in wanted - found.keys())
        if unknown:
            raise CommandError(f"No conversation with the public id {', '.join(unknown)}. Nothing erased.")
        try:
            erased = erasure.erase_conversations(list(found.values()), by="manage.py")
        except erasure.ErasureRefused as refused:
            raise CommandError(f"{refused} Nothing erased.") from refused
        for conversation in erased:
            self.stdout.write(f"Erased conversation {conversation.public_id}.")


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None
