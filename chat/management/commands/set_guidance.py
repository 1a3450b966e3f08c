"""Publishes the team's guidance from a file, for teams that keep it in
version control: the same text Support edits in the admin (chat/assistant/).
Live from the next turn on, in every process; kept as a version, like an
edit in the admin, and restorable there."""

import sys
from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from chat.assistant import versions


class Command(BaseCommand):
    help = "Publishes the assistant's guidance from a UTF-8 text file (- for standard input)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", help="The guidance: a UTF-8 text file, or - for standard input.")

    def handle(self, *args, file: str, **options) -> None:
        try:
            text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as error:
            raise CommandError(f"{file}: cannot read it as UTF-8 text ({error}). Nothing changed.") from error
        current = versions.live()
        if current.guidance == text.replace("\r\n", "\n").strip():
            self.stdout.write("The guidance is already live: nothing changed.")
            return
        try:
            version = versions.publish_guidance(text, by="manage.py set_guidance")
        except ValidationError as invalid:
            raise CommandError(f"{file}: {' '.join(invalid.messages)} Nothing changed.") from invalid
        self.stdout.write(
            f"Published the guidance as version #{version.pk} ({len(version.guidance)} characters): "
            "live from the next message on."
        )
