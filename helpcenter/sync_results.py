"""What a source's last sync did, in words ("0 added, 1 updated, 2
unchanged, 0 unpublished"), and the message a superuser gets when a sync
they started in the admin ends: the list's action and the source's button
start it in a child process (helpcenter/importers/sync.py), and both pages
refresh themselves while it runs, so the first page they see after it ended
says how it went, once."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest
from django.utils.translation import gettext, ngettext

from helpcenter.models import Source

# The sources whose syncs this session started and has not yet been told the end of.
SESSION_KEY = "helpcenter_syncs_started"


def result_text(found: dict) -> str | None:
    """The counts of a sync's result, each in its plural form; None before any sync."""
    if not found:
        return None
    count = {key: int(found.get(key) or 0) for key in ("added", "updated", "unchanged", "unpublished", "skipped")}
    parts = [
        ngettext("%(count)s added", "%(count)s added", count["added"]) % {"count": count["added"]},
        ngettext("%(count)s updated", "%(count)s updated", count["updated"]) % {"count": count["updated"]},
        ngettext("%(count)s unchanged", "%(count)s unchanged", count["unchanged"]) % {"count": count["unchanged"]},
        ngettext("%(count)s unpublished", "%(count)s unpublished", count["unpublished"])
        % {"count": count["unpublished"]},
    ]
    if count["skipped"]:  # read, but no article: a website's index pages
        parts.append(ngettext("%(count)s skipped", "%(count)s skipped", count["skipped"]) % {"count": count["skipped"]})
    return ", ".join(parts)


def started(request: HttpRequest, source: Source) -> None:
    """Remembers, for this session, a sync it started: its end is told on a later page."""
    ids = request.session.get(SESSION_KEY, [])
    if source.pk not in ids:
        request.session[SESSION_KEY] = [*ids, source.pk]


def tell_ended(request: HttpRequest) -> None:
    """A message for each sync this session started that has ended since: its result, or why it failed."""
    ids = request.session.get(SESSION_KEY, [])
    if not ids:
        return
    ended = list(Source.objects.filter(pk__in=ids, running_since__isnull=True).order_by("name"))
    for source in ended:
        if source.last_error:
            failed = gettext("%(name)s: the sync failed: %(error)s") % {"name": source.name, "error": source.last_error}
            messages.error(request, failed)
        else:
            done = {"name": source.name, "result": result_text(source.last_result) or "\N{EN DASH}"}
            messages.success(request, gettext("%(name)s synced: %(result)s.") % done)
    if ended:  # told once; a source deleted meanwhile is forgotten too
        running = Source.objects.filter(pk__in=ids, running_since__isnull=False)
        request.session[SESSION_KEY] = list(running.values_list("pk", flat=True))
