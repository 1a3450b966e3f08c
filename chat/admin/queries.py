"""What the chat changelists count and filter by: per-row aggregates as
correlated subqueries (annotated in `get_queryset`, so that a changelist
costs the same few queries whatever its page size), and the list filters."""

from django.contrib import admin
from django.db.models import F, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from chat.models import Turn


def per_row(model, path: str, expression, **filters) -> Coalesce:
    """A per-row aggregate as a correlated subquery. Joining turns,
    generations and ledger entries and grouping would multiply the rows
    being summed, and would aggregate the whole table before the page is cut;
    a subquery runs only for the rows shown (or sorted on)."""
    rows = (
        model.objects.filter(**{path: OuterRef("pk")}, **filters)
        .order_by()
        .values(path)
        .annotate(total=expression)
        .values("total")
    )
    return Coalesce(Subquery(rows), Value(0))


class ConversationTurnStatusFilter(admin.SimpleListFilter):
    """Conversations with a turn of a status (or with completed turns only)."""

    title = _("has a turn that is")
    parameter_name = "turn_status"

    def lookups(self, request, model_admin):
        return [(s, s.label) for s in (Turn.Status.INTERRUPTED, Turn.Status.TRUNCATED, Turn.Status.FAILED)] + [
            (Turn.Status.COMPLETED, gettext("completed only"))
        ]

    def queryset(self, request, queryset):
        if self.value() == Turn.Status.COMPLETED:
            return queryset.exclude(turns__status__in=set(Turn.Status) - {Turn.Status.COMPLETED})
        if self.value():
            return queryset.filter(turns__status=self.value()).distinct()
        return queryset


class RatingFilter(admin.SimpleListFilter):
    """Turns (or conversations with a turn) that visitors rated."""

    title = _("visitor's rating")
    parameter_name = "rating"
    path = "feedback__rating"

    def lookups(self, request, model_admin):
        return [("down", gettext("thumbs down")), ("up", gettext("thumbs up")), ("none", gettext("not rated"))]

    def queryset(self, request, queryset):
        if self.value() in ("up", "down"):
            return queryset.filter(**{self.path: self.value()}).distinct()
        if self.value() == "none":
            return queryset.exclude(**{f"{self.path}__isnull": False})
        return queryset


class ConversationRatingFilter(RatingFilter):
    title = _("has an answer rated")
    path = "turns__feedback__rating"

    def lookups(self, request, model_admin):
        return [("down", gettext("thumbs down")), ("up", gettext("thumbs up")), ("none", gettext("none rated"))]


class TurnModelFilter(admin.SimpleListFilter):
    """Conversations with a turn answered by a model."""

    title = _("model")
    parameter_name = "model"

    def lookups(self, request, model_admin):
        models = Turn.objects.order_by("model").values_list("model", flat=True).distinct()
        return [(m, m) for m in models]

    def queryset(self, request, queryset):
        return queryset.filter(turns__model=self.value()).distinct() if self.value() else queryset


class WastedGenerationsFilter(admin.SimpleListFilter):
    """Turns with more model calls than tool rounds + 1: the symptom of
    probing without streaming, then generating the answer again."""

    title = _("extra model calls")
    parameter_name = "wasted"

    def lookups(self, request, model_admin):
        return [("yes", gettext("the model was called more often than its searches needed"))]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(generation_count__gt=F("tool_rounds") + 1)
        return queryset
