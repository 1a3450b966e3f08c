from django.apps import AppConfig
from django.conf import settings
from django.core import checks
from django.core.mail.backends.console import EmailBackend as ConsoleBackend
from django.core.mail.backends.filebased import EmailBackend as FileBackend
from django.db.models.signals import post_migrate
from django.utils.module_loading import import_string
from django.utils.translation import gettext_lazy as _


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = _("Chat and support")

    def ready(self) -> None:
        post_migrate.connect(_ensure_roles, sender=self)
        # /healthz checks this process's channel layer too, through its hub.
        from chat.ops import monitoring

        monitoring.check("channel_layer", _check_channel_layer)
        # The help center's indexing, when a provider embeds it, is billed.
        from helpcenter import search

        search.embedded.connect(_bill_indexing, dispatch_uid="chat.bill_indexing")
        # So are the help pages' searches, when a provider embeds or reranks them.
        search.searched.connect(_bill_searches, dispatch_uid="chat.bill_searches")
        # Support's replies and request changes reach the visitor's tabs, from
        # whichever process makes them (the admin, the API, a command).
        from chat.support import replies

        replies.news_for_visitor.connect(_show_support_news, dispatch_uid="chat.show_support_news")
        checks.register(_email_is_configured, checks.Tags.compatibility, deploy=True)
        checks.register(_email_is_not_printed, checks.Tags.security, deploy=True)


async def _check_channel_layer(timeout: float) -> None:
    # Imported when checked: a management command never loads the engine.
    from chat.engine import hub

    await hub.check(timeout)


def _bill_indexing(model: str, tokens: int, passages: int, **kwargs) -> None:
    from billing.models import EmbeddingEntry
    from billing.services import bill_embedding

    bill_embedding(EmbeddingEntry.Purpose.INDEXING, model, tokens, passages=passages)


def _show_support_news(**kwargs) -> None:
    # Imported when Support has news: a command that has none never loads the engine.
    from chat.engine import hub_protocol

    hub_protocol.show_support_news(**kwargs)


def _bill_searches(spent: list, **kwargs) -> None:
    from billing.services import bill_embedding

    for each in spent:  # no turn: a visitor searched the help pages, not the chat
        bill_embedding(each.purpose, each.model, each.tokens)


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


def _email_is_not_printed(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """A handoff email quotes the visitor. The console backend delivers it to
    nobody and prints it into the process's output, the logs: fine with
    DEBUG, an error in production."""
    if settings.DEBUG or not _prints_mail(settings.EMAIL_BACKEND):
        return []
    return [
        checks.Error(
            f"EMAIL_BACKEND is {settings.EMAIL_BACKEND}: with DEBUG off, Support's handoff emails, and the "
            "visitors' words they quote, are printed to the process's output instead of sent to Support.",
            hint="Set EMAIL_URL to a mail server (smtp+tls://user:password@host:587), or unset it to send no email.",
            id="chat.E002",
        )
    ]


def _prints_mail(backend: str) -> bool:
    try:
        backend_class = import_string(backend)
        # The file backend is a console backend whose stream is its own file,
        # a documented way out (filemail://): not the process's output.
        return issubclass(backend_class, ConsoleBackend) and not issubclass(backend_class, FileBackend)
    except (ImportError, TypeError):
        return False  # not a backend class: Django's own error when a mail is sent
