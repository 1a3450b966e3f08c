"""Finance's admin: the usage ledger (read-only for everyone) with its totals,
daily chart, CSV export and monthly summary; what embeddings cost; what the
estimates are based on. The ledger's filters are billing/ledger_filters.py's;
the price table is billing/price_admin.py's (imported here: it registers).

Nothing here reads a turn's row beyond its status: the transcript text lives
there, and finance never sees it (nor loads it)."""

from __future__ import annotations

from datetime import date, timedelta

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.core.handlers.asgi import ASGIRequest
from django.db.models import OuterRef, Subquery
from django.dispatch import Signal
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import formats, timezone
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from base.admin import ModelAdmin, WrittenByTheApp, bad_filter
from billing import calibration, charts, days, exports, reports, tokens
from billing.ledger_filters import BAD_FILTER, CHART_DAYS, BilledTurnStatusFilter, DateRangeFilter, PricedFilter
from billing.models import Calibration, EmbeddingEntry, LedgerEntry
from billing.price_admin import warn_unpriced
from billing.templatetags.billing_admin import grouped, money, rate

# The chart never shows more days than this, whatever the date filter says.
MAX_CHART_DAYS = 366
# The conversation a ledger list is narrowed to, from the per-conversation page.
CONVERSATION_LOOKUP = "turn__conversation__public_id"
PER_CONVERSATION_ROWS = 200
# One line each, under the ledger's list, on what every model call carries
# besides the visitor's words: another app connects a receiver that returns
# it (chat: what the team's guidance adds, chat/admin/assistant.py), as
# billing imports no chat code.
ledger_readouts = Signal()


@admin.register(LedgerEntry)
class LedgerEntryAdmin(WrittenByTheApp, ModelAdmin):
    """Read-only for everyone, superusers included: the ledger is append-only."""

    list_display = ["created", "model", "input", "cached", "output", "reasoning", "is_estimated", "usd", "turn_status"]
    list_filter = [
        ("created_at", DateRangeFilter),
        "model",
        "estimated",
        "preview",
        PricedFilter,
        ("turn__status", BilledTurnStatusFilter),
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
        "preview",
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
        status = labels.get(entry.turn_status, entry.turn_status)
        # Staff trying a draft of the assistant, not a visitor: billed all the same.
        return gettext("%(status)s (preview)") % {"status": status} if entry.preview else status

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
            readouts=[line for _receiver, line in ledger_readouts.send(sender=self.__class__) if line],
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
