"""The admin for support staff: transcripts that read like the chat did,
with erasure at a visitor's request (chat/admin/conversations.py); turns,
model calls and tool calls, with generation counts at a glance
(chat/admin/turns.py); Support's own pages (chat/support/admin.py, and the
queue of requests for a person, chat/support/handoff_admin.py). The help
center's articles and sources are helpcenter/admin.py's, the ledger
billing/admin.py's.

Counts and sums are annotated in `get_queryset` (chat/admin/queries.py), so
a changelist costs the same few queries whatever its page size. Model and
visitor text is only ever rendered through escaping templates
(`linebreaksbr`), never `mark_safe`.
"""

# Each part's admin, imported here so that it registers on purpose, and
# Support's first: chat's pages link to Support's.
from chat.support import admin as support_admin  # noqa: F401  (registers Support's pages)
from chat.support import handoff_admin  # noqa: F401  (registers the queue)

from chat.admin import conversations, turns  # noqa: F401  (register transcripts, turns and calls) isort: skip
from chat.admin import actions  # noqa: F401  (registers actions, their credentials and calls) isort: skip
from chat.admin import assistant  # noqa: F401  (registers the Assistant page, Support's) isort: skip
