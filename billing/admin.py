"""Finance's admin: the usage ledger (read-only for everyone) with its totals,
daily chart, CSV export and monthly summary, and the price table.

Nothing here reads a turn's row beyond its status: the transcript text lives
there, and finance never sees it (nor loads it)."""

from __future__ import annotations

import re
from datetime import date, timedelta

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.handlers.asgi import ASGIRequest
from django.db.models import Exists, OuterRef, Subquery
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import formats, timezone
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.translation import gettext, gettext_noop, ngettext
from django.utils.translation import gettext_lazy as _

from base.admin import MAX_YEAR, MIN_YEAR, BadFilterValue, ModelAdmin, WrittenByTheApp, bad_filter
from billing import calibration, charts, days, exports, reports, tokens
from billing.models import Calibration, EmbeddingEntry, LedgerEntry, Price
from billing.services import price_for
from billing.templatetags.billing_admin import grouped, money, rate

CHART_DAYS = 30
MAX_CHART_DAYS = 366


# The days a date filter may name: wider than any ledger, and far enough
# inside date.min and date.max that the day after `until`, the chart's days
# before it and midnight in any time zone all exist.
FIRST_DAY, LAST_DAY = date(MIN_YEAR, 1, 1), date(MAX_YEAR, 12, 31)
ISO_DAY = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
# Enough of a refused value to recognise it by, in the 400's message.
SHOWN_CHARS = 40


class BadDate(BadFilterValue):
    """A date filter's value that names no day the ledger can count from.

    Deliberately not an IncorrectLookupParameters: for that, the list page
    redirects to ?e=1, whose page blames the database. Every list that uses
    the filter answers 400 instead (base/admin.py), as do the ledger's other
    pages, and says which value is wrong."""


def _parse_day(param: str, value: str) -> date:
    """`value` as a day between FIRST_DAY and LAST_DAY; BadDate otherwise."""
    shown = {"param": param, "value": repr(value if len(value) <= SHOWN_CHARS else value[:SHOWN_CHARS] + "…")}
    match = ISO_DAY.fullmatch(value)
    try:
        day = date(*map(int, match.groups())) if match else None
    except ValueError:  # 2026-02-30, 0000-01-01
        day = None
    if day is None:
        raise BadDate(gettext("%(param)s: %(value)s is not a date (YYYY-MM-DD).") % shown)
    if not FIRST_DAY <= day <= LAST_DAY:
        message = gettext("%(param)s: %(value)s is out of range (%(first)s to %(last)s).")
        raise BadDate(message % {**shown, "first": FIRST_DAY.isoformat(), "last": LAST_DAY.isoformat()})
    return day


# What a ledger page's filters can raise: each is the request's fault.
BAD_FILTER = (IncorrectLookupParameters, ValidationError, BadFilterValue)


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
        # Every value is parsed, though the last one counts: none is ignored unread.
        given = [_parse_day(param, value) for value in self.used_parameters.get(param) or [] if value]
        return given[-1] if given else None

    def expected_parameters(self) -> list[str]:
        return [self.param_since, self.param_until]

    def queryset(self, request, queryset):
        # A range on the column itself, not on its date: the index serves it.
        if self.since:
            queryset = queryset.filter(**{f"{self.field_path}__gte": days.day_start(self.since)})
        if self.until:
            queryset = queryset.filter(**{f"{self.field_path}__lt": days.day_start(self.until + timedelta(days=1))})
        return queryset

    def get_facet_counts(self, pk_attname, filtered_qs) -> dict:
        return {}

    def _ranges(self) -> list[tuple[str, date | None, date | None]]:
        today = days.today()
        month_start = today.replace(day=1)
        last_month_end = month_start - timedelta(days=1)
        return [
            (gettext("Any date"), None, None),
            (gettext("Today"), today, today),
            (gettext("Last 7 days"), today - timedelta(days=6), today),
            (gettext("Last 30 days"), today - timedelta(days=CHART_DAYS - 1), today),
            (gettext("This month"), month_start, today),
            (gettext("Last month"), last_month_end.replace(day=1), last_month_end),
            (gettext("This year"), today.replace(month=1, day=1), today),
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
        self.title = gettext("turn status")


class PricedFilter(admin.SimpleListFilter):
    title = _("price")
    parameter_name = "priced"

    def lookups(self, request, model_admin):
        return [("yes", gettext("Priced")), ("no", gettext("Unpriced"))]

    def queryset(self, request, queryset):
        if self.value() in ("yes", "no"):
            return queryset.filter(cost__isnull=self.value() == "no")
        return queryset


# The conversation a ledger list is narrowed to, from the per-conversation page.
CONVERSATION_LOOKUP = "turn__conversation__public_id"
PER_CONVERSATION_ROWS = 200
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


@admin.register(LedgerEntry)
class LedgerEntryAdmin(WrittenByTheApp, ModelAdmin):
    """Read-only for everyone, superusers included: the ledger is append-only."""

    list_display = ["created", "model", "input", "cached", "output", "reasoning", "is_estimated", "usd", "turn_status"]
    list_filter = [
        ("created_at", DateRangeFilter),
        "model",
        "estimated",
        PricedFilter,
        ("turn__status", TurnStatusFilter),
    ]
    # Never the turn: its row holds the transcript. Its status is annotated.
    list_select_related = ()
    list_per_page = 100
    actions = None
    fields = [
        "created_at",
        "turn_number",
        "turn_status",
        "model",
        "input",
        "cached",
        "output",
        "reasoning",
        "estimated",
        "usd",
        "price_used",
    ]
    readonly_fields = fields
    change_list_template = "admin/billing/ledgerentry/change_list.html"

    def get_queryset(self, request):
        # A subquery rather than a join: counts, totals and the chart leave an
        # unused subquery out, while a join would run through every turn.
        turns = LedgerEntry._meta.get_field("turn").related_model.objects
        status = turns.filter(pk=OuterRef("turn_id")).order_by().values("status")[:1]
        return super().get_queryset(request).annotate(turn_status=Subquery(status))

    @admin.display(description=_("date"), ordering="created_at")
    def created(self, entry: LedgerEntry) -> str:
        return formats.date_format(timezone.localtime(entry.created_at, days.zone()), "SHORT_DATETIME_FORMAT")

    @admin.display(description=_("turn"), ordering="turn_id")
    def turn_number(self, entry: LedgerEntry) -> int:
        return entry.turn_id

    @admin.display(description=_("input tokens"), ordering="input_tokens")
    def input(self, entry: LedgerEntry) -> str:
        return grouped(entry.input_tokens)

    @admin.display(description=_("cached input"), ordering="cached_input_tokens")
    def cached(self, entry: LedgerEntry) -> str:
        return grouped(entry.cached_input_tokens)

    @admin.display(description=_("output tokens"), ordering="output_tokens")
    def output(self, entry: LedgerEntry) -> str:
        return grouped(entry.output_tokens)

    @admin.display(description=_("reasoning"), ordering="reasoning_tokens")
    def reasoning(self, entry: LedgerEntry) -> str:
        return grouped(entry.reasoning_tokens)

    @admin.display(description=_("cost (USD)"), ordering="cost")
    def usd(self, entry: LedgerEntry) -> str:
        return money(entry.cost)

    @admin.display(description=_("price used"))
    def price_used(self, entry: LedgerEntry) -> str:
        if entry.price_id is None:
            # Or billed before entries recorded their price, at rates since changed.
            return gettext("none in force: unpriced") if entry.cost is None else gettext("not recorded")
        rates = {
            "id": entry.price_id,
            "input": rate(entry.input_per_million),
            "output": rate(entry.output_per_million),
            "cached": rate(entry.cached_input_per_million),
        }
        if entry.cached_input_per_million is None:
            return gettext("#%(id)s: input %(input)s, output %(output)s USD per million tokens") % rates
        return (
            gettext("#%(id)s: input %(input)s, output %(output)s, cached input %(cached)s USD per million tokens")
            % rates
        )

    @admin.display(description=_("estimated"), ordering="estimated")
    def is_estimated(self, entry: LedgerEntry) -> str:
        # Words, not the red cross of a boolean column: "no" is the normal case.
        return gettext("yes") if entry.estimated else gettext("no")

    @admin.display(description=_("turn status"), ordering="turn_status")
    def turn_status(self, entry: LedgerEntry) -> str:
        # The status's label (the turn's model's choices: billing imports no chat code).
        labels = dict(LedgerEntry._meta.get_field("turn").related_model._meta.get_field("status").flatchoices)
        return labels.get(entry.turn_status, entry.turn_status)

    # --- pages ------------------------------------------------------------------------------

    def get_urls(self):
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        wrap = self.admin_site.admin_view
        return [
            path("monthly/", wrap(self.monthly_view), name=f"{name}_monthly"),
            path("conversations/", wrap(self.conversations_view), name=f"{name}_conversations"),
            path("export/", wrap(self.export_view), name=f"{name}_export"),
            *super().get_urls(),
        ]

    def _url(self, view: str) -> str:
        return reverse(f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_{view}")

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        response = super().changelist_view(request, extra_context)
        context = getattr(response, "context_data", None)
        if not context or "cl" not in context:
            return response  # a redirect, a bad filter's 400, or the page for broken filters
        cl = context["cl"]
        first, last = self._chart_window(cl)
        days = reports.daily(cl.queryset, first, last)
        context.update(
            totals=reports.totals(cl.queryset),
            days=days,
            chart=charts.daily_chart(days),
            export_url=self._url("export") + cl.get_query_string(),
            monthly_url=self._url("monthly") + cl.get_query_string(),
            conversations_url=self._url("conversations") + cl.get_query_string(),
            unpriced_url=cl.get_query_string({PricedFilter.parameter_name: "no"}),
        )
        warn_unpriced(request, self.admin_site)
        return response

    def lookup_allowed(self, lookup: str, value: str, request=None) -> bool:
        return lookup == CONVERSATION_LOOKUP or super().lookup_allowed(lookup, value, request)

    def _chart_window(self, cl) -> tuple[date, date]:
        """The date filter's range; without one, the last 30 days."""
        dates = next(spec for spec in cl.filter_specs if isinstance(spec, DateRangeFilter))
        today = days.today()
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
        except BAD_FILTER as e:
            return bad_filter(e)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": gettext("Monthly usage per model"),
            "time_zone": settings.TIME_ZONE,
            "months": reports.monthly(cl.queryset),
            "conversations_url": self._url("conversations") + cl.get_query_string(),
            "filtered": cl.has_active_filters,
            "changelist_url": self._url("changelist") + cl.get_query_string(),
            "unfiltered_url": self._url("monthly"),
            "export_url": self._url("export") + cl.get_query_string(),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/billing/ledgerentry/monthly.html", context)

    def conversations_view(self, request: HttpRequest) -> HttpResponse:
        try:
            cl = self._filtered(request)
        except BAD_FILTER as e:
            return bad_filter(e)
        rows = reports.by_conversation(cl.queryset, PER_CONVERSATION_ROWS)
        changelist = self._url("changelist")
        for row in rows:
            row["entries_url"] = changelist + cl.get_query_string({CONVERSATION_LOOKUP: row["conversation"]})
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": gettext("Usage per conversation"),
            "rows": rows,
            "limit": PER_CONVERSATION_ROWS,
            "totals": reports.totals(cl.queryset),
            "filtered": cl.has_active_filters,
            "changelist_url": changelist + cl.get_query_string(),
            "unfiltered_url": self._url("conversations"),
            "unpriced_url": changelist + cl.get_query_string({PricedFilter.parameter_name: "no"}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/billing/ledgerentry/conversations.html", context)

    def export_view(self, request: HttpRequest) -> HttpResponse:
        try:
            cl = self._filtered(request)
        except BAD_FILTER as e:
            return bad_filter(e)
        chunks = exports.csv_chunks(cl.queryset)
        content = exports.in_sync_thread(chunks) if isinstance(request, ASGIRequest) else chunks
        response = StreamingHttpResponse(content, content_type="text/csv; charset=utf-8")
        filename = f"kookee-ledger-{days.today():%Y-%m-%d}.csv"
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        return response


# Marked only: translated where shown, so that it stays a str here.
PRICE_HELP = gettext_noop(
    "A price applies to turns that start from its effective date on, and each ledger entry records the "
    "price and rates it was billed at. A price that any entry used is history: it cannot be changed or "
    "deleted. To change it, supersede it: add a row with the same model and the date the new rates take "
    "effect. Model names match in any case, and the longest matching name wins."
)


@admin.register(EmbeddingEntry)
class EmbeddingEntryAdmin(WrittenByTheApp, ModelAdmin):
    """What embeddings cost, read-only: the help center's indexing, and the
    searches of visitors' turns. Append-only, like the ledger."""

    list_display = ["created", "purpose", "model", "input", "passages", "turn_number", "usd"]
    list_filter = [("created_at", DateRangeFilter), "purpose", "model", PricedFilter]
    list_per_page = 100
    actions = None
    fields = ["created_at", "purpose", "turn_number", "model", "input", "passages", "usd", "input_per_million"]
    readonly_fields = fields

    @admin.display(description=_("date"), ordering="created_at")
    def created(self, entry: EmbeddingEntry) -> str:
        return formats.date_format(timezone.localtime(entry.created_at, days.zone()), "SHORT_DATETIME_FORMAT")

    @admin.display(description=_("turn"), ordering="turn_id")
    def turn_number(self, entry: EmbeddingEntry) -> int | None:
        return entry.turn_id

    @admin.display(description=_("input tokens"), ordering="input_tokens")
    def input(self, entry: EmbeddingEntry) -> str:
        return grouped(entry.input_tokens)

    @admin.display(description=_("cost (USD)"), ordering="cost")
    def usd(self, entry: EmbeddingEntry) -> str:
        return money(entry.cost)


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


@admin.register(Calibration)
class CalibrationAdmin(WrittenByTheApp, ModelAdmin):
    """What the estimates of rounds cut short are based on, per model.
    Written by the app only."""

    list_display = ["model", "input_ratio", "input_samples", "output_ratio", "output_samples", "in_use", "updated"]
    fields = list_display
    readonly_fields = fields
    actions = None
    change_list_template = "admin/billing/help_change_list.html"

    @admin.display(description=_("input, characters per token"), ordering="input_chars_per_token")
    def input_ratio(self, row: Calibration) -> str:
        return formats.number_format(row.input_chars_per_token, 2)

    @admin.display(description=_("output, characters per token"), ordering="output_chars_per_token")
    def output_ratio(self, row: Calibration) -> str:
        return formats.number_format(row.output_chars_per_token, 2)

    @admin.display(description=_("estimates use"))
    def in_use(self, row: Calibration) -> str:
        learnt = [
            label
            for label, samples in (
                (gettext("learnt input ratio"), row.input_samples),
                (gettext("learnt output ratio"), row.output_samples),
            )
            if samples >= calibration.MIN_SAMPLES
        ]
        if not learnt:
            message = ngettext(
                "the default (%(default)s) until %(samples)d sample",
                "the default (%(default)s) until %(samples)d samples",
                calibration.MIN_SAMPLES,
            )
            return message % {"default": f"{tokens.CHARS_PER_TOKEN:g}", "samples": calibration.MIN_SAMPLES}
        return gettext("learnt ratios") if len(learnt) == 2 else learnt[0]

    @admin.display(description=_("last update"), ordering="updated_at")
    def updated(self, row: Calibration) -> str:
        return formats.date_format(timezone.localtime(row.updated_at, days.zone()), "SHORT_DATETIME_FORMAT")

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        help_text = ngettext(
            "A round cut short (a Stop, a closed tab, a lost process) never gets the provider's token counts, "
            "so it is estimated from its characters. Each model's characters per token are learnt from every "
            "whole round the provider reported usage for, prompt and output apart: "
            "the default %(default)s until a model has %(samples)d sample, then a moving average.",
            "A round cut short (a Stop, a closed tab, a lost process) never gets the provider's token counts, "
            "so it is estimated from its characters. Each model's characters per token are learnt from every "
            "whole round the provider reported usage for, prompt and output apart: "
            "the default %(default)s until a model has %(samples)d samples, then a moving average.",
            calibration.MIN_SAMPLES,
        ) % {"default": f"{tokens.CHARS_PER_TOKEN:g}", "samples": calibration.MIN_SAMPLES}
        return super().changelist_view(request, {"page_help": help_text, **(extra_context or {})})
