"""Erases conversations at their visitors' request, by public id, or every
conversation of a verified person (`--verified-id`, the id the customer's
site signs: chat/visitors/verified.py): the same erasure as the
conversation admin's action (erasure.erase_conversations). All or nothing:
one unknown or malformed id, and nothing is erased."""

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
        parser.add_argument("public_ids", nargs="*", metavar="public_id", help="A conversation's public id (a UUID).")
        parser.add_argument(
            "--verified-id",
            action="append",
            default=[],
            metavar="ID",
            help="Every conversation of the person your site verified with this id (its token's sub).",
        )

    def handle(self, *args, public_ids: list[str], verified_id: list[str], **options) -> None:
        if not public_ids and not verified_id:
            raise CommandError("Give conversations' public ids, or --verified-id. Nothing erased.")
        people = {
            value: list(Conversation.objects.filter(verified_id=value).values_list("pk", flat=True))
            for value in verified_id
        }
        nobody = sorted(value for value, found in people.items() if not value or not found)
        if nobody:
            raise CommandError(f"No conversation of the verified id {', '.join(map(repr, nobody))}. Nothing erased.")
        malformed = [value for value in public_ids if _uuid(value) is None]
        if malformed:
            raise CommandError(f"Not a conversation id (a UUID): {', '.join(malformed)}. Nothing erased.")
        wanted = {_uuid(value) for value in public_ids}
        found = dict(Conversation.objects.filter(public_id__in=wanted).values_list("public_id", "pk"))
        unknown = sorted(str(public_id) for public_id in wanted - found.keys())
        if unknown:
            raise CommandError(f"No conversation with the public id {', '.join(unknown)}. Nothing erased.")
        wanted_pks = sorted({*found.values(), *(pk for found_pks in people.values() for pk in found_pks)})
        try:
            erased = erasure.erase_conversations(wanted_pks, by="manage.py")
        except erasure.ErasureRefused as refused:
            raise CommandError(f"{refused} Nothing erased.") from refused
        for conversation in erased:
            self.stdout.write(f"Erased conversation {conversation.public_id}.")


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None
