"""Support's loop in the admin: what visitors said of the answers (the
feedback queue), who asked for a person (the handoff queue), what the help
center is missing (unanswered questions, and every search), and the support
report. Read-only but for a handoff's state; no prices anywhere.
"""

from __future__ import annotations

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
)
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator
from django.utils.timezone import localtime
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from base.admin import ModelAdmin, WrittenByTheApp
from chat.models import Feedback, Search, SupportReport, ToolCall, UnansweredQuestion
from chat.sources import search_results, used_articles
from chat.support import reports
from chat.templatetags.icons import thumb

CSS = {"all": ["chat/admin.css"]}


def _when(value) -> str:
    return date_format(localtime(value), "Y-m-d H:i:s") if value else "-"


def _conversation_link(conversation_id: int, public_id) -> str:
    url = reverse("admin:chat_conversation_change", args=[conversation_id])
    return format_html('<a href="{}">{}</a>', url, str(public_id)[:8])


def rating_badge(feedback: Feedback) -> str:
    label = feedback.get_rating_display()
    icon = thumb(feedback.rating)
    return format_html('<span class="kk-rating kk-rating--{}">{} {}</span>', feedback.rating, icon, label)


# --- ratings ----------------------------------------------------------------------------------


class FeedbackRatingFilter(admin.SimpleListFilter):
    title = _("rating")
    parameter_name = "rating"

    def lookups(self, request, model_admin):
        return [("down", _("thumbs down")), ("up", _("thumbs up"))]

    def queryset(self, request, queryset):
        return queryset.filter(rating=self.value()) if self.value() in ("up", "down") else queryset


@admin.register(Feedback)
class FeedbackAdmin(WrittenByTheApp, ModelAdmin):
    """Support's review queue: what visitors said of the answers, thumbs
    down first to read, with the articles each answer used. Nobody edits a
    rating: the visitor's own words."""

    list_display = ["updated", "rating_badge", "question", "comment_excerpt", "articles", "turn_link"]
    list_filter = [FeedbackRatingFilter, "updated_at"]
    search_fields = ["comment", "turn__user_text"]
    search_help_text = _("Searches the visitors' comments and questions.")
    list_select_related = ["turn"]
    ordering = ["-updated_at", "-id"]
    fields = ["turn_link", "rating", "comment", "created_at", "updated_at", "question", "articles"]
    readonly_fields = fields
    actions = None

    class Media:
        css = CSS

    def get_queryset(self, request):
        calls = ToolCall.objects.only("generation_id", "name", "result")
        return super().get_queryset(request).prefetch_related(Prefetch("turn__generations__tool_calls", queryset=calls))

    @admin.display(description=_("rated"), ordering="updated_at")
    def updated(self, obj) -> str:
        return _when(obj.updated_at)

    @admin.display(description=_("rating"), ordering="rating")
    def rating_badge(self, obj) -> str:
        return rating_badge(obj)

    @admin.display(description=_("question"))
    def question(self, obj) -> str:
        return _("(erased)") if obj.turn.erased_at else Truncator(obj.turn.user_text).chars(80)

    @admin.display(description=_("comment"))
    def comment_excerpt(self, obj) -> str:
        return Truncator(obj.comment).chars(120) or "-"

    @admin.display(description=_("articles the answer used"))
    def articles(self, obj) -> str:
        calls = [call for generation in obj.turn.generations.all() for call in generation.tool_calls.all()]
        used = used_articles(obj.turn.assistant_text, search_results(calls))
        if not used:
            return _("none")
        return format_html_join(", ", '<a href="{}">{}</a>', ((a["url"], a["title"]) for a in used))

    @admin.display(description=_("turn"))
    def turn_link(self, obj) -> str:
        url = reverse("admin:chat_turn_change", args=[obj.turn_id])
        return format_html('<a href="{}">{}</a>', url, _("Turn %(id)s") % {"id": obj.turn_id})


# --- searches and the unanswered questions ------------------------------------------------------


@admin.register(Search)
class SearchAdmin(WrittenByTheApp, ModelAdmin):
    """Every help-center search the model made: whether it found an article
    above the floor, and whether the answer cited one."""

    list_display = ["searched", "query_text", "score", "matched", "cited", "articles", "turn_link"]
    list_filter = ["matched", "cited", "created_at"]
    search_fields = ["query"]
    list_select_related = ["turn"]
    fields = ["searched", "query_text", "terms", "score", "matched", "article_ids", "cited", "turn_link"]
    readonly_fields = fields
    actions = None

    class Media:
        css = CSS

    @admin.display(description=_("searched"), ordering="created_at")
    def searched(self, obj) -> str:
        return _when(obj.created_at)

    @admin.display(description=_("query"))
    def query_text(self, obj) -> str:
        return _("(erased)") if obj.turn.erased_at else Truncator(obj.query).chars(80)

    @admin.display(description=_("best score"), ordering="top_score")
    def score(self, obj) -> str:
        return "-" if obj.top_score is None else f"{obj.top_score:.2f}"

    @admin.display(description=_("articles returned"))
    def articles(self, obj) -> str:
        return ", ".join(str(i) for i in obj.article_ids) or "-"

    @admin.display(description=_("turn"))
    def turn_link(self, obj) -> str:
        url = reverse("admin:chat_turn_change", args=[obj.turn_id])
        return format_html('<a href="{}">{}</a>', url, _("Turn %(id)s") % {"id": obj.turn_id})


class FiguresPage(WrittenByTheApp, ModelAdmin):
    """An admin entry that is a page of figures, not a list: its view
    permission opens it; nothing can be added, changed or deleted."""

    template = ""
    title = ""
    fields = ["id"]  # no form: nothing of the model is shown but the figures

    class Media:
        css = CSS

    def get_urls(self):
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        return [path("", self.admin_site.admin_view(self.changelist_view), name=f"{name}_changelist")]

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        unknown = set(request.GET) - {"days", "from", "to"}
        if unknown:
            # As every list refuses a filter it does not offer (base/admin.py).
            message = gettext("Unknown parameter: %(name)s") % {"name": sorted(unknown)[0]}
            return HttpResponseBadRequest(message, content_type="text/plain")
        try:
            period = reports.Period.from_query(request.GET)
        except ValueError as e:
            return HttpResponseBadRequest(gettext("Bad period: %(reason)s") % {"reason": e}, content_type="text/plain")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": self.title,
            "period": period,
            # The period shown is highlighted among the presets, the default (30 days) too.
            "presets": [(days, period.is_last_days(days)) for days in reports.PERIODS],
            "custom": not any(period.is_last_days(days) for days in reports.PERIODS),
            **self.figures(period),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.template, context)

    def figures(self, period: reports.Period) -> dict:
        raise NotImplementedError


@admin.register(UnansweredQuestion)
class UnansweredQuestionAdmin(FiguresPage):
    """What the help center is missing, for deciding which article to write next."""

    template = "admin/chat/unanswered.html"
    title = _("Unanswered questions")

    def figures(self, period: reports.Period) -> dict:
        found = reports.unanswered_in(period)
        return {"gaps": found.gaps, "accounts": found.accounts, "answered_since": found.answered_since}


@admin.register(SupportReport)
class SupportReportAdmin(FiguresPage):
    """The support report: one page of figures per period."""

    template = "admin/chat/support_report.html"
    title = _("Support report")

    def figures(self, period: reports.Period) -> dict:
        return {"figures": reports.figures(period)}
