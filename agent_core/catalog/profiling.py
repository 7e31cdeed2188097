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
COUNT_BATCH = 100  # tables counted per statement
SAMPLE_BATCH = 20  # tables whose distinct values one statement reads

TEXT_TYPE = re.compile(r"char|text|string|enum|citext|\bset\b", re.IGNORECASE)

Fetch = Callable[[str], list[tuple[Any, ...]]]
Sampled = tuple[str | None, str, Sequence[str]]  # schema, table, its text columns


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

    def counts(self, relations: Sequence[tuple[str | None, str]]) -> dict[tuple[str | None, str], int | None]:
        """Row counts of many tables, COUNT_BATCH per statement (a warehouse of thousands of
        small tables is counted in a few dozen round trips); a batch that fails is counted
        table by table."""
        out: dict[tuple[str | None, str], int | None] = {}
        for start in range(0, len(relations), COUNT_BATCH):
            if self.exhausted:
                break
            batch = relations[start : start + COUNT_BATCH]
            rows = self._try(
                " UNION ALL ".join(
                    f"SELECT {i} AS n, count(*) AS c FROM {self.relation(schema, name)}" for i, (schema, name) in enumerate(batch)
                )
            )
            if rows is None:
                out |= {(schema, name): self.count(schema, name) for schema, name in batch}
            else:
                out |= {batch[int(i)]: int(c) for i, c in rows}
        return out

    def distinct_values(self, schema: str | None, name: str, columns: Sequence[str]) -> dict[str, list[str]]:
        """Column → its distinct values, for the columns with at most MAX_SAMPLE_VALUES."""
        return self.distinct_values_of([(schema, name, columns)])[0]

    def distinct_values_of(self, tables: Sequence[Sampled]) -> list[dict[str, list[str]]]:
        """`distinct_values` of many tables, SAMPLE_BATCH tables per statement; a batch that
        fails is read table by table."""
        out: list[dict[str, list[str]]] = []
        for start in range(0, len(tables), SAMPLE_BATCH):
            batch = [
                (schema, name, list(columns)[:MAX_SAMPLED_COLUMNS])
                for schema, name, columns in tables[start : start + SAMPLE_BATCH]
            ]
            if self.exhausted:
                out += [{} for _ in batch]
                continue
            rows = self._try(self._distinct_sql(batch))
            if rows is None and len(batch) > 1:
                out += [self._read_distinct([table]) for table in batch]
                continue
            out += self._parse_distinct(batch, rows or [])
        return out

    def _read_distinct(self, batch: list[tuple[str | None, str, list[str]]]) -> dict[str, list[str]]:
        if self.exhausted:
            return {}
        return self._parse_distinct(batch, self._try(self._distinct_sql(batch)) or [])[0]

    def _distinct_sql(self, batch: list[tuple[str | None, str, list[str]]]) -> str:
        # Each column's first MAX_SAMPLE_VALUES + 1 distinct values, tagged by table and column.
        return (
            " UNION ALL ".join(
                f"SELECT {t} AS t, {i} AS col_no, CAST(v AS {self.cast_text}) AS val FROM "
                f"(SELECT DISTINCT {self.quote(column)} AS v FROM {self.relation(schema, name)} "
                f"WHERE {self.quote(column)} IS NOT NULL LIMIT {MAX_SAMPLE_VALUES + 1}) AS d{t}_{i}"
                for t, (schema, name, columns) in enumerate(batch)
                for i, column in enumerate(columns)
            )
            or "SELECT 0, 0, '' WHERE false"
        )

    @staticmethod
    def _parse_distinct(
        batch: list[tuple[str | None, str, list[str]]], rows: list[tuple[Any, ...]]
    ) -> list[dict[str, list[str]]]:
        values: dict[tuple[int, int], list[str]] = {}
        for table_no, col_no, value in rows:
            values.setdefault((int(table_no), int(col_no)), []).append(str(value))
        out: list[dict[str, list[str]]] = [{} for _ in batch]
        for (t, i), found in values.items():
            if len(found) <= MAX_SAMPLE_VALUES and all(len(v) <= MAX_SAMPLE_CHARS for v in found):
                out[t][batch[t][2][i]] = sorted(found)
        return out

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
