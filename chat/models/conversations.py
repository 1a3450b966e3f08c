"""A visitor's conversations and what the assistant did in them: turns, their
rounds (generations) and tool calls."""

import uuid

from django.db import models
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
    # Staff chatting with a draft of the assistant (its Preview page): left out
    # of the reports and the unanswered questions, billed as preview.
    preview = models.BooleanField(_("preview"), default=False, editable=False)
    # The verified person it belongs to, if any: what the customer's backend
    # vouched for in a signed token (chat/visitors/verified.py), never the
    # token. One person per conversation: a tab that proves another starts
    # afresh. Blank when anonymous, and once erased.
    verified_id = models.CharField(_("verified id"), max_length=200, blank=True, db_index=True, editable=False)
    verified_name = models.CharField(_("verified name"), max_length=200, blank=True, editable=False)
    verified_email = models.CharField(_("verified email"), max_length=200, blank=True, editable=False)
    verified_attributes = models.JSONField(_("verified attributes"), default=dict, blank=True, editable=False)

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
