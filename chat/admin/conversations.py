"""Conversations in the admin: transcripts that read like the chat did, with
their counts at a glance, who a verified visitor is (what the customer's
site signed: chat/visitors/verified.py), and erasure at a visitor's request.

Model and visitor text is only ever rendered through escaping templates
(`linebreaksbr`), never `mark_safe`.
"""

from urllib.parse import urlsplit

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import Count, F, OuterRef, Prefetch, Subquery, Sum
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import Truncator
from django.utils.timezone import localtime
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from base.admin import ModelAdmin
from billing.models import LedgerEntry
from billing.templatetags.billing_admin import grouped, money
from chat.admin.actions import calls_in_transcript
from chat.admin.queries import ConversationRatingFilter, ConversationTurnStatusFilter, TurnModelFilter, per_row
from chat.models import Conversation, Feedback, Generation, Handoff, ToolCall, Turn
from chat.support import erasure
from chat.support.admin import VerifiedFilter, verified_person
from chat.templatetags.icons import thumb

RESULT_EXCERPT_CHARS = 300
ERASED_MESSAGE = "Erased the visitors' text at their request."


def _can_see_prices(request) -> bool:
    return request.user.has_perm("billing.view_ledgerentry")


@admin.register(Conversation)
class ConversationAdmin(ModelAdmin):
    # The first question is the link; the counts share a column: all of it
    # fits a 1,400 px screen beside the sidebar and the filters.
    list_display = [
        "first_question",
        "came_from",
        "last_activity",
        "ratings",
        "turn_count",
        "tokens",
        "flags",
    ]
    list_display_links = ["first_question"]
    list_filter = [
        "created_at",
        "preview",
        VerifiedFilter,
        ConversationTurnStatusFilter,
        ConversationRatingFilter,
        TurnModelFilter,
    ]
    # A verified visitor by their id on the customer's site (exactly) or their email.
    search_fields = ["turns__user_text", "turns__assistant_text", "=public_id", "=verified_id", "verified_email"]
    search_help_text = _(
        "Searches what visitors and the assistant wrote, and verified visitors' ids and email addresses."
    )
    date_hierarchy = "created_at"
    fields = ["public_id", "created_at", "updated_at", "verified_person", "came_from", "handoffs", "transcript"]
    readonly_fields = fields
    actions = ["erase_visitors_text"]

    class Media:
        css = {"all": ["chat/admin.css"]}

    def get_list_display(self, request):
        columns = super().get_list_display(request)
        # The cost only for those who may see prices (a superuser; Finance
        # reads no conversations): beside the tokens, in the same width.
        return [("tokens_and_cost" if c == "tokens" else c) for c in columns] if _can_see_prices(request) else columns

    def get_queryset(self, request):
        def turns_that_are(status):
            return per_row(Turn, "conversation", Count("id"), status=status)

        queryset = (
            super()
            .get_queryset(request)
            .annotate(
                turn_count=per_row(Turn, "conversation", Count("id")),
                interrupted_count=turns_that_are(Turn.Status.INTERRUPTED),
                truncated_count=turns_that_are(Turn.Status.TRUNCATED),
                failed_count=turns_that_are(Turn.Status.FAILED),
                generation_total=per_row(Generation, "turn__conversation", Count("id")),
                token_total=per_row(LedgerEntry, "turn__conversation", Sum(F("input_tokens") + F("output_tokens"))),
                first_text=Subquery(
                    Turn.objects.filter(conversation=OuterRef("pk"))
                    .order_by("started_at", "id")
                    .values("user_text")[:1]
                ),
                thumbs_down=per_row(Feedback, "turn__conversation", Count("id"), rating=Feedback.Rating.DOWN),
                thumbs_up=per_row(Feedback, "turn__conversation", Count("id"), rating=Feedback.Rating.UP),
                handoff_count=per_row(Handoff, "conversation", Count("id")),
                waiting_count=per_row(Handoff, "conversation", Count("id"), status__in=Handoff.PENDING),
            )
        )
        if not _can_see_prices(request):
            return queryset  # nothing to sort by, or to show, by mistake
        costs = (
            LedgerEntry.objects.filter(turn__conversation=OuterRef("pk"))
            .order_by()
            .values("turn__conversation")
            .annotate(total=Sum("cost"))
            .values("total")
        )
        unpriced = per_row(LedgerEntry, "turn__conversation", Count("id"), cost__isnull=True)
        return queryset.annotate(cost_total=Subquery(costs), unpriced_count=unpriced)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # transcripts are records

    def has_erase_permission(self, request) -> bool:
        return request.user.has_perm("chat.erase_turn")

    @admin.action(permissions=["erase"], description=_("Erase the visitors' text"))
    def erase_visitors_text(self, request, queryset):
        """The visitor's right to erasure, after a confirmation page: what they
        and the model wrote, tool calls' arguments and results, addresses,
        and their key's link to the conversation (erasure.erase_conversations).
        The turns' numbers and the ledger stay.

        Needs the chat.erase_turn permission. Superusers have it; no role
        (chat/roles.py) grants it: give it to a person, deliberately.
        """
        if not self.has_erase_permission(request):
            raise PermissionDenied  # the action form refuses it already
        if request.POST.get("post") != "yes":
            return self._confirm_erasure(request, queryset)
        ids = list(queryset.values_list("pk", flat=True))
        try:
            erased = erasure.erase_conversations(ids, by=f"{request.user.get_username()} (admin)")
        except erasure.ErasureRefused as refused:
            self.message_user(request, str(refused), messages.ERROR)
            return None
        for conversation in erased:
            self.log_change(request, conversation, ERASED_MESSAGE)
        count = len(erased)
        message = ngettext(
            "Erased the visitors' text in %(count)d conversation.",
            "Erased the visitors' text in %(count)d conversations.",
            count,
        )
        self.message_user(request, message % {"count": count}, messages.SUCCESS)
        return None

    def _confirm_erasure(self, request, queryset) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": gettext("Erase the visitors' text?"),
            "opts": self.opts,
            "conversations": queryset,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "media": self.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/chat/conversation/erase_confirmation.html", context)

    @admin.display(description=_("first question"))
    def first_question(self, obj) -> str:
        if obj.first_text is None:
            return "-"
        return Truncator(obj.first_text).chars(70) or gettext("(erased)")

    @admin.display(description=_("ratings"))
    def ratings(self, obj) -> str:
        marks = [
            # Translators: how many answers of a conversation were rated thumbs down: "2 down".
            (obj.thumbs_down, "down", ngettext("%(count)d down", "%(count)d down", obj.thumbs_down)),
            # Translators: how many answers of a conversation were rated thumbs up: "2 up".
            (obj.thumbs_up, "up", ngettext("%(count)d up", "%(count)d up", obj.thumbs_up)),
        ]
        shown = [
            format_html('<span class="kk-rating kk-rating--{}">{} {}</span>', r, thumb(r), label % {"count": n})
            for n, r, label in marks
            if n
        ]
        return format_html_join(" ", "{}", ((mark,) for mark in shown)) if shown else "-"

    @admin.display(ordering="created_at", description=_("started"))
    def started(self, obj) -> str:
        return date_format(localtime(obj.created_at), "SHORT_DATETIME_FORMAT")

    @admin.display(ordering="updated_at", description=_("last activity"))
    def last_activity(self, obj) -> str:
        return date_format(localtime(obj.updated_at), "SHORT_DATETIME_FORMAT")

    @admin.display(ordering="turn_count", description=_("turns / calls"))
    def turn_count(self, obj) -> str:
        # Generations beside turns: more than one a turn means tool rounds, or waste.
        return f"{obj.turn_count} / {obj.generation_total}"

    @admin.display(ordering="generation_total", description=_("generations"))
    def generation_count(self, obj) -> int:
        return obj.generation_total

    @admin.display(ordering="token_total", description=_("tokens"))
    def tokens(self, obj) -> str:
        return grouped(obj.token_total)

    @admin.display(ordering="token_total", description=_("tokens"))
    def tokens_and_cost(self, obj) -> str:
        return format_html("{}<br><small>USD {}</small>", grouped(obj.token_total), self.cost(obj))

    def cost(self, obj) -> str:
        # As finance's pages show it: to the cent, unpriced entries never as 0.
        if not obj.unpriced_count:
            return money(obj.cost_total or 0)
        count = obj.unpriced_count
        if obj.cost_total is None:
            return ngettext("%(count)d unpriced", "%(count)d unpriced", count) % {"count": count}
        message = ngettext("%(cost)s plus %(count)d unpriced", "%(cost)s plus %(count)d unpriced", count)
        return message % {"cost": money(obj.cost_total), "count": count}

    @admin.display(description=_("flags"))
    def flags(self, obj) -> str:
        counts = [
            # Translators: how many turns of a conversation were interrupted: "2 interrupted".
            (ngettext("%(count)d interrupted", "%(count)d interrupted", obj.interrupted_count), obj.interrupted_count),
            (ngettext("%(count)d truncated", "%(count)d truncated", obj.truncated_count), obj.truncated_count),
            (ngettext("%(count)d failed", "%(count)d failed", obj.failed_count), obj.failed_count),
        ]
        flags = [label % {"count": n} for label, n in counts if n]
        if obj.handoff_count:
            label = gettext("waiting for a person") if obj.waiting_count else gettext("asked for a person")
            flags.insert(0, format_html('<span class="kk-flag kk-flag--handoff">{}</span>', label))
        if obj.verified_id:
            # A verified visitor, among the flags: a column of its own did not fit 1,400 px.
            flags.insert(0, verified_person(obj))
        if obj.preview:
            # Staff trying a draft of the assistant (its Preview page): not a visitor.
            flags.insert(0, format_html('<span class="kk-flag">{}</span>', gettext("preview")))
        return format_html_join(", ", "{}", ((flag,) for flag in flags))

    @admin.display(description=_("visitor"))
    def verified_person(self, obj) -> str:
        """Who the customer's site says the visitor is, in full; read-only."""
        return verified_person(obj, full=True)

    @admin.display(description=_("came from"))
    def came_from(self, obj) -> str:
        """The chat page, or the page of a customer's site with the widget."""
        if not obj.source_url:
            return gettext("chat page")
        # The site, then its page: "acme.example" over "/pricing".
        parts = urlsplit(obj.source_url)
        host = parts.netloc.removeprefix("www.")
        return format_html(
            '<span title="{}">{}<br><small>{}</small></span>', obj.source_url, host, Truncator(parts.path).chars(32)
        )

    @admin.display(description=_("requests for a person"))
    def handoffs(self, obj) -> str:
        found = obj.handoffs.order_by("created_at")
        if not found:
            return gettext("none")
        return format_html_join(
            SafeString("<br>"),
            '<a href="{}">{} {}</a> ({}){}',
            (
                (
                    reverse("admin:chat_handoff_change", args=[h.pk]),
                    h.get_status_display(),
                    date_format(localtime(h.created_at), "SHORT_DATETIME_FORMAT"),
                    h.get_source_display(),
                    f": {h.reason}" if h.reason else "",
                )
                for h in found
            ),
        )

    @admin.display(description=_("transcript"))
    def transcript(self, obj) -> str:
        generations = Generation.objects.prefetch_related(
            Prefetch("tool_calls", queryset=ToolCall.objects.order_by("id"))
        )
        turns = (
            obj.turns.order_by("started_at", "id")
            .select_related("feedback")
            .prefetch_related(Prefetch("generations", queryset=generations.order_by("round")), calls_in_transcript())
        )
        return render_to_string("admin/chat/transcript.html", {"turns": turns, "excerpt_chars": RESULT_EXCERPT_CHARS})
