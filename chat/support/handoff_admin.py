"""Support's queue of visitors waiting for a person: claim a request, answer
the visitor in their conversation, close it (chat/support/replies.py sends
what is written here)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import path, reverse
from django.utils import timezone
from django.utils.cache import patch_cache_control
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import Truncator
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from base.admin import ModelAdmin
from chat.models import Conversation, Handoff, Message, Turn
from chat.support import replies
from chat.support.admin import CSS, RequestVerifiedFilter, _conversation_link, _when, verified_person

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
    """The queue of visitors waiting for a person: claim one, answer them in
    their conversation (they see it at once, or by email), close it."""

    list_display = [
        "requested",
        "status_badge",
        "reason_excerpt",
        "from_visitor",
        "contact",
        "conversation_link",
    ]
    list_filter = [HandoffStatusFilter, RequestVerifiedFilter, "source", "created_at"]
    list_select_related = ["conversation", "claimed_by"]
    # A verified visitor by their id on the customer's site (exactly) or their email.
    search_fields = ["reason", "email", "=conversation__verified_id", "conversation__verified_email"]
    search_help_text = _("Searches the reasons, the visitors' email addresses and verified visitors' ids.")
    ordering = ["created_at", "id"]  # the longest waiting first
    fields = [
        "status",
        "source",
        "reason",
        "verified_person",
        "email_link",
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
        css = {"all": [*CSS["all"], "chat/handoff.css"]}

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def get_queryset(self, request):
        # What the visitor wrote to Support, and how much of it since the last reply.
        visitor = Message.objects.filter(handoff=OuterRef("pk"), kind=Message.Kind.VISITOR)
        last_reply = (
            Message.objects.filter(handoff=OuterRef(OuterRef("pk")), kind=Message.Kind.AGENT)
            .order_by("-created_at")
            .values("created_at")[:1]
        )
        return (
            super()
            .get_queryset(request)
            .annotate(
                visitor_messages=_count(visitor),
                unanswered_messages=_count(
                    visitor.filter(Q(created_at__gt=Subquery(last_reply)) | ~Exists(last_reply))
                ),
            )
        )

    def get_urls(self):
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        view = self.admin_site.admin_view
        return [
            path("<int:pk>/move/", view(self.move_view), name=f"{name}_move"),
            path("<int:pk>/reply/", view(self.reply_view), name=f"{name}_reply"),
            path("<int:pk>/note/", view(self.note_view), name=f"{name}_note"),
            path("<int:pk>/thread/", view(self.thread_view), name=f"{name}_thread"),
            path("answer/<int:conversation_id>/", view(self.answer_view), name=f"{name}_answer"),
            *super().get_urls(),
        ]

    def render_change_form(self, request, context, *args, obj=None, **kwargs):
        may_change = obj is not None and self.has_change_permission(request, obj)
        # An erased conversation's request stays closed: nobody writes in it again.
        open_to_moves = may_change and obj.conversation.erased_at is None
        context["moves"] = _moves(obj) if open_to_moves else []
        context["may_reply"] = open_to_moves and obj.status != Handoff.Status.CLOSED
        context["may_note"] = may_change
        if obj is not None:
            context["thread"] = thread(obj)
        return super().render_change_form(request, context, *args, obj=obj, **kwargs)

    def _changeable(self, request: HttpRequest, pk: int) -> Handoff:
        handoff = get_object_or_404(Handoff, pk=pk)
        if not self.has_change_permission(request, handoff):
            raise PermissionDenied
        return handoff

    def reply_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """Support's reply to the visitor, from the request's page."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        handoff = self._changeable(request, pk)
        text = request.POST.get("text", "").strip()
        back = HttpResponseRedirect(reverse("admin:chat_handoff_change", args=[pk]) + "#kk-reply")
        if not text or len(text) > replies.REPLY_CHARS:
            self.message_user(request, _("Write a reply (at most 10,000 characters)."), messages.ERROR)
            return back
        try:
            replies.reply(handoff.pk, text, user=request.user)
        except replies.Closed:
            if handoff.conversation.erased_at is not None:
                self.message_user(request, _("This conversation was erased: nobody can reply in it."), messages.ERROR)
            else:
                self.message_user(request, _("This request is closed: reopen it to reply."), messages.ERROR)
            return back
        self.log_change(request, handoff, "reply")
        self.message_user(request, _("Sent to the visitor."), messages.SUCCESS)
        return back

    def note_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """An internal note: Support reads it, the visitor never does."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        handoff = self._changeable(request, pk)
        text = request.POST.get("text", "").strip()
        back = HttpResponseRedirect(reverse("admin:chat_handoff_change", args=[pk]) + "#kk-note")
        if not text or len(text) > replies.REPLY_CHARS:
            self.message_user(request, _("Write a note (at most 10,000 characters)."), messages.ERROR)
            return back
        replies.note(handoff.pk, text, request.user)
        self.message_user(request, _("Note added. The visitor does not see it."), messages.SUCCESS)
        return back

    def thread_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """The conversation so far, for the request's page to follow live."""
        handoff = get_object_or_404(Handoff, pk=pk)
        if not self.has_view_permission(request, handoff):
            raise PermissionDenied
        response = render(request, "admin/chat/handoff/thread.html", {"thread": thread(handoff)})
        patch_cache_control(response, private=True, no_store=True)
        return response

    def answer_view(self, request: HttpRequest, conversation_id: int) -> HttpResponse:
        """Support answers a conversation from its transcript: its waiting
        request, or a new one, claimed by them."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_change_permission(request):
            raise PermissionDenied
        conversation = get_object_or_404(Conversation, pk=conversation_id)
        try:
            handoff = replies.answer_conversation(conversation.pk, request.user)
        except replies.Closed:
            self.message_user(request, _("This conversation was erased: nobody can reply in it."), messages.ERROR)
            return HttpResponseRedirect(reverse("admin:chat_conversation_change", args=[conversation.pk]))
        if handoff.claimed_by_id != request.user.pk:
            self.message_user(
                request,
                _("%(name)s already answers this visitor.") % {"name": handoff.agent_name or _("Someone")},
                messages.WARNING,
            )
        return HttpResponseRedirect(reverse("admin:chat_handoff_change", args=[handoff.pk]) + "#kk-reply")

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
            self.message_user(request, MOVE_DONE[move], messages.SUCCESS)
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
        if obj.status == Handoff.Status.CLAIMED and (obj.agent_name or obj.claimed_by):
            return format_html('{} <span class="kk-reason">{}</span>', badge, obj.agent_name or obj.claimed_by)
        return badge

    @admin.display(description=_("from the visitor"), ordering="unanswered_messages")
    def from_visitor(self, obj) -> str:
        """How many messages the visitor wrote to Support, and how many since the last reply."""
        if not obj.visitor_messages:
            return "-"
        if obj.unanswered_messages:
            return format_html(
                '{} <span class="kk-badge kk-handoff--open">{}</span>',
                obj.visitor_messages,
                ngettext("%(count)s new", "%(count)s new", obj.unanswered_messages)
                % {"count": obj.unanswered_messages},
            )
        return str(obj.visitor_messages)

    @admin.display(description=_("reason"))
    def reason_excerpt(self, obj) -> str:
        # Who asked, under what they said.
        return format_html(
            '{}<br><span class="kk-reason">{}</span>', Truncator(obj.reason).chars(100) or "-", obj.get_source_display()
        )

    @admin.display(description=_("email"), ordering="email")
    def contact(self, obj) -> str:
        """The email the visitor gave with the request, and, for a verified
        visitor, their badge and id (in one column: two did not fit 1,400 px)."""
        # The address on one line, a long one cut short: whole in its tooltip.
        email = format_html('<span class="kk-email" title="{}">{}</span>', obj.email, obj.email) if obj.email else ""
        if not obj.conversation.verified_id:
            return email or "-"
        return format_html_join(
            SafeString("<br>"), "{}", ((part,) for part in (email, verified_person(obj.conversation)) if part)
        )

    @admin.display(description=_("visitor"))
    def verified_person(self, obj) -> str:
        """Who the customer's site says the visitor is, in full; read-only.
        (The email below is the one they gave with the request, if any.)"""
        return verified_person(obj.conversation, full=True)

    @admin.display(description=_("email"))
    def email_link(self, obj) -> str:
        """The visitor's address, to write to from Support's own mail."""
        return format_html('<a href="mailto:{}">{}</a>', obj.email, obj.email) if obj.email else "-"

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
MOVE_DONE = {
    "claim": _("Claimed: the visitor sees that you answer, and their messages come to you."),
    "close": _("Closed: the assistant answers the visitor again."),
    "reopen": _("Reopened: the request waits in the queue again."),
}


def _count(messages) -> Coalesce:
    counted = messages.order_by().values("handoff").annotate(n=Count("id")).values("n")
    return Coalesce(Subquery(counted), 0)


def thread(handoff: Handoff) -> list[dict]:
    """The conversation as Support answers it: the visitor's questions and the
    assistant's answers, Support's replies, the visitor's messages to them
    and the internal notes, in order."""
    turns = Turn.objects.filter(conversation_id=handoff.conversation_id).only(
        "id", "started_at", "user_text", "assistant_text", "status", "erased_at"
    )
    entries = [{"kind": "turn", "at": turn.started_at, "turn": turn} for turn in turns.order_by("started_at", "id")]
    notes = Message.objects.filter(conversation_id=handoff.conversation_id).exclude(
        Q(kind=Message.Kind.NOTE) & ~Q(handoff=handoff)
    )
    entries += [{"kind": m.kind, "at": m.created_at, "message": m} for m in notes.order_by("created_at", "id")]
    return sorted(entries, key=lambda entry: entry["at"])


def _moves(handoff: Handoff) -> list[tuple[str, str]]:
    return [(move, MOVE_LABELS[move]) for move, (sources, _target) in MOVES.items() if handoff.status in sources]


def _apply(move: str, queryset, user) -> int:
    """Moves the requests that can make this move; returns how many did.
    A conditional update: two agents claiming at once, one wins."""
    sources, target = MOVES[move]
    now = timezone.now()
    fields = {"status": target}
    if move == "claim":
        fields |= {"claimed_by": user, "claimed_at": now, "agent_name": replies.author_name(user)}
    elif move == "close":
        fields |= {"closed_at": now}
    else:
        fields |= {"claimed_by": None, "claimed_at": None, "closed_at": None, "agent_name": ""}
    moved: list[int] = []
    # select_related(None): the changelist's queryset follows claimed_by, which only() defers.
    # An erased conversation's requests never move again (chat/support/erasure.py).
    movable = queryset.filter(status__in=sources, conversation__erased_at__isnull=True)
    for handoff in movable.select_related(None).only("id", "conversation_id"):
        # Reopening one must not make two waiting requests in a conversation.
        if target == Handoff.Status.OPEN and (
            Handoff.objects.filter(conversation_id=handoff.conversation_id, status__in=Handoff.PENDING)
            .exclude(pk=handoff.pk)
            .exists()
        ):
            continue
        try:
            with transaction.atomic():  # a savepoint: a request or a reopen racing in may have won
                still = Handoff.objects.filter(pk=handoff.pk, status__in=sources, conversation__erased_at__isnull=True)
                if still.update(**fields):
                    moved.append(handoff.pk)
        except IntegrityError:
            continue  # another request of the conversation waits now
    # The visitors' pages say who answers them now, or that the assistant does.
    replies.announce_handoff_changes(moved)
    return len(moved)
