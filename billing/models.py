from django.db import models
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
    output_tokens = models.PositiveIntegerField()
    estimated = models.BooleanField(help_text="Part of the usage is an estimate.")
    cost = models.DecimalField(max_digits=14, decimal_places=8)
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


class Price(models.Model):
    """What a model costs from a date on. A ledger entry keeps the cost worked
    out when it was written: a new price never rewrites the past."""

    model = models.CharField(
        max_length=100,
        help_text="A model name, or the start of one: gpt-4o-mini also prices gpt-4o-mini-2024-07-18.",
    )
    input_per_million = models.DecimalField("input, USD per million tokens", max_digits=12, decimal_places=6)
    output_per_million = models.DecimalField("output, USD per million tokens", max_digits=12, decimal_places=6)
    effective_from = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["model", "-effective_from"]
        constraints = [models.UniqueConstraint(fields=["model", "effective_from"], name="one_price_per_model_and_date")]

    def __str__(self) -> str:
        return f"{self.model} from {self.effective_from:%Y-%m-%d}"
