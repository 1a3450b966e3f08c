"""Support's queue of visitors waiting for a person: claim a request, answer
the visitor in their conversation, close it (chat/support/replies.py sends
what is written here)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.text import Truncator
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from base.admin import ModelAdmin
from chat.models import Handoff
from chat.support.admin import CSS, _conversation_link, _when

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
