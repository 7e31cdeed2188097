"""Where an answer's numbers came from: the queries a turn ran, shown under its answer.

Tools record a `DataAccess` for every query whose rows reach the model, where the query runs
(`agent_core.tools.sql` for the conversation's data and configured sources, `query_metric` for
governed metrics), built from the SQL as executed and its result -- never from what the model
writes. The loop gathers a turn's accesses into the reply's `Provenance`; each adapter renders
it: `summary_line` as the answer's last line, `sql_listing` one click away.

Catalog lookups (list_tables, describe_table, search_schema, list_metrics) read structure, not
the numbers an answer gives, and are not recorded. Every user-facing word is in
`ProvenanceWords`, taken from the message catalog in the reader's language.

This module sits at the bottom of agent_core (the message model imports it): it imports no
other module of the package but the catalog (`agent_core.i18n`, as low), and sqlglot only when
a query is recorded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from agent_core.i18n import Language, t

# The source of tables uploaded into the conversation (unqualified names in its DuckDB).
UPLOADS_SOURCE = "uploads"


class ProvenanceWords(BaseModel):
    """The words of the provenance line and the SQL panel, in one language."""

    model_config = ConfigDict(frozen=True)

    source: str
    metrics: str
    period: str
    period_to: str
    grain: str  # {grain}
    grain_names: dict[str, str]  # the time grains a metric is queried by (day, week…) as read
    as_of: str
    rows: str  # {rows}
    one_row: str
    more_rows: str  # {rows}: a result was cut at a row or size cap
    queries: str  # {queries}
    sql_title: str
    sql_cut: str  # {chars}
    policy_shaped: str  # the access policy filtered rows or hid columns of the answer

    @classmethod
    def of(cls, language: Language) -> ProvenanceWords:
        """The words in ``language``; ``{fields}`` stay unfilled, for `Provenance` to fill."""
        # t() without values leaves a msgid's braces as they are.
        return cls(
            source=t(language, "Source"),
            metrics=t(language, "Metrics"),
            period=t(language, "Period"),
            period_to=t(language, "to"),
            grain=t(language, "by {grain}"),
            grain_names={
                "hour": t(language, "hour"),
                "day": t(language, "day"),
                "week": t(language, "week"),
                "month": t(language, "month"),
                "quarter": t(language, "quarter"),
                "year": t(language, "year"),
            },
            as_of=t(language, "Data as of"),
            rows=t(language, "{rows} rows"),
            one_row=t(language, "1 row"),
            more_rows=t(language, "{rows}+ rows"),
            queries=t(language, "from {queries} queries"),
            sql_title=t(language, "SQL behind this answer"),
            sql_cut=t(language, "-- (cut here: {chars} more characters)"),
            policy_shaped=t(language, "Limited by the access policy to what may be shown here"),
        )


ENGLISH = ProvenanceWords.of(Language.EN)


class TimeRange(BaseModel):
    """The period a query covered: ISO dates (or timestamps); None where it is unknown."""

    model_config = ConfigDict(frozen=True)

    start: str | None = None
    end: str | None = None
    grain: str | None = None  # the time grain of a metric query (day, week, month…)


class DataAccess(BaseModel):
    """One query whose rows the model read this turn.

    - ``source``: the configured source's name, ``demo`` for the demo data, ``uploads`` for
      the conversation's uploaded tables (several, comma-separated, for a query joining them).
    - ``tables``: the tables the executed SQL reads (from its syntax tree; CTEs and table
      functions excluded), as written in it.
    - ``metrics``: the governed metrics computed (query_metric); empty for raw SQL.
    - ``time_range``: from the query's own date filters where the tool knows them (a metric
      query's start/end/grain), else the min/max of the first date/time column of the result;
      None when the result has no such column and no filter is known.
    - ``freshness``: the latest date/time value in the result (for a metric query, the latest
      metric_time returned, the start of its grain bucket); None when the result has no
      date/time column. No extra query is run to find it.
    - ``rows``: rows returned to the model; ``truncated``: more existed beyond a cap.
    - ``sql``: the SQL as executed, after any access-policy rewrite.
    - ``call_id``: the tool call that ran it (calls running together record in call order).
    - ``policy_shaped``: the access policy shaped the result (a row filter applied, columns
      hidden); the posted line says so.
    """

    model_config = ConfigDict(frozen=True)

    source: str
    tables: list[str]
    metrics: list[str] = []
    time_range: TimeRange | None = None
    freshness: str | None = None
    rows: int
    truncated: bool = False
    sql: str
    call_id: str = ""
    policy_shaped: bool = False


class Provenance(BaseModel):
    """The data behind one reply: the turn's queries, each once, in the order they first ran."""

    model_config = ConfigDict(frozen=True)

    accesses: list[DataAccess]

    @classmethod
    def of(cls, accesses: Iterable[DataAccess]) -> Provenance | None:
        """The provenance of a turn's accesses; None when it read no data.

        A query run twice (a retried call, the model asking again) counts once, with its
        latest result.
        """
        latest: dict[tuple[str, str], DataAccess] = {}
        for access in accesses:
            latest.pop((access.source, access.sql), None)
            latest[(access.source, access.sql)] = access
        return cls(accesses=list(latest.values())) if latest else None

    @property
    def time_range(self) -> TimeRange | None:
        """The span of every known range: the earliest start to the latest end."""
        ranges = [a.time_range for a in self.accesses if a.time_range is not None]
        starts = [r.start for r in ranges if r.start]
        ends = [r.end for r in ranges if r.end]
        if not starts and not ends:
            return None
        grains = {r.grain for r in ranges}  # a grain is shown only when every range has it
        return TimeRange(
            start=min(starts, default=None),
            end=max(ends, default=None),
            grain=grains.pop() if len(grains) == 1 else None,
        )

    @property
    def freshness(self) -> str | None:
        return max((a.freshness for a in self.accesses if a.freshness), default=None)

    def summary_line(self, words: ProvenanceWords = ENGLISH) -> str:
        """The one-line footer: sources and tables, metrics, period, freshness, rows (plain text)."""
        parts = [f"{words.source}: {self._sources()}"]
        metrics = list(dict.fromkeys(m for a in self.accesses for m in a.metrics))
        if metrics:
            parts.append(f"{words.metrics}: {', '.join(metrics)}")
        span = self.time_range
        if span is not None:
            period = f"{words.period}: {span.start or '…'} {words.period_to} {span.end or '…'}"
            if span.grain:
                period += " " + words.grain.format(grain=words.grain_names.get(span.grain, span.grain))
            parts.append(period)
        if self.freshness:
            parts.append(f"{words.as_of} {self.freshness}")
        parts.append(self._rows(words))
        if any(a.policy_shaped for a in self.accesses):
            parts.append(words.policy_shaped)
        return " · ".join(parts)

    def sql_listing(self, words: ProvenanceWords = ENGLISH, max_chars: int | None = None) -> str:
        """Every query as executed, each under a comment naming its source; with ``max_chars``,
        cut at that length with a note saying how much was left out."""
        listing = "\n\n".join(f"-- {a.source}\n{a.sql.rstrip().rstrip(';')};" for a in self.accesses)
        if max_chars is None or len(listing) <= max_chars:
            return listing
        note = words.sql_cut.format(chars=len(listing) - max_chars)
        return listing[:max_chars].rstrip() + "\n" + note

    def _sources(self) -> str:
        tables: dict[str, list[str]] = {}
        for access in self.accesses:
            known = tables.setdefault(access.source, [])
            known.extend(t for t in access.tables if t not in known)
        return "; ".join(f"{source} ({', '.join(names)})" if names else source for source, names in tables.items())

    def _rows(self, words: ProvenanceWords) -> str:
        rows = sum(a.rows for a in self.accesses)
        if any(a.truncated for a in self.accesses):
            text = words.more_rows.format(rows=f"{rows:,}")
        else:
            text = words.one_row if rows == 1 else words.rows.format(rows=f"{rows:,}")
        if len(self.accesses) > 1:
            text += " " + words.queries.format(queries=len(self.accesses))
        return text


# --------------------------------------------------------------------------- recording


class QueryRows(Protocol):
    """What a query result offers to be recorded (``agent_core.data.duckdb_engine.QueryResult``)."""

    sql: str
    columns: list[str]
    rows: list[list[Any]]
    row_count: int
    truncated: bool


def record_query(
    accesses: list[DataAccess],
    result: QueryRows,
    *,
    source: str,
    dialect: str,
    catalogs: Mapping[str, str] | None = None,
    metrics: Sequence[str] = (),
    period: TimeRange | None = None,
    call_id: str = "",
    policy_shaped: bool = False,
) -> None:
    """Append the access of ``result`` (a query run on ``source`` by tool call ``call_id``) to
    ``accesses``.

    ``catalogs`` maps a catalog (or schema) name to the source whose tables it holds: the
    conversation's DuckDB names the demo data ``demo.sales`` beside uploaded tables of
    ``source``; such tables are listed under their own source, without the qualifier.
    ``period`` is the date filter the tool applied, when it knows it. A query that read no
    table (``SELECT 1``) is not recorded.
    """
    sources, tables = _tables_read(result.sql, dialect, source, catalogs or {})
    if not tables and not metrics:
        return
    span, freshness = _dates_of(result.columns, result.rows)
    if period is not None:
        start = period.start or (span.start if span else None)
        end = period.end or (span.end if span else None)
        span = TimeRange(start=start, end=end, grain=period.grain)
    accesses.append(
        DataAccess(
            source=", ".join(sources) or source,
            tables=tables,
            metrics=list(metrics),
            time_range=span,
            freshness=freshness,
            rows=result.row_count,
            truncated=result.truncated,
            sql=result.sql,
            call_id=call_id,
            policy_shaped=policy_shaped,
        )
    )


def _tables_read(sql: str, dialect: str, source: str, catalogs: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """The sources and the tables (as named in ``sql``) a query reads; none if it does not parse."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except SqlglotError:
        return [], []
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    sources: list[str] = []
    tables: list[str] = []
    for table in tree.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier) or not table.name:
            continue  # a table function
        qualifiers = [part for part in (table.catalog, table.db) if part]
        if not qualifiers and table.name.lower() in ctes:
            continue
        owner = next((catalogs[q.lower()] for q in qualifiers if q.lower() in catalogs), None)
        parts = [table.name] if owner is not None else [*qualifiers, table.name]
        name = ".".join(parts)
        if owner is None:
            owner = source
        if owner not in sources:
            sources.append(owner)
        if name not in tables:
            tables.append(name)
    return sources, tables


def _dates_of(columns: list[str], rows: list[list[Any]]) -> tuple[TimeRange | None, str | None]:
    """The range of the first date/time column of a result and its latest date/time value."""
    span: TimeRange | None = None
    latest: str | None = None
    for index in range(len(columns)):
        values = [row[index] for row in rows if row[index] is not None]
        if not values or not all(isinstance(v, date) for v in values):
            continue
        shown = sorted(_iso(v) for v in values)
        if span is None:
            span = TimeRange(start=shown[0], end=shown[-1])
        latest = max(latest or shown[-1], shown[-1])
    return span, latest


def _iso(value: date) -> str:
    """A date as YYYY-MM-DD; a timestamp to the minute, midnight shown as the bare date."""
    if isinstance(value, datetime):
        if (value.hour, value.minute, value.second) == (0, 0, 0):
            return value.date().isoformat()
        return value.isoformat(sep=" ", timespec="minutes")
    return value.isoformat()
