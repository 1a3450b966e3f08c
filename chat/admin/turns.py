"""Turns, model calls (generations) and tool calls in the admin: what each
question cost in calls to the model, and how each call ended. Read-only:
they are records.
"""

from django.contrib import admin
from django.db.models import Count
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.text import Truncator
from django.utils.timezone import localtime
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from base.admin import ModelAdmin
from chat.admin.queries import RatingFilter, WastedGenerationsFilter, per_row
from chat.models import Generation, ToolCall, Turn
from chat.support import admin as support_admin


def _text(turn: Turn, text: str) -> str:
    """A turn's text, escaped; or when and why it was erased."""
    return render_to_string("admin/chat/text.html", {"text": text, "erased_at": turn.erased_at})


class GenerationInline(admin.TabularInline):
    model = Generation
    fields = [
        "round",
        "finish",
        "input_tokens",
        "cached_input_tokens",
        "output_tokens",
        "reasoning_tokens",
        "usage_estimated",
        "started_at",
        "first_delta_at",
        "ended_at",
    ]
    readonly_fields = fields
    extra = 0

    @admin.display(description=_("finish reason"))
    def finish(self, obj) -> str:
        return obj.finish_reason_label

    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Turn)
class TurnAdmin(ModelAdmin):
    # Narrow enough for a 1,400 px screen beside the admin's sidebar and the
    # filters: the question is the link, the model is a filter (one model, mostly).
    list_display = [
        "question",
        "started",
        "status_badge",
        "rating",
        "generation_count",
        "conversation_short",
    ]
    list_display_links = ["question"]
    list_filter = ["status", "stop_reason", RatingFilter, WastedGenerationsFilter, "interrupted", "model", "started_at"]
    list_select_related = ["conversation", "feedback"]
    search_fields = ["user_text", "assistant_text"]
    date_hierarchy = "started_at"
    ordering = ["-started_at", "-id"]

    class Media:
        css = {"all": ["chat/admin.css"]}

    fields = [
        "conversation",
        "status",
        "interrupted",
        "stop_reason",
        "stopped_by",
        "error",
        "model",
        "started_at",
        "ended_at",
        "question_text",
        "answer",
    ]
    readonly_fields = fields
    inlines = [GenerationInline]

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(
                generation_count=per_row(Generation, "turn", Count("id")),
                tool_rounds=per_row(Generation, "turn", Count("id", distinct=True), tool_calls__isnull=False),
            )
        )

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(ordering="generation_count", description=_("generations"))
    def generation_count(self, obj) -> str:
        # With the rounds that called tools: a plain answer is "1 (0 with tools)".
        return gettext("%(calls)s (%(tool_rounds)s with tools)") % {
            "calls": obj.generation_count,
            "tool_rounds": obj.tool_rounds,
        }

    @admin.display(description=_("question"))
    def question(self, obj) -> str:
        return gettext("(erased)") if obj.erased_at else Truncator(obj.user_text).chars(80)

    @admin.display(ordering="started_at", description=_("started"))
    def started(self, obj) -> str:
        return date_format(localtime(obj.started_at), "SHORT_DATETIME_FORMAT")

    @admin.display(ordering="conversation", description=_("conversation"))
    def conversation_short(self, obj) -> str:
        url = reverse("admin:chat_conversation_change", args=[obj.conversation_id])
        return format_html('<a href="{}">{}</a>', url, str(obj.conversation.public_id)[:8])

    @admin.display(description=_("question"))
    def question_text(self, obj) -> str:
        return _text(obj, obj.user_text)

    @admin.display(ordering="tool_rounds", description=_("tool rounds"))
    def tool_rounds(self, obj) -> int:
        return obj.tool_rounds

    @admin.display(ordering="status", description=_("status"))
    def status_badge(self, obj) -> str:
        badge = format_html('<span class="kk-badge kk-badge--{}">{}</span>', obj.status, obj.get_status_display())
        if not obj.stop_reason:
            return badge
        # Why it was interrupted: a Stop is not a lost connection.
        return format_html('{} <span class="kk-reason">{}</span>', badge, obj.get_stop_reason_display())

    @admin.display(description=_("answer, as the visitor saw it"))
    def answer(self, obj) -> str:
        # Rendered, as the chat showed it: Markdown, and an answer cut short as it ended there.
        context = {"text": obj.assistant_text, "erased_at": obj.erased_at, "markdown": True, "status": obj.status}
        return render_to_string("admin/chat/text.html", context)

    @admin.display(description=_("rating"), ordering="feedback__rating")
    def rating(self, obj) -> str:
        feedback = getattr(obj, "feedback", None)
        return support_admin.rating_badge(feedback) if feedback else "-"


class ToolCallInline(admin.TabularInline):
    model = ToolCall
    fields = ["call_id", "name", "arguments", "result", "error"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Generation)
class GenerationAdmin(ModelAdmin):
    list_display = [
        "turn",
        "round",
        "finish",
        "input_tokens",
        "cached_input_tokens",
        "output_tokens",
        "reasoning_tokens",
        "usage_estimated",
        "started_at",
    ]
    list_filter = ["finish_reason", "usage_estimated"]
    list_select_related = ["turn"]
    readonly_fields = [
        "turn",
        "round",
        "finish",
        "input_tokens",
        "cached_input_tokens",
        "output_tokens",
        "reasoning_tokens",
        "usage_estimated",
        "started_at",
        "first_delta_at",
        "ended_at",
    ]
    inlines = [ToolCallInline]

    @admin.display(description=_("finish reason"), ordering="finish_reason")
    def finish(self, obj) -> str:
        return obj.finish_reason_label

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(ToolCall)
class ToolCallAdmin(ModelAdmin):
    list_display = ["name", "call_id", "generation"]
    list_filter = ["name"]
    list_select_related = ["generation"]
    readonly_fields = ["generation", "call_id", "name", "arguments", "result", "error"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
