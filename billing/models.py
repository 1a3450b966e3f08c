from django.db import models
from django.db.models.functions import Lower
from django.utils import timezone


class AppendOnlyQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise ValueError("Ledger entries are append-only.")

    def delete(self):
        raise ValueError("Ledger entries are append-only.")


class LedgerEntry(models.Model):
    """What one turn cost. Append-only: written once, by bill_once."""

    # One-to-one: the database itself refuses a second entry for a turn.
    turn = models.OneToOneField("chat.Turn", on_delete=models.PROTECT, related_name="ledger_entry")
    model = models.CharField(max_length=100)
    input_tokens = models.PositiveIntegerField()
    # Parts of the two above, when the provider reported them.
    cached_input_tokens = models.PositiveIntegerField(default=0, help_text="Input served from the provider's cache.")
    reasoning_tokens = models.PositiveIntegerField(default=0, help_text="Output the model spent reasoning.")
    output_tokens = models.PositiveIntegerField()
    estimated = models.BooleanField(help_text="Part of the usage is an estimate.")
    # NULL when no price was in force for the model: unpriced, never a silent 0.
    cost = models.DecimalField(max_digits=14, decimal_places=8, null=True, blank=True)
    # The price the cost was worked out with, and its rates as they were.
    price = models.ForeignKey("Price", on_delete=models.PROTECT, null=True, blank=True, related_name="ledger_entries")
    input_per_million = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    cached_input_per_million = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    output_per_million = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "ledger entries"

    def __str__(self) -> str:
        return f"Turn {self.turn_id}: {self.cost}"

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None:
            raise ValueError("Ledger entries are append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValueError("Ledger entries are append-only.")


class PriceInUse(ValueError):
    """A price that a ledger entry used is history: supersede it instead."""


class PriceQuerySet(models.QuerySet):
    def update(self, **kwargs):
        if LedgerEntry.objects.filter(price__in=self).exists():
            raise PriceInUse("A price that ledger entries used cannot be changed; add a later one.")
        return super().update(**kwargs)


class Price(models.Model):
    """What a model costs from a date on. A ledger entry records the price it
    used; a price that any entry used is never edited or deleted, only
    superseded by a row with a later `effective_from`."""

    model = models.CharField(
        max_length=100,
        help_text=(
            "A model name, in any case. It also prices the model's dated snapshots "
            "(gpt-4o-mini prices gpt-4o-mini-2024-07-18), never another model (gpt-4o does not price gpt-4o-mini)."
        ),
    )
    input_per_million = models.DecimalField("input, USD per million tokens", max_digits=12, decimal_places=6)
    cached_input_per_million = models.DecimalField(
        "cached input, USD per million tokens",
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="Input the provider served from its cache. Blank: cached input costs the input rate.",
    )
    output_per_million = models.DecimalField("output, USD per million tokens", max_digits=12, decimal_places=6)
    effective_from = models.DateTimeField(default=timezone.now)

    objects = PriceQuerySet.as_manager()

    class Meta:
        ordering = ["model", "-effective_from"]
        constraints = [
            # Names match case-insensitively, so they are unique that way.
            models.UniqueConstraint(
                Lower("model"),
                "effective_from",
                name="one_price_per_model_and_date",
                violation_error_message="A price for this model (in any case) already takes effect at that moment.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model} from {self.effective_from:%Y-%m-%d}"

    def save(self, *args, **kwargs) -> None:
        if self.in_use:
            raise PriceInUse(f"{self} was used by ledger entries: add a later price instead of changing it.")
        super().save(*args, **kwargs)

    @property
    def in_use(self) -> bool:
        return self.pk is not None and self.ledger_entries.exists()


class Calibration(models.Model):
    """How many characters a model's tokenizer makes one token, learnt from
    the rounds the provider reported usage for (billing/calibration.py), so
    that a round cut short is estimated in the model's own terms."""

    model = models.CharField(max_length=100, unique=True)
    input_chars_per_token = models.FloatField(default=4.0)
    input_samples = models.PositiveIntegerField(default=0)
    output_chars_per_token = models.FloatField(default=4.0)
    output_samples = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["model"]

    def __str__(self) -> str:
        return self.model
