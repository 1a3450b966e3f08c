"""The price table in the admin: a price applies from its effective date
on, and one that any ledger entry used is history (it cannot be changed or
deleted, only superseded). The ledger's and the prices' pages warn of models
billed without a price in force."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Exists, OuterRef
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils import formats, timezone
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.translation import gettext, gettext_noop
from django.utils.translation import gettext_lazy as _

from base.admin import ModelAdmin
from billing import days
from billing.models import LedgerEntry, Price
from billing.services import price_for
from billing.templatetags.billing_admin import rate

UNPRICED_WINDOW = timedelta(days=30)


def unpriced_models() -> list[str]:
    """Models billed in the last 30 days that have no price in force now:
    their turns are being recorded as unpriced."""
    since = timezone.now() - UNPRICED_WINDOW
    models = LedgerEntry.objects.filter(created_at__gte=since).order_by().values_list("model", flat=True).distinct()
    return sorted(model for model in models if price_for(model) is None)


def warn_unpriced(request: HttpRequest, admin_site) -> None:
    models = unpriced_models()
    if models:
        prices = reverse(f"{admin_site.name}:billing_price_changelist")
        messages.warning(
            request,
            format_html(
                gettext(
                    "No price in force for {models}: their turns are recorded as unpriced (no cost). "
                    '<a href="{url}">Add a price</a>.'
                ),
                models=", ".join(models),
                url=prices,
            ),
        )


# Marked only: translated where shown, so that it stays a str here.
PRICE_HELP = gettext_noop(
    "A price applies to turns that start from its effective date on, and each ledger entry records the "
    "price and rates it was billed at. A price that any entry used is history: it cannot be changed or "
    "deleted. To change it, supersede it: add a row with the same model and the date the new rates take "
    "effect. Model names match in any case, and the longest matching name wins."
)


class PriceForm(forms.ModelForm):
    class Meta:
        model = Price
        fields = ["model", "input_per_million", "cached_input_per_million", "output_per_million", "effective_from"]
        help_texts = {
            "effective_from": _("Turns that start from this moment on use this price; earlier entries keep theirs."),
        }

    def clean_model(self) -> str:
        model = self.cleaned_data["model"].strip()
        if not model:
            raise ValidationError(gettext("Give a model name."))
        return model

    def clean(self):
        # Used since the page was opened: history now (the save would refuse).
        if self.instance.in_use:
            raise ValidationError(gettext("Ledger entries have been billed at this price since: supersede it instead."))
        return super().clean()


@admin.register(Price)
class PriceAdmin(ModelAdmin):
    form = PriceForm
    list_display = ["model", "input_price", "cached_input_price", "output_price", "effective", "state", "use"]
    list_filter = ["model"]
    search_fields = ["model"]
    fieldsets = [(None, {"fields": PriceForm.Meta.fields, "description": _(PRICE_HELP)})]
    change_list_template = "admin/billing/help_change_list.html"
    change_form_template = "admin/billing/price/change_form.html"

    def get_queryset(self, request):
        newer_in_force = Price.objects.filter(
            model__iexact=OuterRef("model"),
            effective_from__gt=OuterRef("effective_from"),
            effective_from__lte=timezone.now(),
        )
        used = LedgerEntry.objects.filter(price=OuterRef("pk"))
        return super().get_queryset(request).annotate(superseded=Exists(newer_in_force), used=Exists(used))

    def has_change_permission(self, request, obj=None) -> bool:
        # A used price is history: its page shows it, read-only.
        return super().has_change_permission(request, obj) and not (obj is not None and obj.in_use)

    def has_delete_permission(self, request, obj=None) -> bool:
        return super().has_delete_permission(request, obj) and not (obj is not None and obj.in_use)

    def get_deleted_objects(self, objs, request):
        # The bulk action: a used price among them is refused (protected).
        deleted, model_count, perms_needed, protected = super().get_deleted_objects(objs, request)
        billed = gettext("%(price)s (billed ledger entries)")
        protected = [*protected, *(billed % {"price": price} for price in objs if price.in_use)]
        return deleted, model_count, perms_needed, protected

    def change_view(self, request, object_id, form_url="", extra_context=None):
        price = self.get_object(request, object_id)
        context = dict(extra_context or {})
        if price is not None and price.in_use and self.has_add_permission(request):
            context["supersede_url"] = self.supersede_url(price)
        return super().change_view(request, object_id, form_url, context)

    def supersede_url(self, price: Price) -> str:
        """The add form, filled in with this price's model and rates."""
        initial = {
            "model": price.model,
            "input_per_million": rate(price.input_per_million),
            "cached_input_per_million": rate(price.cached_input_per_million),
            "output_per_million": rate(price.output_per_million),
        }
        return reverse(f"{self.admin_site.name}:billing_price_add") + "?" + urlencode(initial)

    @admin.display(description=_("input, USD / 1M tokens"), ordering="input_per_million")
    def input_price(self, price: Price) -> str:
        return rate(price.input_per_million)

    @admin.display(description=_("cached input, USD / 1M"), ordering="cached_input_per_million")
    def cached_input_price(self, price: Price) -> str:
        return rate(price.cached_input_per_million) or gettext("as input")

    @admin.display(description=_("output, USD / 1M tokens"), ordering="output_per_million")
    def output_price(self, price: Price) -> str:
        return rate(price.output_per_million)

    @admin.display(description=_("effective from"), ordering="effective_from")
    def effective(self, price: Price) -> str:
        return formats.date_format(timezone.localtime(price.effective_from, days.zone()), "SHORT_DATETIME_FORMAT")

    @admin.display(description=_("state"))
    def state(self, price: Price) -> str:
        if price.effective_from > timezone.now():
            return gettext("scheduled")
        return gettext("superseded") if price.superseded else gettext("in force")

    @admin.display(description=_("billed"))
    def use(self, price: Price) -> str:
        return gettext("used: supersede to change") if price.used else gettext("not used yet")

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        warn_unpriced(request, self.admin_site)
        return super().changelist_view(request, {"page_help": gettext(PRICE_HELP), **(extra_context or {})})
