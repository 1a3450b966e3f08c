"""Visitors' ratings of their answers."""

from __future__ import annotations

from chat.models import Feedback, Turn


class NotFound(Exception):
    """No such turn among the visitor's finished turns."""


def save_feedback(visitor: str, turn_id: int, rating: str, comment: str) -> None:
    """Stores the visitor's rating of one of their own finished turns,
    replacing an earlier one. Raises NotFound for a turn that is not theirs
    (another visitor's, erased, or none) or still running: the same answer
    for each, so that turn ids reveal nothing."""
    turn = (
        Turn.objects.filter(pk=turn_id, conversation__visitor_hash=visitor)
        .exclude(status=Turn.Status.STREAMING)
        .only("id")
        .first()
    )
    if turn is None or not visitor:
        raise NotFound
    # A new verdict is to be reviewed again, by whoever it is assigned to.
    Feedback.objects.update_or_create(
        turn=turn, defaults={"rating": rating, "comment": comment, "reviewed_at": None, "reviewed_by": None}
    )
