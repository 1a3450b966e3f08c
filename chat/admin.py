from django.contrib import admin
from django.db.models import Count

from chat.models import Conversation, Generation, HelpArticle, ToolCall, Turn


@admin.register(HelpArticle)
class HelpArticleAdmin(admin.ModelAdmin):
    list_display = ["title", "slug", "published", "updated_at"]
    list_filter = ["published"]
    search_fields = ["title", "body"]
    prepopulated_fields = {"slug": ["title"]}


class TurnInline(admin.TabularInline):
    model = Turn
    fields = ["started_at", "status", "interrupted", "user_text", "assistant_text"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = ["public_id", "created_at", "updated_at", "turn_count"]
    readonly_fields = ["public_id", "session_key", "created_at", "updated_at"]
    inlines = [TurnInline]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(turn_count=Count("turns"))

    @admin.display(ordering="turn_count", description="turns")
    def turn_count(self, obj) -> int:
        return obj.turn_count


class GenerationInline(admin.TabularInline):
    model = Generation
    fields = [
        "round",
        "finish_reason",
        "input_tokens",
        "output_tokens",
        "usage_estimated",
        "started_at",
        "first_delta_at",
        "ended_at",
    ]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Turn)
class TurnAdmin(admin.ModelAdmin):
    list_display = ["id", "conversation", "status", "interrupted", "generation_count", "model", "started_at"]
    list_filter = ["status", "interrupted", "model"]
    list_select_related = ["conversation"]
    search_fields = ["user_text", "assistant_text"]
    readonly_fields = [
        "conversation",
        "status",
        "interrupted",
        "user_text",
        "assistant_text",
        "error",
        "model",
        "started_at",
        "ended_at",
    ]
    inlines = [GenerationInline]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(generation_count=Count("generations"))

    @admin.display(ordering="generation_count", description="generations")
    def generation_count(self, obj) -> int:
        return obj.generation_count


class ToolCallInline(admin.TabularInline):
    model = ToolCall
    fields = ["call_id", "name", "arguments", "result", "error"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Generation)
class GenerationAdmin(admin.ModelAdmin):
    list_display = [
        "turn",
        "round",
        "finish_reason",
        "input_tokens",
        "output_tokens",
        "usage_estimated",
        "started_at",
    ]
    list_filter = ["finish_reason", "usage_estimated"]
    list_select_related = ["turn"]
    readonly_fields = [
        "turn",
        "round",
        "finish_reason",
        "input_tokens",
        "output_tokens",
        "usage_estimated",
        "started_at",
        "first_delta_at",
        "ended_at",
    ]
    inlines = [ToolCallInline]


@admin.register(ToolCall)
class ToolCallAdmin(admin.ModelAdmin):
    list_display = ["name", "call_id", "generation"]
    list_filter = ["name"]
    list_select_related = ["generation"]
    readonly_fields = ["generation", "call_id", "name", "arguments", "result", "error"]
