from django.apps import AppConfig
from django.db.models.signals import post_migrate
from django.utils.translation import gettext_lazy as _


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = _("Chat and support")

    def ready(self) -> None:
        post_migrate.connect(_ensure_roles, sender=self)


def _ensure_roles(**kwargs) -> None:
    from chat.roles import ensure_roles

    ensure_roles()
