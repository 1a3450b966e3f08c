import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from chat import vocabulary


class Conversation(models.Model):
    # The public id is what leaves the server; the integer pk never does.
    public_id = models.UUIDField(_("public id"), default=uuid.uuid4, unique=True, editable=False)
    # Whose it is: a keyed hash of the visitor's session key or widget key
    # (chat/visitors/identity.py), never the key, which would open the visitor's
    # session (and a staff member's admin). Blank once the visitor started
    # over or the conversation was erased: nobody can reach it any more.
    visitor_hash = models.CharField(max_length=64, db_index=True, blank=True, editable=False)
    # Where the visitor asked from: the page of a customer's site that embeds
    # the widget (origin and path only: a query string can carry anything),
    # or blank for the chat page itself.
    source_url = models.CharField(max_length=500, blank=True, editable=False)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True, db_index=True)
    # Erased at the visitor's request (chat/support/erasure.py): its requests
    # for a person are closed, and nobody may write in it again.
    erased_at = models.DateTimeField(_("erased at"), null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-updated_at"]
        verbose_name = _("conversation")
        verbose_name_plural = _("conversations")

    def __str__(self) -> str:
        return gettext("Conversation %(id)s") % {"id": str(self.public_id)[:8]}


class Turn(models.Model):
    class Status(models.TextChoices):
        STREAMING = vocabulary.Status.STREAMING, _("streaming")
        COMPLETED = vocabulary.Status.COMPLETED, _("completed")
        INTERRUPTED = vocabulary.Status.INTERRUPTED, _("interrupted")
        TRUNCATED = vocabulary.Status.TRUNCATED, _("truncated")
        FAILED = vocabulary.Status.FAILED, _("failed")

    class StopReason(models.TextChoices):
        STOPPED = vocabulary.StopReason.STOPPED, _("Stopped by the visitor")
        LEFT = vocabulary.StopReason.LEFT, _("Visitor left (every tab closed)")
        SHUTDOWN = vocabulary.StopReason.SHUTDOWN, _("Server shut down")
        PROCESS_LOST = vocabulary.StopReason.PROCESS_LOST, _("Server process lost")

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="turns", verbose_name=_("conversation")
    )
    status = models.CharField(_("status"), max_length=12, choices=Status, default=Status.STREAMING)
    interrupted = models.BooleanField(_("interrupted"), default=False)
    # Why an interrupted turn stopped, and for a Stop, the tab that sent it.
    stop_reason = models.CharField(_("stop reason"), max_length=12, choices=StopReason, blank=True)
    stopped_by = models.CharField(
        _("stopped by"), max_length=32, blank=True, help_text=_("The tab (socket) that sent the Stop.")
    )
    # While streaming: the channel of the server process that runs it, which
    # other processes' tabs ask for its frames and send their Stop to.
    owner = models.CharField(max_length=200, blank=True, editable=False)
    user_text = models.TextField()
    # Exactly what the visitor was sent, whatever the ending.
    assistant_text = models.TextField(blank=True)
    error = models.CharField(_("error"), max_length=200, blank=True)
    model = models.CharField(_("model"), max_length=100)
    # Personal data: both are dropped after KOOKEE_ADDRESS_RETENTION_DAYS.
    client_address = models.GenericIPAddressField(null=True, blank=True)
    # The budgets' unit: an IPv4 address, or the /64 of an IPv6 one.
    client_network = models.CharField(max_length=43, blank=True)
    started_at = models.DateTimeField(_("started at"), auto_now_add=True, db_index=True)
    ended_at = models.DateTimeField(_("ended at"), null=True, blank=True)
    # While streaming: the last checkpoint, for closing turns a dead process left.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    checkpoint_round = models.PositiveSmallIntegerField(default=0)
    # What the running turn holds in the daily budgets (chat/visitors/limits.py):
    # {"day", "keys", "tokens"}; emptied when it settles at the turn's end.
    budget = models.JSONField(default=dict, blank=True, editable=False)
    checkpoint_input_tokens = models.PositiveIntegerField(default=0)
    checkpoint_output_tokens = models.PositiveIntegerField(default=0)
    # Set when the texts were erased at the visitor's request; the numbers stay.
    erased_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["started_at", "id"]
        verbose_name = _("turn")
        verbose_name_plural = _("turns")
        indexes = [
            models.Index(fields=["status", "heartbeat_at"]),
            models.Index(fields=["client_network", "started_at"]),
        ]
        constraints = [
            # One turn at a time per conversation, whichever process takes
            # the message: held by the database, not by a process's memory.
            models.UniqueConstraint(
                fields=["conversation"],
                condition=models.Q(status=vocabulary.Status.STREAMING),
                name="one_streaming_turn_per_conversation",
            )
        ]
        permissions = [("erase_turn", "Can erase a conversation's text at the visitor's request")]

    def __str__(self) -> str:
        # The status as staff read it, in their language: "Interação 13 (interrompida)".
        return gettext("Turn %(id)s (%(status)s)") % {"id": self.pk, "status": self.get_status_display().lower()}


# The providers' finish_reason values (OpenAI's, and those of compatible servers).
FINISH_REASONS = {
    "stop": _("finished"),
    "length": _("token limit"),
    "tool_calls": _("called tools"),
    "function_call": _("called a function"),
    "content_filter": _("content filter"),
}


class Generation(models.Model):
    """One model call."""

    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="generations", verbose_name=_("turn"))
    round = models.PositiveSmallIntegerField(_("round"), help_text=_("1-based."))
    # Empty when the stream ended without one (stopped, cut, failed).
    finish_reason = models.CharField(_("finish reason"), max_length=32, blank=True)
    input_tokens = models.PositiveIntegerField(_("input tokens"), default=0)
    # Parts of the two above, when the provider reported them.
    cached_input_tokens = models.PositiveIntegerField(_("cached input tokens"), default=0)
    reasoning_tokens = models.PositiveIntegerField(_("reasoning tokens"), default=0)
    output_tokens = models.PositiveIntegerField(_("output tokens"), default=0)
    usage_estimated = models.BooleanField(_("usage estimated"), default=False)
    started_at = models.DateTimeField(_("started at"))
    first_delta_at = models.DateTimeField(_("first delta at"), null=True, blank=True)
    ended_at = models.DateTimeField(_("ended at"))

    class Meta:
        ordering = ["turn_id", "round"]
        constraints = [models.UniqueConstraint(fields=["turn", "round"], name="one_generation_per_round")]
        verbose_name = _("generation")
        verbose_name_plural = _("generations")

    def __str__(self) -> str:
        return gettext("Turn %(turn)s round %(round)s") % {"turn": self.turn_id, "round": self.round}

    @property
    def finish_reason_label(self) -> str:
        """Why the call ended, as staff read it, with the provider's own word:
        "token limit (length)"; a word we do not know, as it came."""
        if not self.finish_reason:
            return gettext("– (cut short)")  # noqa: RUF001 (the dash the transcript shows)
        label = FINISH_REASONS.get(self.finish_reason)
        return f"{label} ({self.finish_reason})" if label else self.finish_reason

    @property
    def time_to_first_delta_ms(self) -> int | None:
        if self.first_delta_at is None:
            return None
        return round((self.first_delta_at - self.started_at).total_seconds() * 1000)


class ToolCall(models.Model):
    generation = models.ForeignKey(
        Generation, on_delete=models.CASCADE, related_name="tool_calls", verbose_name=_("generation")
    )
    # Text: providers' ids can be long (LiteLLM packs signatures into them).
    call_id = models.TextField(_("call id"), blank=True)
    name = models.TextField(_("name"))
    arguments = models.TextField(_("arguments"), blank=True, help_text=_("As the model sent them."))
    result = models.TextField(_("result"), blank=True)
    error = models.TextField(_("error"), blank=True)

    class Meta:
        ordering = ["generation_id", "id"]
        verbose_name = _("tool call")
        verbose_name_plural = _("tool calls")

    def __str__(self) -> str:
        return self.name


class Feedback(models.Model):
    """A visitor's verdict on one of their finished answers. Rating again
    replaces it."""

    class Rating(models.TextChoices):
        UP = "up", _("Thumbs up")
        DOWN = "down", _("Thumbs down")

    turn = models.OneToOneField(Turn, on_delete=models.CASCADE, related_name="feedback", verbose_name=_("turn"))
    rating = models.CharField(_("rating"), max_length=4, choices=Rating)
    comment = models.TextField(_("comment"), blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True, db_index=True)
    # Support's review queue (chat/support/admin.py): who looks at it, and
    # when someone did. A new rating from the visitor opens it again.
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("assigned to"),
    )
    reviewed_at = models.DateTimeField(_("reviewed at"), null=True, blank=True)
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("reviewed by"),
    )

    class Meta:
        ordering = ["-updated_at", "-id"]
        verbose_name = _("feedback")
        verbose_name_plural = _("feedback")
        indexes = [models.Index(fields=["rating", "updated_at"])]

    def __str__(self) -> str:
        return gettext("%(rating)s on turn %(turn)s") % {"rating": self.get_rating_display(), "turn": self.turn_id}


class Search(models.Model):
    """One help-center search the model made, for the unanswered-questions
    page: what was searched, how well the best article matched, which
    articles came back, and whether the answer then cited any of them."""

    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="searches", verbose_name=_("turn"))
    query = models.TextField(_("query"))
    # The query's normalised terms (helpcenter/ranking.py: lower case, stemmed, no
    # stopwords, sorted): searches for the same thing in other words group.
    terms = models.CharField(_("terms"), max_length=200, blank=True, db_index=True)
    # The best article's relevance (helpcenter/ranking.py); None: nothing shared a term.
    top_score = models.FloatField(_("top score"), null=True, blank=True)
    # At least one article cleared the relevance floor.
    matched = models.BooleanField(_("matched"))
    article_ids = models.JSONField(_("article ids"), default=list, blank=True)
    cited = models.BooleanField(_("cited"), default=False)
    created_at = models.DateTimeField(_("created at"), default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = _("search")
        verbose_name_plural = _("searches")
        indexes = [models.Index(fields=["matched", "created_at"])]

    def __str__(self) -> str:
        return gettext("Search on turn %(turn)s") % {"turn": self.turn_id}


class UnansweredQuestion(Search):
    """The unanswered-questions page's place in the admin (chat/support/reports.py):
    searches, thumbs down and handoffs, grouped. Viewing it is its permission."""

    class Meta:
        proxy = True
        verbose_name = _("unanswered question")
        verbose_name_plural = _("unanswered questions")


class SupportReport(Turn):
    """The support report's place in the admin (chat/support/reports.py): a page of
    figures per period, not a list. Viewing it is its permission."""

    class Meta:
        proxy = True
        verbose_name = _("support report")
        verbose_name_plural = _("support report")


class Handoff(models.Model):
    """A visitor's request to talk to a person: from the page's "Talk to a
    person", or from the model's request_human tool. Support claims it, then
    closes it. A conversation has at most one open (or claimed) request: a
    second one adds to it."""

    class Status(models.TextChoices):
        OPEN = "open", _("Open")
        CLAIMED = "claimed", _("Claimed")
        CLOSED = "closed", _("Closed")

    # Waiting for Support: a conversation has at most one such request.
    PENDING = (Status.OPEN, Status.CLAIMED)

    class Source(models.TextChoices):
        VISITOR = "visitor", _("The visitor asked")
        ASSISTANT = "assistant", _("The assistant offered")
        SUPPORT = "support", _("Support wrote first")

    class Delivery(models.TextChoices):
        NONE = "", _("Not configured")
        PENDING = "pending", _("Pending")
        SENT = "sent", _("Sent")
        FAILED = "failed", _("Failed")

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="handoffs", verbose_name=_("conversation")
    )
    # The turn during which it was asked for, if any.
    turn = models.ForeignKey(
        Turn, on_delete=models.SET_NULL, null=True, blank=True, related_name="handoffs", verbose_name=_("turn")
    )
    source = models.CharField(_("source"), max_length=10, choices=Source)
    reason = models.TextField(_("reason"), blank=True)
    # Personal data, given by the visitor for the reply; erased with the conversation.
    email = models.EmailField(_("email"), blank=True)
    # The rate limit's unit, as on Turn; dropped with the turns' addresses.
    client_network = models.CharField(max_length=43, blank=True, editable=False)
    status = models.CharField(_("status"), max_length=8, choices=Status, default=Status.OPEN)
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("claimed by"),
    )
    created_at = models.DateTimeField(_("created at"), default=timezone.now, db_index=True)
    claimed_at = models.DateTimeField(_("claimed at"), null=True, blank=True)
    # Who answers, as the visitor sees it: the claiming agent's name, or a
    # helpdesk reply's author (chat/support/replies.py).
    agent_name = models.CharField(_("answered by"), max_length=150, blank=True)
    closed_at = models.DateTimeField(_("closed at"), null=True, blank=True)
    # Support's notifications (chat/support/handoffs.py): by email, and by webhook.
    email_status = models.CharField(
        _("email status"), max_length=8, choices=Delivery, blank=True, default=Delivery.NONE
    )
    webhook_status = models.CharField(
        _("webhook status"), max_length=8, choices=Delivery, blank=True, default=Delivery.NONE
    )
    webhook_attempts = models.PositiveSmallIntegerField(_("webhook attempts"), default=0)
    # When a process last took on telling Support (chat/support/handoffs.py): one that
    # died or was stopped meanwhile leaves it pending, and the sweeper resends.
    notice_claimed_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = _("request for a person")
        verbose_name_plural = _("requests for a person")
        indexes = [
            models.Index(fields=["status", "created_at"]),
            models.Index(fields=["client_network", "created_at"]),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation"],
                condition=models.Q(status__in=["open", "claimed"]),
                name="one_pending_handoff_per_conversation",
            )
        ]

    def __str__(self) -> str:
        return gettext("Handoff %(id)s (%(status)s)") % {"id": self.pk, "status": self.get_status_display().lower()}


class Message(models.Model):
    """A message in a conversation outside the assistant's turns, while a
    person from Support has it (chat/support/replies.py): a reply of
    Support's (typed in the admin, or sent by a helpdesk), what the visitor
    wrote meanwhile, or an internal note on the request, which only Support
    reads. No model wrote any of it: nothing here is billed."""

    class Kind(models.TextChoices):
        AGENT = "agent", _("Reply from Support")
        VISITOR = "visitor", _("From the visitor")
        NOTE = "note", _("Internal note")

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages", verbose_name=_("conversation")
    )
    handoff = models.ForeignKey(
        Handoff, on_delete=models.CASCADE, related_name="messages", verbose_name=_("request for a person")
    )
    kind = models.CharField(_("kind"), max_length=8, choices=Kind)
    text = models.TextField(_("text"))
    # The name the visitor sees on a reply (the agent's, or the helpdesk's author).
    author = models.CharField(_("author"), max_length=150, blank=True)
    author_user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("written by"),
    )
    # A helpdesk's own id for its reply, unique across all requests: the
    # same one twice, to any request, is one message (a retry, or a replay).
    external_id = models.CharField(_("helpdesk message id"), max_length=200, blank=True)
    created_at = models.DateTimeField(_("sent at"), default=timezone.now, db_index=True)
    # A reply: when a tab of the visitor first showed it (live, or in its
    # history), and when it went by email instead.
    seen_at = models.DateTimeField(_("seen at"), null=True, blank=True)
    emailed_at = models.DateTimeField(_("emailed at"), null=True, blank=True)
    # The visitor's messages go to a helpdesk too, when the webhook is on.
    webhook_status = models.CharField(_("webhook status"), max_length=8, blank=True, default="")
    erased_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        verbose_name = _("message")
        verbose_name_plural = _("messages")
        indexes = [models.Index(fields=["conversation", "created_at"])]
        constraints = [
            models.UniqueConstraint(
                fields=["external_id"],
                condition=~models.Q(external_id=""),
                name="one_message_per_helpdesk_id_anywhere",
            )
        ]

    def __str__(self) -> str:
        return gettext("Message %(id)s") % {"id": self.pk}


class RevokedKey(models.Model):
    """A visitor key (session or widget) that may no longer reach a
    conversation: its visitor started over, or staff erased their
    conversation. Kept as long as the key could otherwise still be used."""

    visitor_hash = models.CharField(max_length=64, unique=True)
    revoked_at = models.DateTimeField(auto_now_add=True, db_index=True)

    def __str__(self) -> str:
        return f"Revoked {self.visitor_hash[:8]}"


class DayBudget(models.Model):
    """Tokens counted against one daily budget (the site's, or a network's:
    chat/visitors/limits.py): what turns of the day spent, plus what running turns
    hold reserved for their worst case. A turn reserves before it starts and
    before each later round, and settles to what it spent when it ends, so
    turns running at once cannot pass the budget together. Rows older than
    yesterday are dropped by `purge_expired` (keys name networks)."""

    day = models.DateField()
    key = models.CharField(max_length=64)
    tokens = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["day", "key"], name="chat_daybudget_unique_day_key")]

    def __str__(self) -> str:
        return f"{self.day} {self.key}: {self.tokens}"
