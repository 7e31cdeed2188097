"""Row counts and low-cardinality values for tables the engine has no statistics about.

Engines keep row estimates and most-common values for analyzed tables; for the rest, small
tables are counted and their text columns' distinct values read with one query per table. The
SQL is ours, built from catalog names quoted as identifiers; it runs on the source's read-only
connection with the source's statement timeout, and the whole pass stops at a time budget so a
refresh of a huge warehouse still finishes.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_SAMPLE_VALUES = 20  # more distinct values than this: not a low-cardinality column
MAX_SAMPLE_CHARS = 60  # longer values are free text, not categories
EXACT_COUNT_MAX_BYTES = 64 * 1024**2  # count tables up to this size; estimate larger ones
SAMPLE_MAX_ROWS = 200_000  # read distinct values of tables up to this many rows
MAX_SAMPLED_COLUMNS = 24  # per table
PROFILE_BUDGET_S = 60.0  # per source and refresh

TEXT_TYPE = re.compile(r"char|text|string|enum|citext|\bset\b", re.IGNORECASE)

Fetch = Callable[[str], list[tuple[Any, ...]]]


@dataclass
class Profiler:
    """Counts and samples tables through ``fetch`` (runs one statement, returns its rows)
    until the time budget is spent; failures (timeouts, permissions) leave a table unprofiled."""

    fetch: Fetch
    quote: Callable[[str], str]
    budget_s: float = PROFILE_BUDGET_S
    cast_text: str = "TEXT"
    started: float = field(default_factory=time.monotonic)

    @property
    def exhausted(self) -> bool:
        return time.monotonic() - self.started > self.budget_s

    def relation(self, schema: str | None, name: str) -> str:
        return f"{self.quote(schema)}.{self.quote(name)}" if schema else self.quote(name)

    def count(self, schema: str | None, name: str) -> int | None:
        if self.exhausted:
            return None
        rows = self._try(f"SELECT count(*) FROM {self.relation(schema, name)}")
        return int(rows[0][0]) if rows else None

    def distinct_values(self, schema: str | None, name: str, columns: Sequence[str]) -> dict[str, list[str]]:
        """Column → its distinct values, for the columns with at most MAX_SAMPLE_VALUES."""
        columns = list(columns)[:MAX_SAMPLED_COLUMNS]
        if not columns or self.exhausted:
            return {}
        relation = self.relation(schema, name)
        # One statement per table: each column's first MAX_SAMPLE_VALUES + 1 distinct values.
        parts = [
            f"SELECT {i} AS col_no, CAST(v AS {self.cast_text}) AS val FROM "
            f"(SELECT DISTINCT {self.quote(column)} AS v FROM {relation} "
            f"WHERE {self.quote(column)} IS NOT NULL LIMIT {MAX_SAMPLE_VALUES + 1}) AS d{i}"
            for i, column in enumerate(columns)
        ]
        rows = self._try(" UNION ALL ".join(parts))
        if rows is None:
            return {}
        values: dict[int, list[str]] = {}
        for col_no, value in rows:
            values.setdefault(int(col_no), []).append(str(value))
        return {
            columns[i]: sorted(found)
            for i, found in values.items()
            if len(found) <= MAX_SAMPLE_VALUES and all(len(v) <= MAX_SAMPLE_CHARS for v in found)
        }

    def _try(self, sql: str) -> list[tuple[Any, ...]] | None:
        try:
            return self.fetch(sql)
        except Exception:  # best effort: any failure (timeout, permission) leaves the table unprofiled
            return None


def low_cardinality_values(values: Sequence[Any] | None, distinct: float | None) -> list[str]:
    """Most-common values from engine statistics, when they are all the column has."""
    if not values or distinct is None or distinct > MAX_SAMPLE_VALUES or len(values) < distinct:
        return []
    texts = [str(v) for v in values]
    if any(len(v) > MAX_SAMPLE_CHARS for v in texts):
        return []
    return sorted(texts)


def quote_double(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def quote_backtick(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"
