"""Column names of a source's tables, for the derived tables that leave hidden columns out.

The database itself answers, with a zero-row ``SELECT * FROM <reference> LIMIT 0`` over the
exact reference the query used, so the name resolves as it will when the query runs (search
path, default database, quoting). Answers are kept for a few minutes: a column added since
stays out of the answers until then, which errs on the closed side.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from agent_core.data.source_config import DataSourceConfig

CACHE_SECONDS = 300.0


class SourceColumns:
    """Cached column lookups, one instance per tool (shared across its conversations)."""

    def __init__(
        self, ttl_s: float = CACHE_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._known: dict[tuple[str, str, str], tuple[float, list[str]]] = {}

    def lookup(self, cfg: DataSourceConfig) -> Callable[[str], list[str]]:
        """The column lookup for queries on ``cfg`` (runs in the caller's thread)."""

        def columns(table_sql: str) -> list[str]:
            key = (cfg.name, cfg.url, table_sql)
            now = self._clock()
            with self._lock:
                cached = self._known.get(key)
            if cached is not None and now - cached[0] < self._ttl_s:
                return cached[1]
            from agent_core.data.sources import query_source  # database drivers load on use

            names = query_source(cfg, f"SELECT * FROM {table_sql} LIMIT 0", row_cap=1).columns
            with self._lock:
                self._known[key] = (now, names)
            return names

        return columns
