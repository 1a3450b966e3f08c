"""What Support works with: ratings, searches, requests for a person and
the messages of a conversation a person has."""

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from chat.models.conversations import Conversation, Turn


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
