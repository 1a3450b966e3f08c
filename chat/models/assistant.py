"""How the team shapes the assistant: its guidance (written rules that go
into every turn's system prompt, after the product's own), its name, its
greeting and its starter questions, in each language.

Every change is a new version, kept with who made it and when: the latest
is the draft, the latest published is what visitors meet (chat/assistant/).
A version is never edited: restoring an old one makes a new draft of it."""

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _


class AssistantVersion(models.Model):
    guidance = models.TextField(_("guidance"), blank=True)
    name_en = models.CharField(_("name (English)"), max_length=60, blank=True)
    name_pt_br = models.CharField(_("name (Brazilian Portuguese)"), max_length=60, blank=True)
    greeting_en = models.TextField(_("greeting (English)"), max_length=500, blank=True)
    greeting_pt_br = models.TextField(_("greeting (Brazilian Portuguese)"), max_length=500, blank=True)
    # Up to four questions each, as a visitor would write them.
    starters_en = models.JSONField(_("starter questions (English)"), default=list, blank=True)
    starters_pt_br = models.JSONField(_("starter questions (Brazilian Portuguese)"), default=list, blank=True)
    created_at = models.DateTimeField(_("saved at"), auto_now_add=True)
    # Who: a staff member, or the name of what made it ("manage.py set_guidance").
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_by_name = models.CharField(_("saved by"), max_length=150, blank=True)
    restored_from = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+", verbose_name=_("restored from")
    )
    published_at = models.DateTimeField(_("published at"), null=True, blank=True, db_index=True)
    published_by_name = models.CharField(_("published by"), max_length=150, blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name = _("assistant version")
        verbose_name_plural = _("assistant versions")

    def __str__(self) -> str:
        return f"#{self.pk}"
