from django.contrib import admin

from billing.models import LedgerEntry


@admin.register(LedgerEntry)
class LedgerEntryAdmin(admin.ModelAdmin):
    """Read-only for everyone: the ledger is append-only."""

    list_display = ["created_at", "turn_id", "model", "input_tokens", "output_tokens", "estimated", "cost"]
    list_filter = ["model", "estimated", "created_at"]
    date_hierarchy = "created_at"

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
