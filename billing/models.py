from django.db import models


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
