"""Logging set-up: text for people, JSON lines for log pipelines; tagged with service and env.

Records are rendered where they are logged and written by a background thread, so a slow log
sink — a full pipe, a busy disk — never stalls the event loop that acknowledges events. The
thread only writes finished lines, a batch per system call: it holds the GIL for microseconds,
so the event loop hardly ever waits to get it back.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import sys
import threading
from datetime import UTC, datetime
from typing import TextIO

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


class _LineWriter(logging.Handler):
    """Formats each record in the thread that logs it and queues the line for a writer thread."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self._stream = stream
        self._lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._write_lines, name="log-writer", daemon=True)
        self._thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._lines.put(self.format(record))
        except Exception:  # noqa: BLE001 - logging must never raise into the caller
            self.handleError(record)

    def _write_lines(self) -> None:
        while (line := self._lines.get()) is not None:
            batch = [line]
            while not self._lines.empty() and (line := self._lines.get_nowait()) is not None:
                batch.append(line)
            # A sink that fails (closed pipe) loses these lines; there is nowhere left to say so.
            with contextlib.suppress(OSError, ValueError):
                self._stream.write("\n".join(batch) + "\n")
                self._stream.flush()
            if line is None:
                return

    def close(self) -> None:
        """Write what is still queued, then stop the writer thread (logging calls this at exit)."""
        self._lines.put(None)
        self._thread.join(timeout=5)
        super().close()


def configure_logging(level: str, fmt: str, service: str, environment: str) -> None:
    handler = _LineWriter(sys.stderr)
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
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in _QUIET:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
