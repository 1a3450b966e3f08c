"""Finance's admin: the usage ledger (read-only for everyone) with its totals,
daily chart, CSV export and monthly summary, and the price table.

Nothing here reads a turn's row beyond its status: the transcript text lives
there, and finance never sees it (nor loads it)."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

from django import forms
from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.handlers.asgi import ASGIRequest
from django.db.models import Exists, OuterRef, Subquery
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, StreamingHttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import formats, timezone
from django.utils.dateparse import parse_date

from billing import charts, exports, reports
from billing.models import LedgerEntry, Price
from kookee.admin import ModelAdmin

CHART_DAYS = 30
MAX_CHART_DAYS = 366


class DateRangeFilter(admin.FieldListFilter):
    """From and to dates (both included, in the site's time zone), typed in or
    picked from a few common ranges."""

    template = "admin/billing/date_range_filter.html"

    def __init__(self, field, request, params, model, model_admin, field_path):
        self.param_since = f"{field_path}__date__gte"
        self.param_until = f"{field_path}__date__lte"
        super().__init__(field, request, params, model, model_admin, field_path)
        self.since = self._date(self.param_since)
        self.until = self._date(self.param_until)
        # The sidebar form sends the other filters and the ordering along.
        self.other_params = [
            (name, value)
            for name, values in request.GET.lists()
            if name not in (self.param_since, self.param_until, "p", "e")
            for value in values
        ]

    def _date(self, param: str) -> date | None:
        value = (self.used_parameters.get(param) or [""])[-1]
        if not value:
            return None
        day = parse_date(value) if len(value) == 10 else None
        if day is None:
            raise IncorrectLookupParameters(f"{param}: {value!r} is not a date (YYYY-MM-DD).")
        return day

    def expected_parameters(self) -> list[str]:
        return [self.param_since, self.param_until]

    def queryset(self, request, queryset):
        # A range on the column itself, not on its date: the index serves it.
        if self.since:
            queryset = queryset.filter(**{f"{self.field_path}__gte": reports.day_start(self.since)})
        if self.until:
            queryset = queryset.filter(**{f"{self.field_path}__lt": reports.day_start(self.until + timedelta(days=1))})
        return queryset

    def get_facet_counts(self, pk_attname, filtered_qs) -> dict:
        return {}

    def _ranges(self) -> list[tuple[str, date | None, date | None]]:
        today = timezone.localdate()
        month_start = today.replace(day=1)
        last_month_end = month_start - timedelta(days=1)
        return [
            ("Any date", None, None),
            ("Today", today, today),
            ("Last 7 days", today - timedelta(days=6), today),
            ("Last 30 days", today - timedelta(days=CHART_DAYS - 1), today),
            ("This month", month_start, today),
            ("Last month", last_month_end.replace(day=1), last_month_end),
            ("This year", today.replace(month=1, day=1), today),
        ]

    def choices(self, changelist):
        for title, since, until in self._ranges():
            params = {self.param_since: since.isoformat(), self.param_until: until.isoformat()} if since else {}
            yield {
                "selected": (self.since, self.until) == (since, until),
                "query_string": changelist.get_query_string(params, [self.param_since, self.param_until]),
                "display": title,
            }


class TurnStatusFilter(admin.ChoicesFieldListFilter):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.title = "turn status"


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ModelAdmin):
    """Read-only for everyone, superusers included: the ledger is append-only."""

    list_display = ["created", "model", "input", "output", "is_estimated", "cost", "turn_status"]
    list_filter = [
        ("created_at", DateRangeFilter),
        "model",
        "estimated",
        ("turn__status", TurnStatusFilter),
    ]
    # Never the turn: its row holds the transcript. Its status is annotated.
    list_select_related = ()
    list_per_page = 100
    actions = None
    fields = ["created_at", "turn_number", "turn_status", "model", "input", "output", "estimated", "cost"]
    readonly_fields = fields
    change_list_template = "admin/billing/ledgerentry/change_list.html"

    def get_queryset(self, request):
        # A subquery rather than a join: counts, totals and the chart leave an
        # unused subquery out, while a join would run through every turn.
        turns = LedgerEntry._meta.get_field("turn").related_model.objects
        status = turns.filter(pk=OuterRef("turn_id")).order_by().values("status")[:1]
        return super().get_queryset(request).annotate(turn_status=Subquery(status))

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description="date", ordering="created_at")
    def created(self, entry: LedgerEntry) -> str:
        return formats.date_format(timezone.localtime(entry.created_at), "Y-m-d H:i")

    @admin.display(description="turn", ordering="turn_id")
    def turn_number(self, entry: LedgerEntry) -> int:
        return entry.turn_id

    @admin.display(description="input tokens", ordering="input_tokens")
    def input(self, entry: LedgerEntry) -> str:
        return formats.number_format(entry.input_tokens, force_grouping=True)

    @admin.display(description="output tokens", ordering="output_tokens")
    def output(self, entry: LedgerEntry) -> str:
        return formats.number_format(entry.output_tokens, force_grouping=True)

    @admin.display(description="estimated", ordering="estimated")
    def is_estimated(self, entry: LedgerEntry) -> str:
        # Words, not the red cross of a boolean column: "no" is the normal case.
        return "yes" if entry.estimated else "no"

    @admin.display(description="turn status", ordering="turn_status")
    def turn_status(self, entry: LedgerEntry) -> str:
        return entry.turn_status

    # --- pages ------------------------------------------------------------------------------

    def get_urls(self):
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        wrap = self.admin_site.admin_view
        return [
            path("monthly/", wrap(self.monthly_view), name=f"{name}_monthly"),
            path("export/", wrap(self.export_view), name=f"{name}_export"),
            *super().get_urls(),
        ]

    def _url(self, view: str) -> str:
        return reverse(f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_{view}")

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        response = super().changelist_view(request, extra_context)
        context = getattr(response, "context_data", None)
        if not context or "cl" not in context:
            return response  # a redirect, or the page for broken filters
        cl = context["cl"]
        first, last = self._chart_window(cl)
        days = reports.daily(cl.queryset, first, last)
        context.update(
            totals=reports.totals(cl.queryset),
            days=days,
            chart=charts.daily_chart(days),
            export_url=self._url("export") + cl.get_query_string(),
            monthly_url=self._url("monthly") + cl.get_query_string(),
        )
        return response

    def _chart_window(self, cl) -> tuple[date, date]:
        """The date filter's range; without one, the last 30 days."""
        dates = next(spec for spec in cl.filter_specs if isinstance(spec, DateRangeFilter))
        today = timezone.localdate()
        last = dates.until or max(today, dates.since or today)
        first = min(dates.since or last - timedelta(days=CHART_DAYS - 1), last)
        return max(first, last - timedelta(days=MAX_CHART_DAYS - 1)), last

    def _filtered(self, request: HttpRequest):
        """The changelist for this request's filters, as the list page sees it."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        return self.get_changelist_instance(request)

    def monthly_view(self, request: HttpRequest) -> HttpResponse:
        try:
            cl = self._filtered(request)
        except IncorrectLookupParameters as e:
            return HttpResponseBadRequest(f"Bad filter: {e}", content_type="text/plain")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Monthly usage per model",
            "months": reports.monthly(cl.queryset),
            "filtered": cl.has_active_filters,
            "changelist_url": self._url("changelist") + cl.get_query_string(),
            "unfiltered_url": self._url("monthly"),
            "export_url": self._url("export") + cl.get_query_string(),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/billing/ledgerentry/monthly.html", context)

    def export_view(self, request: HttpRequest) -> HttpResponse:
        try:
            cl = self._filtered(request)
        except IncorrectLookupParameters as e:
            return HttpResponseBadRequest(f"Bad filter: {e}", content_type="text/plain")
        chunks = exports.csv_chunks(cl.queryset)
        content = exports.in_sync_thread(chunks) if isinstance(request, ASGIRequest) else chunks
        response = StreamingHttpResponse(content, content_type="text/csv; charset=utf-8")
        filename = f"kookee-ledger-{timezone.localdate():%Y-%m-%d}.csv"
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        return response


PRICE_HELP = (
    "A price applies to turns billed from its effective date on. Each ledger entry keeps the cost "
    "worked out when it was written, so adding or changing a price never rewrites past costs. "
    "To change a price, add a row with the date the new price takes effect: the old row stays as history."
)


def _per_million(value: Decimal) -> str:
    # 2.00, 0.15, 0.075: cents always, further places only when they count.
    return f"{value:.2f}" if value == round(value, 2) else f"{value.normalize():f}"


class PriceForm(forms.ModelForm):
    class Meta:
        model = Price
        fields = ["model", "input_per_million", "output_per_million", "effective_from"]
        help_texts = {
            "effective_from": "Turns billed from this moment on use this price; earlier entries keep their cost.",
        }

    def clean_model(self) -> str:
        model = self.cleaned_data["model"].strip()
        if not model:
            raise ValidationError("Give a model name.")
        return model


@admin.register(Price)
class PriceAdmin(ModelAdmin):
    form = PriceForm
    list_display = ["model", "input_price", "output_price", "effective", "state"]
    list_filter = ["model"]
    search_fields = ["model"]
    fieldsets = [(None, {"fields": PriceForm.Meta.fields, "description": PRICE_HELP})]
    change_list_template = "admin/billing/price/change_list.html"

    def get_queryset(self, request):
        newer_in_force = Price.objects.filter(
            model=OuterRef("model"),
            effective_from__gt=OuterRef("effective_from"),
            effective_from__lte=timezone.now(),
        )
        return super().get_queryset(request).annotate(superseded=Exists(newer_in_force))

    @admin.display(description="input, USD / 1M tokens", ordering="input_per_million")
    def input_price(self, price: Price) -> str:
        return _per_million(price.input_per_million)

    @admin.display(description="output, USD / 1M tokens", ordering="output_per_million")
    def output_price(self, price: Price) -> str:
        return _per_million(price.output_per_million)

    @admin.display(description="effective from", ordering="effective_from")
    def effective(self, price: Price) -> str:
        return formats.date_format(timezone.localtime(price.effective_from), "Y-m-d H:i")

    @admin.display(description="state")
    def state(self, price: Price) -> str:
        if price.effective_from > timezone.now():
            return "scheduled"
        return "superseded" if price.superseded else "in force"

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        return super().changelist_view(request, {"price_help": PRICE_HELP, **(extra_context or {})})
