"""Actions: operations of the customer's own API, imported from their
OpenAPI document (chat/actions/), which the model may call for a visitor;
the credentials those calls carry, sealed; and every call made."""

from django.db import models
from django.utils.translation import gettext_lazy as _

from chat.models.conversations import Turn


class Action(models.Model):
    """One operation of the customer's API (its operationId is the tool's
    name). `spec` is the operation as chat/actions/openapi.py read it; a
    re-import replaces it, and disables what the document no longer has."""

    name = models.CharField(_("name"), max_length=64, unique=True, help_text=_("The operationId: the tool's name."))
    enabled = models.BooleanField(_("enabled"), default=True)
    in_document = models.BooleanField(
        _("in the document"), default=True, help_text=_("Off when the last import no longer had it: it was disabled.")
    )
    method = models.CharField(_("method"), max_length=8)
    path = models.CharField(_("path"), max_length=500)
    base_url = models.CharField(_("API address"), max_length=500)
    title = models.CharField(
        _("title"),
        max_length=200,
        help_text=_("What the visitor reads while it runs and when asked to confirm (the operation's summary)."),
    )
    description = models.TextField(
        _("description"),
        blank=True,
        help_text=_("What the model reads to decide when to use it (the operation's description)."),
    )
    # Staff's own title or description survive a re-import of the document.
    texts_edited = models.BooleanField(_("texts edited by staff"), default=False)
    spec = models.JSONField(_("operation"), default=dict)
    fingerprint = models.CharField(max_length=64, editable=False)
    imported_at = models.DateTimeField(_("imported at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("action")
        verbose_name_plural = _("actions")

    def __str__(self) -> str:
        return self.name


class ActionScheme(models.Model):
    """A security scheme of the document (components.securitySchemes): the
    credential that calls needing it carry. Sealed (base/sealed.py),
    write-only: never shown, logged, or given to the model."""

    class Kind(models.TextChoices):
        BEARER = "bearer", _("HTTP bearer token")
        BASIC = "basic", _("HTTP basic (user:password)")
        HEADER = "header", _("API key in a header")
        QUERY = "query", _("API key in the query string")

    name = models.CharField(_("name"), max_length=100, unique=True)
    kind = models.CharField(_("kind"), max_length=8, choices=Kind)
    param = models.CharField(_("header or parameter"), max_length=100, blank=True)
    secret_sealed = models.TextField(_("secret (sealed)"), blank=True, editable=False)
    secret_set_at = models.DateTimeField(_("secret set at"), null=True, blank=True, editable=False)

    class Meta:
        ordering = ["name"]
        verbose_name = _("action credential")
        verbose_name_plural = _("action credentials")

    def __str__(self) -> str:
        return self.name


class ActionCall(models.Model):
    """One call of an action in a turn, whatever became of it."""

    class Outcome(models.TextChoices):
        OK = "ok", _("ok")
        ERROR = "error", _("error")
        TIMEOUT = "timeout", _("timed out")
        REFUSED = "refused", _("refused")
        DECLINED = "declined", _("declined by the visitor")
        CANCELLED = "cancelled", _("cancelled (Stop)")

    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="action_calls", verbose_name=_("turn"))
    # Past calls keep their action: actions are disabled, never deleted by an import.
    action = models.ForeignKey(Action, on_delete=models.PROTECT, related_name="calls", verbose_name=_("action"))
    call_id = models.CharField(_("call id"), max_length=40)
    # The model's arguments; identity-filled values appear as "(verified id)" and the like.
    arguments = models.JSONField(_("arguments"), default=dict)
    http_status = models.PositiveSmallIntegerField(_("HTTP status"), null=True, blank=True)
    outcome = models.CharField(_("outcome"), max_length=10, choices=Outcome)
    detail = models.CharField(_("detail"), max_length=300, blank=True)
    duration_ms = models.PositiveIntegerField(_("duration (ms)"), null=True, blank=True)
    response_bytes = models.PositiveIntegerField(_("response size (bytes)"), null=True, blank=True)
    started_at = models.DateTimeField(_("started at"))

    class Meta:
        ordering = ["started_at", "id"]
        verbose_name = _("action call")
        verbose_name_plural = _("action calls")
        indexes = [models.Index(fields=["action", "started_at"])]

    def __str__(self) -> str:
        return f"{self.action} ({self.outcome})"
