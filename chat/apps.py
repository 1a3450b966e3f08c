from django.apps import AppConfig
from django.conf import settings
from django.core import checks
from django.db.models.signals import post_migrate
from django.utils.translation import gettext_lazy as _


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = _("Chat and support")

    def ready(self) -> None:
        post_migrate.connect(_ensure_roles, sender=self)
        checks.register(_email_is_configured, checks.Tags.compatibility, deploy=True)


def _ensure_roles(**kwargs) -> None:
    from chat.roles import ensure_roles

    ensure_roles()


def _email_is_configured(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """Support is emailed when a visitor asks for a person: in production,
    only with an EMAIL_URL."""
    if settings.EMAIL_URL:
        return []
    return [
        checks.Warning(
            "EMAIL_URL is not set: Support is not emailed when a visitor asks for a person.",
            hint="Set EMAIL_URL (smtp+tls://user:password@host:587), or KOOKEE_HANDOFF_WEBHOOK and silence "
            "chat.W001 in SILENCED_SYSTEM_CHECKS.",
            id="chat.W001",
        )
    ]
