"""Support's loop in the admin: what visitors said of the answers (the
feedback queue), who asked for a person (the handoff queue), what the help
center is missing (unanswered questions, and every search), and the support
report; who a verified visitor is, on transcripts and requests. Read-only
but for a handoff's state; no prices anywhere.
"""

from __future__ import annotations

import json

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
)
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator
from django.utils.timezone import localtime
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from base.admin import ModelAdmin, WrittenByTheApp
from chat.models import Conversation, Feedback, Search, SupportReport, ToolCall, UnansweredQuestion
from chat.sources import search_results, used_articles
from chat.support import reports
from chat.text import thumb_svg
from helpcenter import search

CSS = {"all": ["chat/admin.css"]}


def _when(value) -> str:
    return date_format(localtime(value), "SHORT_DATETIME_FORMAT") if value else "-"


def _conversation_link(conversation_id: int, public_id) -> str:
    url = reverse("admin:chat_conversation_change", args=[conversation_id])
    return format_html('<a href="{}">{}</a>', url, str(public_id)[:8])


# --- who a verified visitor is ------------------------------------------------------------------


def verified_person(conversation: Conversation, *, full: bool = False) -> str:
    """Who the visitor is, when the customer's site vouched for them with a
    signed token (chat/visitors/verified.py): in a list, a "Verified" badge
    and their id (name and email in its tooltip); with `full` (a
    transcript's or a request's own page), the id, name, email (a link) and
    the token's attributes. "Anonymous" otherwise. Only what the token
    said: never edited here, blank once erased."""
    if not conversation.verified_id:
        label = gettext("(erased)") if conversation.erased_at else gettext("Anonymous")
        return format_html('<span class="kk-reason kk-anonymous">{}</span>', label)

    if not full:
        # In a list, one short line (the lists fit a 1,400 px screen): the
        # badge and the id; the name and email in its tooltip.
        who = ", ".join(v for v in (conversation.verified_name, conversation.verified_email) if v)
        return format_html(
            '<span class="kk-badge kk-badge--verified" title="{}"><span aria-hidden="true">✓</span> {}</span> '
            '<code class="kk-verified-id" title="{}">{}</code>',
            " ".join(filter(None, (gettext("Your site signed who this visitor is."), who))),
            gettext("Verified"),
            conversation.verified_id,
            Truncator(conversation.verified_id).chars(14),
        )
    badge = format_html(
        '<span class="kk-badge kk-badge--verified" title="{}"><span aria-hidden="true">✓</span> {}</span> '
        '<code class="kk-verified-id">{}</code>',
        gettext("Your site signed who this visitor is."),
        gettext("Verified"),
        conversation.verified_id,
    )
    lines = [badge]
    if conversation.verified_name:
        lines.append(format_html("{}", conversation.verified_name))
    if conversation.verified_email:
        email = conversation.verified_email
        lines.append(format_html('<a href="mailto:{}">{}</a>', email, email))
    attributes = conversation.verified_attributes
    if attributes and isinstance(attributes, dict):
        pairs = (
            (key, value if isinstance(value, str) else json.dumps(value)) for key, value in sorted(attributes.items())
        )
        lines.append(format_html('<span class="kk-reason">{}</span>', format_html_join("; ", "{}: {}", pairs)))
    return format_html_join(SafeString("<br>"), "{}", ((line,) for line in lines))


class VerifiedFilter(admin.SimpleListFilter):
    """Conversations of visitors the customer's site verified, or of
    anonymous ones (an erased conversation is anonymous: its person was
    erased with it)."""

    title = _("visitor")
    parameter_name = "verified"
    path = "verified_id"

    def lookups(self, request, model_admin):
        return [("yes", _("Verified")), ("no", _("Anonymous"))]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.exclude(**{self.path: ""})
        if self.value() == "no":
            return queryset.filter(**{self.path: ""})
        return queryset


class RequestVerifiedFilter(VerifiedFilter):
    """Requests for a person from verified visitors, or from anonymous ones."""

    path = "conversation__verified_id"


def rating_badge(feedback: Feedback) -> str:
    label = feedback.get_rating_display()
    icon = mark_safe(thumb_svg(feedback.rating))  # constants only
    return format_html('<span class="kk-rating kk-rating--{}">{} {}</span>', feedback.rating, icon, label)


# --- ratings ----------------------------------------------------------------------------------


class FeedbackRatingFilter(admin.SimpleListFilter):
    title = _("rating")
    parameter_name = "rating"

    def lookups(self, request, model_admin):
        return [("down", _("thumbs down")), ("up", _("thumbs up"))]

    def queryset(self, request, queryset):
        return queryset.filter(rating=self.value()) if self.value() in ("up", "down") else queryset


class FeedbackReviewFilter(admin.SimpleListFilter):
    """To review unless another choice is made: the queue."""

    title = _("review")
    parameter_name = "review"

    def lookups(self, request, model_admin):
        return [
            ("todo", _("to review")),
            ("mine", _("assigned to me, to review")),
            ("done", _("reviewed")),
            ("all", _("all")),
        ]

    def choices(self, changelist):
        for value, label in self.lookup_choices:
            yield {
                "selected": self.value() == value or (self.value() is None and value == "todo"),
                "query_string": changelist.get_query_string({self.parameter_name: value}),
                "display": label,
            }

    def queryset(self, request, queryset):
        value = self.value() or "todo"
        if value == "todo":
            return queryset.filter(reviewed_at__isnull=True)
        if value == "mine":
            return queryset.filter(reviewed_at__isnull=True, assignee=request.user)
        if value == "done":
            return queryset.filter(reviewed_at__isnull=False)
        return queryset


@admin.register(Feedback)
class FeedbackAdmin(WrittenByTheApp, ModelAdmin):
    """Support's review queue: what visitors said of the answers, thumbs
    down first to read, with the articles each answer used; assigned,
    then marked reviewed. Nobody edits a rating: the visitor's own words."""

    list_display = [
        "updated",
        "rating_badge",
        "question",
        "comment_excerpt",
        "articles",
        "review",
        "transcript_link",
    ]
    list_filter = [FeedbackReviewFilter, FeedbackRatingFilter, "updated_at"]
    search_fields = ["comment", "turn__user_text"]
    search_help_text = _("Searches the visitors' comments and questions.")
    list_select_related = ["turn", "assignee", "reviewed_by"]
    ordering = ["-updated_at", "-id"]
    fields = [
        "transcript_link",
        "rating",
        "comment",
        "created_at",
        "updated_at",
        "question",
        "articles",
        "assignee",
        "reviewed_at",
        "reviewed_by",
    ]
    readonly_fields = fields
    actions = ["assign_to_me", "mark_reviewed", "mark_to_review"]

    class Media:
        css = CSS

    def has_change_permission(self, request, obj=None) -> bool:
        # The review's state, through the list's actions; a rating's own page
        # stays view-only: the visitor's words are theirs.
        return obj is None and request.user.has_perm("chat.change_feedback")

    def get_queryset(self, request):
        calls = ToolCall.objects.only("generation_id", "name", "result")
        return super().get_queryset(request).prefetch_related(Prefetch("turn__generations__tool_calls", queryset=calls))

    @admin.action(permissions=["change"], description=_("Assign to me"))
    def assign_to_me(self, request, queryset):
        count = queryset.update(assignee=request.user)
        self._moved(request, count)

    @admin.action(permissions=["change"], description=_("Mark reviewed"))
    def mark_reviewed(self, request, queryset):
        count = queryset.filter(reviewed_at__isnull=True).update(reviewed_at=timezone.now(), reviewed_by=request.user)
        self._moved(request, count)

    @admin.action(permissions=["change"], description=_("Mark to review again"))
    def mark_to_review(self, request, queryset):
        count = queryset.exclude(reviewed_at=None).update(reviewed_at=None, reviewed_by=None)
        self._moved(request, count)

    def _moved(self, request, count: int) -> None:
        message = ngettext("%(count)d rating updated.", "%(count)d ratings updated.", count) % {"count": count}
        self.message_user(request, message, messages.SUCCESS)

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

    @admin.display(description=_("review"), ordering="reviewed_at")
    def review(self, obj) -> str:
        if obj.reviewed_at:
            return _("reviewed by %(name)s") % {"name": obj.reviewed_by or "-"}
        if obj.assignee:
            return _("assigned to %(name)s") % {"name": obj.assignee}
        return _("to review")

    @admin.display(description=_("transcript"))
    def transcript_link(self, obj) -> str:
        return transcript_link(obj.turn)


def transcript_link(turn) -> str:
    """The conversation's transcript, opened at the turn."""
    url = reverse("admin:chat_conversation_change", args=[turn.conversation_id]) + f"#turn-{turn.pk}"
    return format_html('<a href="{}">{}</a>', url, _("Read the conversation"))


# --- searches and the unanswered questions ------------------------------------------------------


@admin.register(Search)
class SearchAdmin(WrittenByTheApp, ModelAdmin):
    """Every help-center search the model made: whether it found an article
    above the floor, and whether the answer cited one."""

    list_display = ["searched", "query_text", "score", "matched", "cited", "articles", "turn_link"]
    list_filter = ["matched", "cited", "created_at"]
    search_fields = ["query"]
    list_select_related = ["turn"]
    fields = ["searched", "query_text", "terms", "score", "matched", "articles", "cited", "turn_link"]
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
        """Their titles, linked: ids read like counts. An article no longer
        published is named by its id."""
        found = search.articles_by_id()
        shown = [
            format_html('<a href="{}">{}</a>', found[i].url, found[i].title)
            if i in found
            else format_html("<span>{}</span>", _("article %(id)s") % {"id": i})
            for i in obj.article_ids
        ]
        return format_html_join(", ", "{}", ((item,) for item in shown)) or "-"

    @admin.display(description=_("transcript"))
    def turn_link(self, obj) -> str:
        return transcript_link(obj.turn)


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
        unknown = set(request.GET) - self.offered_lookups(request)
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

    def _offered_lookups(self, request: HttpRequest) -> tuple[str, ...]:
        return reports.PARAMETERS  # the period's, and no list filter's

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
