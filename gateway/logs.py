"""Logging set-up: text for people, JSON lines for log pipelines; tagged with service and env.

Records are rendered where they are logged and written by a background thread, so a slow log
sink — a full pipe, a busy disk — never stalls the event loop that acknowledges events. The
thread only writes finished lines, a batch per system call: it holds the GIL for microseconds.
After each write it waits `GATHER_S` before taking the next lines: woken for every line, at
a few hundred events a second it took the GIL from the event loop, and gave it back, several
times per event (a measured 0.07 ms of CPU per acknowledgement). A line reaches the sink at
most `GATHER_S` after it was logged; the first after a quiet spell at once.

One record is one line: the text format escapes line breaks and other control characters in
the message (and in an exception's message), and JSON encodes them, so text from a request — a
chat message, a header — can never start a line that looks like a record of its own.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import re
import sys
import threading
import time
import traceback
from collections.abc import Iterable
from datetime import UTC, datetime
from types import TracebackType
from typing import TextIO

# Request logs of these libraries can carry URLs with tokens, or whole request bodies, below
# WARNING: keep them at WARNING. Their levels are set here, and a filter on our handler enforces
# the same for libraries that reset their loggers' levels later (some platform SDKs do when
# their app is built). Each platform plugin adds its own SDKs' loggers (`quiet_loggers`).
_QUIET = ("httpx", "httpx2", "httpcore", "httpcore2", "anthropic", "aiosqlite", "alembic", "apscheduler")

# How long the writer thread lets lines gather after a write (see the module docstring).
GATHER_S = 0.05

# C0 and C1 control characters except tab, and the Unicode line and paragraph separators.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r"}
_JSON_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def one_line(text: str) -> str:
    """``text`` with line breaks and control characters escaped (``\\n``, ``\\x1b``, ``\\u2028``)."""
    return _CONTROL.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


class TextFormatter(logging.Formatter):
    """The text format: one line per record, plus the traceback's lines for an exception.

    The message (after %-formatting with its arguments) is escaped with :func:`one_line`. A
    traceback keeps its layout (frames are indented source lines), but each exception's own
    message in it, which may quote input, is escaped too.
    """

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = one_line(record.message)
        return super().formatMessage(record)

    def formatException(
        self,
        ei: tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None],
    ) -> str:
        if ei[1] is None:
            return super().formatException(ei)
        exc = traceback.TracebackException(type(ei[1]), ei[1], ei[2])
        messages: set[str] = set()
        pending = [exc]
        while pending:
            current = pending.pop()
            messages.update(current.format_exception_only())
            pending += [e for e in (current.__cause__, current.__context__) if e is not None]
            pending += getattr(current, "exceptions", None) or []
        chunks = (
            one_line(chunk.rstrip("\n")) + "\n" if chunk in messages else chunk
            for chunk in exc.format()
        )
        return "".join(chunks).rstrip("\n")


class QuietLibraries(logging.Filter):
    """Drops records below WARNING from the given libraries' loggers (top-level names),
    whatever their loggers' levels have been reset to."""

    def __init__(self, names: frozenset[str]) -> None:
        super().__init__()
        self._names = names

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or record.name.split(".", 1)[0] not in self._names


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
        if record.exc_text:
            entry["exception"] = record.exc_text
        elif record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        # json.dumps escapes C0 controls but, without ensure_ascii, leaves NEL and the Unicode
        # line separators raw, which many readers (Python's splitlines, JavaScript) break on.
        return json.dumps(entry, ensure_ascii=False).translate(_JSON_LINE_BREAKS)


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
        except Exception:  # logging must never raise into the caller
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
            time.sleep(GATHER_S)  # lines logged meanwhile queue without waking this thread

    def close(self) -> None:
        """Write what is still queued, then stop the writer thread (logging calls this at exit)."""
        self._lines.put(None)
        self._thread.join(timeout=5)
        super().close()


def configure_logging(
    level: str, fmt: str, service: str, environment: str, quiet: Iterable[str] = ()
) -> None:
    """Log to stderr in `fmt`; `quiet` names more libraries' loggers to keep at WARNING."""
    quiet_names = frozenset((*_QUIET, *quiet))
    handler = _LineWriter(sys.stderr)
    handler.addFilter(QuietLibraries(quiet_names))
    if fmt == "json":
        handler.setFormatter(JsonFormatter(service, environment))
    else:
        handler.setFormatter(
            TextFormatter(f"%(asctime)s %(levelname)s [{service}/{environment}] %(name)s: %(message)s")
        )
    # Neither format shows the calling thread, process or source line: don't collect them for
    # every record (the logging HOWTO's "Optimization" section).
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging._srcfile = None
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in quiet_names:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
