"""Logging set-up: text for people, JSON lines for log pipelines; tagged with service and env."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

# Request logs of these libraries can carry URLs with tokens at DEBUG: keep them at WARNING.
_QUIET = ("httpx", "httpcore", "slack_bolt", "slack_sdk", "anthropic", "aiosqlite", "alembic", "apscheduler", "Lark")


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
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str, fmt: str, service: str, environment: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(service, environment))
    else:
        handler.setFormatter(
            logging.Formatter(f"%(asctime)s %(levelname)s [{service}/{environment}] %(name)s: %(message)s")
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in _QUIET:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
