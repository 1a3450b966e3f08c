from typing import Any, TypeVar

from django.db import models
from django.db.models.functions import Lower
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from billing.tokens import CHARS_PER_TOKEN

_Entry = TypeVar("_Entry", bound=models.Model)


class AppendOnlyQuerySet(models.QuerySet[_Entry]):
    def update(self, **kwargs: Any) -> int:
        raise ValueError("Ledger entries are append-only.")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise ValueError("Ledger entries are append-only.")


class AppendOnly(models.Model):
    """A row written once: never saved again, never deleted (nor in bulk)."""

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise ValueError("Ledger entries are append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise ValueError("Ledger entries are append-only.")


class LedgerEntry(AppendOnly):
    """What one turn cost. Append-only: written once, by bill_once."""

    # One-to-one: the database itself refuses a second entry for a turn.
    turn = models.OneToOneField(
        "chat.Turn", on_delete=models.PROTECT, related_name="ledger_entry", verbose_name=_("turn")
    )
    model = models.CharField(_("model"), max_length=100)
    input_tokens = models.PositiveIntegerField(_("input tokens"))
    # Parts of the two above, when the provider reported them.
    cached_input_tokens = models.PositiveIntegerField(
        _("cached input tokens"), default=0, help_text=_("Input served from the provider's cache.")
    )
    reasoning_tokens = models.PositiveIntegerField(
        _("reasoning tokens"), default=0, help_text=_("Output the model spent reasoning.")
    )
    output_tokens = models.PositiveIntegerField(_("output tokens"))
    estimated = models.BooleanField(_("estimated"), help_text=_("Part of the usage is an estimate."))
    # Staff trying a draft of the assistant (its Preview page): real tokens,
    # billed, told apart from what visitors cost.
    preview = models.BooleanField(
        _("preview"), default=False, db_index=True, help_text=_("Staff previewing the assistant, not a visitor.")
    )
    # NULL when no price was in force for the model: unpriced, never a silent 0.
    cost = models.DecimalField(_("cost"), max_digits=14, decimal_places=8, null=True, blank=True)
    # The price the cost was worked out with, and its rates as they were.
    price = models.ForeignKey(
        "Price",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="ledger_entries",
        verbose_name=_("price"),
    )
    input_per_million = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    cached_input_per_million = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    output_per_million = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = _("ledger entry")
        verbose_name_plural = _("ledger entries")

    def __str__(self) -> str:
        return gettext("Turn %(turn)s: %(cost)s") % {"turn": self.turn_id, "cost": self.cost}


class EmbeddingEntry(AppendOnly):
    """What the help center's models cost: indexing it (no turn), a visitor's
    searches (their turn's; none on the help pages), and reranking them
    (helpcenter/rerank.py). Append-only. Only a provider's models are
    billed: the local model costs nothing."""

    class Purpose(models.TextChoices):
        INDEXING = "indexing", _("indexing the help center")
        SEARCH = "search", _("a visitor's search")
        RERANK = "rerank", _("reranking a visitor's search")

    purpose = models.CharField(_("purpose"), max_length=16, choices=Purpose.choices)
    turn = models.ForeignKey(
        "chat.Turn",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="embedding_entries",
        verbose_name=_("turn"),
    )
    model = models.CharField(_("model"), max_length=200)
    input_tokens = models.PositiveIntegerField(_("input tokens"))
    passages = models.PositiveIntegerField(_("passages"), default=0, help_text=_("Passages embedded (indexing)."))
    # NULL when no price was in force for the model: unpriced, never a silent 0.
    cost = models.DecimalField(_("cost"), max_digits=14, decimal_places=8, null=True, blank=True)
    price = models.ForeignKey(
        "Price",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="embedding_entries",
        verbose_name=_("price"),
    )
    input_per_million = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = _("embedding entry")
        verbose_name_plural = _("embedding entries")

    def __str__(self) -> str:
        return gettext("%(purpose)s: %(cost)s") % {"purpose": self.get_purpose_display(), "cost": self.cost}


class PriceInUse(ValueError):
    """A price that a ledger entry used is history: supersede it instead."""


class PriceQuerySet(models.QuerySet["Price"]):
    def update(self, **kwargs: Any) -> int:
        if (
            LedgerEntry.objects.filter(price__in=self).exists()
            or EmbeddingEntry.objects.filter(price__in=self).exists()
        ):
            raise PriceInUse("A price that ledger entries used cannot be changed; add a later one.")
        return super().update(**kwargs)


class Price(models.Model):
    """What a model costs from a date on. A ledger entry records the price it
    used; a price that any entry used is never edited or deleted, only
    superseded by a row with a later `effective_from`."""

    model = models.CharField(
        _("model"),
        max_length=100,
        help_text=_(
            "A model name, in any case. It also prices the model's dated snapshots "
            "(gpt-4o-mini prices gpt-4o-mini-2024-07-18), never another model (gpt-4o does not price gpt-4o-mini)."
        ),
    )
    input_per_million = models.DecimalField(_("input, USD per million tokens"), max_digits=12, decimal_places=6)
    cached_input_per_million = models.DecimalField(
        _("cached input, USD per million tokens"),
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
        help_text=_("Input the provider served from its cache. Blank: cached input costs the input rate."),
    )
    output_per_million = models.DecimalField(_("output, USD per million tokens"), max_digits=12, decimal_places=6)
    effective_from = models.DateTimeField(_("effective from"), default=timezone.now)

    objects = PriceQuerySet.as_manager()

    class Meta:
        ordering = ["model", "-effective_from"]
        verbose_name = _("price")
        verbose_name_plural = _("prices")
        constraints = [
            # Names match case-insensitively, so they are unique that way.
            models.UniqueConstraint(
                Lower("model"),
                "effective_from",
                name="one_price_per_model_and_date",
                violation_error_message=_("A price for this model (in any case) already takes effect at that moment."),
            ),
        ]

    def __str__(self) -> str:
        return gettext("%(model)s from %(date)s") % {"model": self.model, "date": f"{self.effective_from:%Y-%m-%d}"}

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.in_use:
            raise PriceInUse(f"{self} was used by ledger entries: add a later price instead of changing it.")
        super().save(*args, **kwargs)

    @property
    def in_use(self) -> bool:
        return self.pk is not None and (self.ledger_entries.exists() or self.embedding_entries.exists())


class Calibration(models.Model):
    """How many characters a model's tokenizer makes one token, learnt from
    the rounds the provider reported usage for (billing/calibration.py), so
    that a round cut short is estimated in the model's own terms."""

    model = models.CharField(_("model"), max_length=100, unique=True)
    input_chars_per_token = models.FloatField(default=CHARS_PER_TOKEN)
    input_samples = models.PositiveIntegerField(_("input samples"), default=0)
    output_chars_per_token = models.FloatField(default=CHARS_PER_TOKEN)
    output_samples = models.PositiveIntegerField(_("output samples"), default=0)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        ordering = ["model"]
        verbose_name = _("calibration")
        verbose_name_plural = _("calibrations")

    def __str__(self) -> str:
        return self.model
