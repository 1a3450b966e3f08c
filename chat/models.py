import uuid

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone


class HelpArticle(models.Model):
    title = models.CharField(max_length=200)
    slug = models.SlugField(max_length=200, unique=True)
    body = models.TextField(help_text="Markdown.")
    published = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["title"]

    def __str__(self) -> str:
        return self.title

    def get_absolute_url(self) -> str:
        return reverse("help-article", args=[self.slug])


class Conversation(models.Model):
    # The public id is what leaves the server; the integer pk never does.
    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    # Whose it is: a keyed hash of the visitor's session key or widget key
    # (chat/visitors.py), never the key, which would open the visitor's
    # session (and a staff member's admin). Blank once the visitor started
    # over or the conversation was erased: nobody can reach it any more.
    visitor_hash = models.CharField(max_length=64, db_index=True, blank=True, editable=False)
    # Where the visitor asked from: the page of a customer's site that embeds
    # the widget (origin and path only: a query string can carry anything),
    # or blank for the chat page itself.
    source_url = models.CharField(max_length=500, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)

    class Meta:
        ordering = ["-updated_at"]

    def __str__(self) -> str:
        return f"Conversation {str(self.public_id)[:8]}"


class Turn(models.Model):
    class Status(models.TextChoices):
        STREAMING = "streaming"
        COMPLETED = "completed"
        INTERRUPTED = "interrupted"
        TRUNCATED = "truncated"
        FAILED = "failed"

    class StopReason(models.TextChoices):
        STOPPED = "stopped", "Stopped by the visitor"
        LEFT = "left", "Visitor left (every tab closed)"
        SHUTDOWN = "shutdown", "Server shut down"
        PROCESS_LOST = "process_lost", "Server process lost"

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="turns")
    status = models.CharField(max_length=12, choices=Status, default=Status.STREAMING)
    interrupted = models.BooleanField(default=False)
    # Why an interrupted turn stopped, and for a Stop, the tab that sent it.
    stop_reason = models.CharField(max_length=12, choices=StopReason, blank=True)
    stopped_by = models.CharField(max_length=32, blank=True, help_text="The tab (socket) that sent the Stop.")
    # While streaming: the channel of the server process that runs it, which
    # other processes' tabs ask for its frames and send their Stop to.
    owner = models.CharField(max_length=200, blank=True, editable=False)
    user_text = models.TextField()
    # Exactly what the visitor was sent, whatever the ending.
    assistant_text = models.TextField(blank=True)
    error = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=100)
    # Personal data: both are dropped after KOOKEE_ADDRESS_RETENTION_DAYS.
    client_address = models.GenericIPAddressField(null=True, blank=True)
    # The budgets' unit: an IPv4 address, or the /64 of an IPv6 one.
    client_network = models.CharField(max_length=43, blank=True)
    started_at = models.DateTimeField(auto_now_add=True, db_index=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    # While streaming: the last checkpoint, for closing turns a dead process left.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    checkpoint_round = models.PositiveSmallIntegerField(default=0)
    checkpoint_input_tokens = models.PositiveIntegerField(default=0)
    checkpoint_output_tokens = models.PositiveIntegerField(default=0)
    # Set when the texts were erased at the visitor's request; the numbers stay.
    erased_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["started_at", "id"]
        indexes = [
            models.Index(fields=["status", "heartbeat_at"]),
            models.Index(fields=["client_network", "started_at"]),
        ]
        constraints = [
            # One turn at a time per conversation, whichever process takes
            # the message: held by the database, not by a process's memory.
            models.UniqueConstraint(
                fields=["conversation"],
                condition=models.Q(status="streaming"),
                name="one_streaming_turn_per_conversation",
            )
        ]
        permissions = [("erase_turn", "Can erase a conversation's text at the visitor's request")]

    def __str__(self) -> str:
        return f"Turn {self.pk} ({self.status})"


class Generation(models.Model):
    """One model call."""

    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="generations")
    round = models.PositiveSmallIntegerField(help_text="1-based.")
    # Empty when the stream ended without one (stopped, cut, failed).
    finish_reason = models.CharField(max_length=32, blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    # Parts of the two above, when the provider reported them.
    cached_input_tokens = models.PositiveIntegerField(default=0)
    reasoning_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    usage_estimated = models.BooleanField(default=False)
    started_at = models.DateTimeField()
    first_delta_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField()

    class Meta:
        ordering = ["turn_id", "round"]
        constraints = [models.UniqueConstraint(fields=["turn", "round"], name="one_generation_per_round")]

    def __str__(self) -> str:
        return f"Turn {self.turn_id} round {self.round}"

    @property
    def time_to_first_delta_ms(self) -> int | None:
        if self.first_delta_at is None:
            return None
        return round((self.first_delta_at - self.started_at).total_seconds() * 1000)


class ToolCall(models.Model):
    generation = models.ForeignKey(Generation, on_delete=models.CASCADE, related_name="tool_calls")
    # Text: providers' ids can be long (LiteLLM packs signatures into them).
    call_id = models.TextField(blank=True)
    name = models.TextField()
    arguments = models.TextField(blank=True, help_text="As the model sent them.")
    result = models.TextField(blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["generation_id", "id"]

    def __str__(self) -> str:
        return self.name


class Feedback(models.Model):
    """A visitor's verdict on one of their finished answers. Rating again
    replaces it."""

    class Rating(models.TextChoices):
        UP = "up", "Thumbs up"
        DOWN = "down", "Thumbs down"

    turn = models.OneToOneField(Turn, on_delete=models.CASCADE, related_name="feedback")
    rating = models.CharField(max_length=4, choices=Rating)
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)

    class Meta:
        ordering = ["-updated_at", "-id"]
        verbose_name_plural = "feedback"
        indexes = [models.Index(fields=["rating", "updated_at"])]

    def __str__(self) -> str:
        return f"{self.get_rating_display()} on turn {self.turn_id}"


class Search(models.Model):
    """One help-center search the model made, for the unanswered-questions
    page: what was searched, how well the best article matched, which
    articles came back, and whether the answer then cited any of them."""

    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="searches")
    query = models.TextField()
    # The query's normalised terms (chat/search.py: lower case, stemmed, no
    # stopwords, sorted): searches for the same thing in other words group.
    terms = models.CharField(max_length=200, blank=True, db_index=True)
    # The best article's relevance (chat/search.py); None: nothing shared a term.
    top_score = models.FloatField(null=True, blank=True)
    # At least one article cleared the relevance floor.
    matched = models.BooleanField()
    article_ids = models.JSONField(default=list, blank=True)
    cited = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "searches"
        indexes = [models.Index(fields=["matched", "created_at"])]

    def __str__(self) -> str:
        return f"Search on turn {self.turn_id}"


class UnansweredQuestion(Search):
    """The unanswered-questions page's place in the admin (chat/reports.py):
    searches, thumbs down and handoffs, grouped. Viewing it is its permission."""

    class Meta:
        proxy = True
        verbose_name = "unanswered question"
        verbose_name_plural = "unanswered questions"


class SupportReport(Turn):
    """The support report's place in the admin (chat/reports.py): a page of
    figures per period, not a list. Viewing it is its permission."""

    class Meta:
        proxy = True
        verbose_name = "support report"
        verbose_name_plural = "support report"


class Handoff(models.Model):
    """A visitor's request to talk to a person: from the page's "Talk to a
    person", or from the model's request_human tool. Support claims it, then
    closes it. A conversation has at most one open (or claimed) request: a
    second one adds to it."""

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        CLAIMED = "claimed", "Claimed"
        CLOSED = "closed", "Closed"

    # Waiting for Support: a conversation has at most one such request.
    PENDING = (Status.OPEN, Status.CLAIMED)

    class Source(models.TextChoices):
        VISITOR = "visitor", "The visitor asked"
        ASSISTANT = "assistant", "The assistant offered"

    class Delivery(models.TextChoices):
        NONE = "", "Not configured"
        PENDING = "pending", "Pending"
        SENT = "sent", "Sent"
        FAILED = "failed", "Failed"

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="handoffs")
    # The turn during which it was asked for, if any.
    turn = models.ForeignKey(Turn, on_delete=models.SET_NULL, null=True, blank=True, related_name="handoffs")
    source = models.CharField(max_length=10, choices=Source)
    reason = models.TextField(blank=True)
    # Personal data, given by the visitor for the reply; erased with the conversation.
    email = models.EmailField(blank=True)
    # The rate limit's unit, as on Turn; dropped with the turns' addresses.
    client_network = models.CharField(max_length=43, blank=True, editable=False)
    status = models.CharField(max_length=8, choices=Status, default=Status.OPEN)
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    # Support's notifications (chat/handoffs.py): by email, and by webhook.
    email_status = models.CharField(max_length=8, choices=Delivery, blank=True, default=Delivery.NONE)
    webhook_status = models.CharField(max_length=8, choices=Delivery, blank=True, default=Delivery.NONE)
    webhook_attempts = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["-created_at", "-id"]
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
        return f"Handoff {self.pk} ({self.status})"


class RevokedKey(models.Model):
    """A visitor key (session or widget) that may no longer reach a
    conversation: its visitor started over, or staff erased their
    conversation. Kept as long as the key could otherwise still be used."""

    visitor_hash = models.CharField(max_length=64, unique=True)
    revoked_at = models.DateTimeField(auto_now_add=True, db_index=True)

    def __str__(self) -> str:
        return f"Revoked {self.visitor_hash[:8]}"
