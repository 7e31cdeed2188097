"""Logging set-up: text for people, JSON lines for log pipelines; tagged with service and env.

Records are written by a background thread (the standard library's QueueListener), so a slow
log sink — a full pipe, a busy disk — never stalls the event loop that acknowledges events.
"""

from __future__ import annotations

import atexit
import copy
import json
import logging
import queue
import sys
from datetime import UTC, datetime
from logging.handlers import QueueHandler, QueueListener

# Request logs of these libraries can carry URLs with tokens at DEBUG: keep them at WARNING.
_QUIET = (
    "httpx", "httpx2", "httpcore", "httpcore2", "slack_bolt", "slack_sdk", "anthropic", "aiosqlite",
    "alembic", "apscheduler", "Lark",
)


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str, environment: str) -> None:
        super().__init__()
        self._tags = {"service": service, "environment": environment}

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **self._tags,
        }
        if record.exc_text or record.exc_info:
            entry["exception"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class _Enqueue(QueueHandler):
    """Hands records to the writer thread with their message and traceback already rendered
    (arguments may change and frames go away once the caller moves on); formatting stays
    with the writer's formatter."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        record = copy.copy(record)
        record.msg, record.args = record.getMessage(), None
        if record.exc_info:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        return record


def configure_logging(level: str, fmt: str, service: str, environment: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(service, environment))
    else:
        handler.setFormatter(
            logging.Formatter(f"%(asctime)s %(levelname)s [{service}/{environment}] %(name)s: %(message)s")
        )
    # Neither format shows the calling thread, process or source line: don't collect them for
    # every record (the logging HOWTO's "Optimization" section).
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging._srcfile = None
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    writer = QueueListener(records, handler)
    writer.start()
    atexit.register(writer.stop)  # writes what is still queued
    root = logging.getLogger()
    root.handlers[:] = [_Enqueue(records)]
    root.setLevel(level)
    for name in _QUIET:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
