"""Support's loop in the admin: what visitors said of the answers (the
feedback queue), who asked for a person (the handoff queue), what the help
center is missing (unanswered questions, and every search), and the support
report. Read-only but for a handoff's state; no prices anywhere.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.db.models import Prefetch
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator
from django.utils.timezone import localtime
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from base.admin import ModelAdmin, WrittenByTheApp
from chat.models import Feedback, Handoff, Search, SupportReport, ToolCall, UnansweredQuestion
from chat.sources import search_results, used_articles
from chat.support import reports

CSS = {"all": ["chat/admin.css"]}


def _when(value) -> str:
    return date_format(localtime(value), "Y-m-d H:i:s") if value else "-"


def _conversation_link(conversation_id: int, public_id) -> str:
    url = reverse("admin:chat_conversation_change", args=[conversation_id])
    return format_html('<a href="{}">{}</a>', url, str(public_id)[:8])


def rating_badge(feedback: Feedback) -> str:
    label = feedback.get_rating_display()
    return format_html('<span class="kk-rating kk-rating--{}">{}</span>', feedback.rating, label)


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


# --- handoffs ---------------------------------------------------------------------------------


class HandoffStatusFilter(admin.SimpleListFilter):
    """Waiting (open or claimed) unless another choice is made: the queue."""

    title = _("status")
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return [("pending", _("waiting (open or claimed)")), *Handoff.Status.choices, ("all", _("all"))]

    def choices(self, changelist):
        for value, label in self.lookup_choices:
            selected = self.value() == value or (self.value() is None and value == "pending")
            yield {
                "selected": selected,
                "query_string": changelist.get_query_string({self.parameter_name: value}),
                "display": label,
            }

    def queryset(self, request, queryset):
        value = self.value() or "pending"
        if value == "pending":
            return queryset.filter(status__in=Handoff.PENDING)
        if value in Handoff.Status.values:
            return queryset.filter(status=value)
        return queryset


@admin.register(Handoff)
class HandoffAdmin(ModelAdmin):
    """The queue of visitors waiting for a person: claim one, reply (by the
    email they left), close it."""

    list_display = [
        "requested",
        "status_badge",
        "reason_excerpt",
        "email",
        "conversation_link",
    ]
    list_filter = [HandoffStatusFilter, "source", "created_at"]
    list_select_related = ["conversation", "claimed_by"]
    search_fields = ["reason", "email"]
    search_help_text = _("Searches the reasons and the visitors' email addresses.")
    ordering = ["created_at", "id"]  # the longest waiting first
    fields = [
        "status",
        "source",
        "reason",
        "email",
        "conversation_link",
        "requested",
        "claimed_by",
        "claimed_at",
        "closed_at",
        "notified",
    ]
    readonly_fields = fields
    actions = ["claim", "close", "reopen"]
    change_form_template = "admin/chat/handoff/change_form.html"

    class Media:
        css = CSS

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def get_urls(self):
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path("<int:pk>/move/", self.admin_site.admin_view(self.move_view), name=f"{name}_move"),
            *super().get_urls(),
        ]

    def render_change_form(self, request, context, *args, obj=None, **kwargs):
        context["moves"] = _moves(obj) if obj is not None and self.has_change_permission(request, obj) else []
        return super().render_change_form(request, context, *args, obj=obj, **kwargs)

    def move_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """Claim, close or reopen one request, from its page."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        handoff = get_object_or_404(Handoff, pk=pk)
        if not self.has_change_permission(request, handoff):
            raise PermissionDenied
        move = request.POST.get("move")
        if move not in MOVES:
            return HttpResponseBadRequest(gettext("Unknown move."), content_type="text/plain")
        count = _apply(move, Handoff.objects.filter(pk=pk), request.user)
        if count:
            self.log_change(request, handoff, f"{move}")
        else:
            self.message_user(request, _("That request had already moved on."), messages.WARNING)
        return HttpResponseRedirect(reverse("admin:chat_handoff_change", args=[pk]))

    @admin.action(permissions=["change"], description=_("Claim: I'll answer these"))
    def claim(self, request, queryset):
        self._bulk(request, queryset, "claim")

    @admin.action(permissions=["change"], description=_("Close: answered"))
    def close(self, request, queryset):
        self._bulk(request, queryset, "close")

    @admin.action(permissions=["change"], description=_("Reopen"))
    def reopen(self, request, queryset):
        self._bulk(request, queryset, "reopen")

    def _bulk(self, request, queryset, move: str) -> None:
        count = _apply(move, queryset, request.user)
        self.message_user(
            request,
            ngettext("%(count)d request moved.", "%(count)d requests moved.", count) % {"count": count},
            messages.SUCCESS,
        )

    @admin.display(description=_("requested"), ordering="created_at")
    def requested(self, obj) -> str:
        return _when(obj.created_at)

    @admin.display(description=_("status"), ordering="status")
    def status_badge(self, obj) -> str:
        badge = format_html('<span class="kk-badge kk-handoff--{}">{}</span>', obj.status, obj.get_status_display())
        if obj.status == Handoff.Status.CLAIMED and obj.claimed_by:
            return format_html('{} <span class="kk-reason">{}</span>', badge, obj.claimed_by.get_username())
        return badge

    @admin.display(description=_("reason"))
    def reason_excerpt(self, obj) -> str:
        # Who asked, under what they said.
        return format_html(
            '{}<br><span class="kk-reason">{}</span>', Truncator(obj.reason).chars(100) or "-", obj.get_source_display()
        )

    @admin.display(description=_("conversation"))
    def conversation_link(self, obj) -> str:
        return _conversation_link(obj.conversation_id, obj.conversation.public_id)

    @admin.display(description=_("Support told"))
    def notified(self, obj) -> str:
        parts = []
        if obj.email_status:
            parts.append(_("email: %(status)s") % {"status": obj.get_email_status_display().lower()})
        if obj.webhook_status:
            parts.append(
                _("webhook: %(status)s (%(attempts)s attempts)")
                % {"status": obj.get_webhook_status_display().lower(), "attempts": obj.webhook_attempts}
            )
        return "; ".join(parts) or _("not configured")


# A move, from the statuses it applies to, to the fields it sets.
MOVES = {
    "claim": ([Handoff.Status.OPEN], Handoff.Status.CLAIMED),
    "close": ([Handoff.Status.OPEN, Handoff.Status.CLAIMED], Handoff.Status.CLOSED),
    "reopen": ([Handoff.Status.CLOSED, Handoff.Status.CLAIMED], Handoff.Status.OPEN),
}
MOVE_LABELS = {"claim": _("Claim"), "close": _("Close: answered"), "reopen": _("Reopen")}


def _moves(handoff: Handoff) -> list[tuple[str, str]]:
    return [(move, MOVE_LABELS[move]) for move, (sources, _target) in MOVES.items() if handoff.status in sources]


def _apply(move: str, queryset, user) -> int:
    """Moves the requests that can make this move; returns how many did.
    A conditional update: two agents claiming at once, one wins."""
    sources, target = MOVES[move]
    now = timezone.now()
    fields = {"status": target}
    if move == "claim":
        fields |= {"claimed_by": user, "claimed_at": now}
    elif move == "close":
        fields |= {"closed_at": now}
    else:
        fields |= {"claimed_by": None, "claimed_at": None, "closed_at": None}
    moved = 0
    # select_related(None): the changelist's queryset follows claimed_by, which only() defers.
    for handoff in queryset.filter(status__in=sources).select_related(None).only("id", "conversation_id"):
        # Reopening one must not make two waiting requests in a conversation.
        if target == Handoff.Status.OPEN and (
            Handoff.objects.filter(conversation_id=handoff.conversation_id, status__in=Handoff.PENDING)
            .exclude(pk=handoff.pk)
            .exists()
        ):
            continue
        try:
            with transaction.atomic():  # a savepoint: a request or a reopen racing in may have won
                moved += Handoff.objects.filter(pk=handoff.pk, status__in=sources).update(**fields)
        except IntegrityError:
            continue  # another request of the conversation waits now
    return moved


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
            "presets": [(days, request.GET.get("days") == str(days)) for days in reports.PERIODS],
            "custom": bool(request.GET.get("from") or request.GET.get("to")),
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
        return {"gaps": reports.unanswered(period)}


@admin.register(SupportReport)
class SupportReportAdmin(FiguresPage):
    """The support report: one page of figures per period."""

    template = "admin/chat/support_report.html"
    title = _("Support report")

    def figures(self, period: reports.Period) -> dict:
        return {"figures": reports.figures(period)}
