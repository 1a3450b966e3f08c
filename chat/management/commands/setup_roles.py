from django.core.management.base import BaseCommand

from chat.roles import ROLES, ensure_roles


class Command(BaseCommand):
    help = "Creates the Support and Finance groups with their permissions (also done after every migrate)."

    def handle(self, *args, **options) -> None:
        ensure_roles()
        self.stdout.write(f"Roles ready: {', '.join(ROLES)}.")
