"""Logging filters: one line per event, and no visitor's words in the log."""

import logging


class NoClientErrorTraceback(logging.Filter):
    """A 4xx (a refused admin page, a missing article) is the client's doing,
    not a fault of ours: log its one line, without the traceback Django adds."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if status is not None and status < 500:
            record.exc_info = None
            record.exc_text = None
        return True
