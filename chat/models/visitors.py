"""What limits and starting over keep of visitors: revoked keys and day budgets."""

from django.db import models


class RevokedKey(models.Model):
    """A visitor key (session or widget) that may no longer reach a
    conversation: its visitor started over, or staff erased their
    conversation. Kept as long as the key could otherwise still be used."""

    visitor_hash = models.CharField(max_length=64, unique=True)
    revoked_at = models.DateTimeField(auto_now_add=True, db_index=True)

    def __str__(self) -> str:
        return f"Revoked {self.visitor_hash[:8]}"


class DayBudget(models.Model):
    """Tokens counted against one daily budget (the site's, or a network's:
    chat/visitors/limits.py): what turns of the day spent, plus what running turns
    hold reserved for their worst case. A turn reserves before it starts and
    before each later round, and settles to what it spent when it ends, so
    turns running at once cannot pass the budget together. Rows older than
    yesterday are dropped by `purge_expired` (keys name networks)."""

    day = models.DateField()
    key = models.CharField(max_length=64)
    tokens = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["day", "key"], name="chat_daybudget_unique_day_key")]

    def __str__(self) -> str:
        return f"{self.day} {self.key}: {self.tokens}"
