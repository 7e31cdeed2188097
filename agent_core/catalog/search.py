"""Finding the tables, verified examples and metrics a question needs.

Each catalog table is one BM25 document over its name (weighted most), comment, column names,
column comments and low-cardinality values; examples are documents over their question and SQL,
metrics over their name and description. The index is rebuilt when a refresh changed the
catalog, and filtered per conversation, so a source closed to a channel never shows up in it.

Under an access policy (`agent_core.governance.catalog_access`) the shared index holds only
what every audience may see -- no hidden column, no sample value of a row-filtered table -- so
no question can find a table by what its asker may not read; each answer then shows what its
own audience may see of the tables found.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import timedelta
from typing import TypeVar

from pydantic import BaseModel, Field
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from agent_core.catalog.bm25 import Bm25Index, Hit, weighted_terms
from agent_core.catalog.examples import VerifiedExample
from agent_core.catalog.learned import LearnedExamples
from agent_core.catalog.metrics import MetricDocument
from agent_core.catalog.models import CatalogTable
from agent_core.catalog.refresh import refresh_catalog
from agent_core.catalog.store import CatalogStore
from agent_core.catalog.text import terms
from agent_core.data.source_config import DataSourceConfig
from agent_core.governance.audience import TableView
from agent_core.governance.catalog_access import CatalogAccess, shows_row_data, visible_column
from agent_core.messages import utcnow
from agent_core.semantic.model import DEMO_SOURCE  # the demo data: open to every conversation

MAX_COLUMNS_SHOWN = 40  # per table; describe_table lists the rest
MAX_EXAMPLES = 3
MAX_METRICS = 5
RETRY_UNREADABLE = timedelta(minutes=5)  # a source never read is tried again after this
Item = TypeVar("Item")

# Field weights: a table's own name says most about what it holds, a sample value least.
_TABLE_NAME, _SCHEMA_NAME, _TABLE_COMMENT = 3.0, 0.5, 2.0
_COLUMN_NAME, _COLUMN_COMMENT, _SAMPLE_VALUE = 1.0, 1.0, 0.5


class ColumnHit(BaseModel):
    name: str
    type: str
    comment: str | None = None
    values: list[str] | None = None  # every value of a low-cardinality text column


class TableHit(BaseModel):
    source: str  # pass to sql_query(source=...)
    name: str  # as written in SQL: schema.table
    kind: str
    comment: str | None = None
    row_count: int | None = None
    row_count_estimated: bool = False
    columns: list[ColumnHit]
    more_columns: int = 0  # columns not shown; describe_table lists them all
    score: float


class ExampleHit(BaseModel):
    question: str
    sql: str
    source: str | None
    score: float


class MetricHit(BaseModel):
    name: str
    description: str | None
    source: str
    score: float


class SchemaSearchResult(BaseModel):
    tables: list[TableHit]
    examples: list[ExampleHit] = Field(default_factory=list)  # verified question → SQL pairs
    metrics: list[MetricHit] = Field(default_factory=list)  # query these with query_metric
    notes: list[str] = Field(default_factory=list)


class SchemaIndex:
    """An immutable search index over one catalog version, the examples and the metrics."""

    def __init__(
        self,
        tables: list[CatalogTable],
        examples: Sequence[VerifiedExample],
        metrics: Sequence[MetricDocument],
        everyone: CatalogAccess | None = None,
    ) -> None:
        """``everyone``: what every audience may see, when an access policy applies."""
        self._tables = Bm25Index([(table, _table_terms(visible_part(table, everyone))) for table in tables])
        self._examples = Bm25Index(
            [(e, weighted_terms([(terms(e.question), 2.0), (terms(e.sql), 0.5)])) for e in examples]
        )
        self._metrics = Bm25Index(
            [(m, weighted_terms([(terms(m.name), 3.0), (terms(m.description), 1.5)])) for m in metrics]
        )

    @property
    def table_count(self) -> int:
        return len(self._tables)

    def search(
        self, question: str, usable: Collection[str], limit: int, access: CatalogAccess | None = None
    ) -> SchemaSearchResult:
        """The ``limit`` best tables of the ``usable`` sources, and the examples and metrics
        that match the question well (never ones of a source outside ``usable``); each table
        as far as ``access`` lets its audience see it (None: all of it)."""
        query = terms(question)

        def open_here(source: str | None) -> bool:
            return source is None or source == DEMO_SOURCE or source in usable

        tables = self._tables.search(query, limit, lambda t: t.source in usable)
        examples = _close_matches(self._examples.search(query, MAX_EXAMPLES, lambda e: open_here(e.source)), query)
        metrics = _close_matches(
            self._metrics.search(query, MAX_METRICS, lambda m: open_here(m.source)), query, lambda m: set(terms(m.name))
        )
        # A metric the question names outright comes first, however common its name's words are.
        metrics.sort(key=lambda hit: hit.item.name.lower() not in query)
        return SchemaSearchResult(
            tables=[_table_hit(hit, set(query), access) for hit in tables],
            examples=[
                ExampleHit(question=h.item.question, sql=h.item.sql, source=h.item.source, score=round(h.score, 2))
                for h in examples
            ],
            metrics=[
                MetricHit(name=h.item.name, description=h.item.description, source=h.item.source, score=round(h.score, 2))
                for h in metrics
            ],
        )


class SchemaSearch:
    """Search over the stored catalog, rebuilding the index when a refresh changed it."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        datasources: Mapping[str, DataSourceConfig],
        examples: Sequence[VerifiedExample] = (),
        metrics: Callable[[], list[MetricDocument]] | None = None,
        everyone: CatalogAccess | None = None,
    ) -> None:
        """``everyone``: what every audience may see of the catalog under the access policy
        (`CatalogAccess.everyone`); only that is searchable."""
        self._sessions = sessions
        self._everyone = everyone
        self._store = CatalogStore(sessions)
        self._datasources = dict(datasources)
        self._examples = list(examples)
        self._load_metrics = metrics
        self._metrics: list[MetricDocument] | None = None
        self._index: tuple[object, SchemaIndex] | None = None
        self._learned = LearnedExamples(sessions)  # confirmed from feedback, searched alike

    async def search(
        self, question: str, usable: Collection[str], limit: int, access: CatalogAccess | None = None
    ) -> SchemaSearchResult:
        notes = await self._read_missing(usable)
        result = (await self.index()).search(question, usable, limit, access)
        result.notes += notes
        return result

    async def index(self) -> SchemaIndex:
        version = (await self._store.version(), await self._learned.version())
        if self._index is None or self._index[0] != version:
            if self._metrics is None:
                self._metrics = await asyncio.to_thread(self._load_metrics) if self._load_metrics else []
            tables = await self._store.load()
            examples = self._examples + await self._learned.approved()
            index = await asyncio.to_thread(SchemaIndex, tables, examples, self._metrics, self._everyone)
            self._index = (version, index)
        return self._index[1]

    async def _read_missing(self, usable: Collection[str]) -> list[str]:
        """Read the sources never catalogued yet (a fresh install, a new source) right away;
        one that failed is tried again after RETRY_UNREADABLE, not on every search."""
        states = {state.source: state for state in await self._store.states(usable)}
        notes, missing = [], []
        for name in sorted(usable):
            state = states.get(name)
            if state is None or (state.refreshed_at is None and utcnow() - state.attempted_at > RETRY_UNREADABLE):
                missing.append(name)
            elif state.refreshed_at is None:
                notes.append(f"The catalog of {name!r} could not be read: {state.error}")
        # stale_after=max: a search that raced the start-up refresh does not read the source twice.
        outcomes = (
            await refresh_catalog(self._datasources, self._sessions, sources=missing, stale_after=timedelta.max)
            if missing
            else []
        )
        return notes + [f"The catalog of {o.source!r} could not be read: {o.error}" for o in outcomes if o.error]


def _table_terms(table: CatalogTable) -> dict[str, float]:
    fields: list[tuple[list[str], float]] = [
        (terms(table.name), _TABLE_NAME),
        (terms(table.schema_name), _SCHEMA_NAME),
        (terms(table.comment), _TABLE_COMMENT),
    ]
    for column in table.columns:
        fields += [(terms(column.name), _COLUMN_NAME), (terms(column.comment), _COLUMN_COMMENT)]
        fields += [(terms(value), _SAMPLE_VALUE) for value in column.sample_values]
    return weighted_terms(fields)


def visible_part(table: CatalogTable, access: CatalogAccess | None) -> CatalogTable:
    """``table`` as ``access`` lets its audience see it: without the columns it may not read,
    and without sample values and row count when its rows are filtered."""
    view: TableView | None = access.view(table.source, table.schema_name, table.name) if access else None
    if view is None:
        return table
    rows_shown = shows_row_data(view)
    columns = [
        column if rows_shown else column.model_copy(update={"sample_values": []})
        for column in table.columns
        if visible_column(view, column.name)
    ]
    update: dict[str, object] = {"columns": columns}
    if not rows_shown:
        update |= {"row_count": None, "row_count_estimated": False}
    return table.model_copy(update=update)


def _table_hit(hit: Hit[CatalogTable], query: set[str], access: CatalogAccess | None) -> TableHit:
    table = visible_part(hit.item, access)
    shown = list(range(len(table.columns)))
    if len(shown) > MAX_COLUMNS_SHOWN:
        # Keep the columns the question is about, then the first ones, in table order.
        relevant = [
            i for i, c in enumerate(table.columns) if query & {*terms(c.name), *terms(c.comment)}
        ][:MAX_COLUMNS_SHOWN]
        rest = [i for i in shown if i not in relevant][: MAX_COLUMNS_SHOWN - len(relevant)]
        shown = sorted(relevant + rest)
    return TableHit(
        source=table.source,
        name=table.qualified_name,
        kind=table.kind,
        comment=table.comment,
        row_count=table.row_count,
        row_count_estimated=table.row_count_estimated,
        columns=[
            ColumnHit(
                name=table.columns[i].name,
                type=table.columns[i].type,
                comment=table.columns[i].comment,
                values=table.columns[i].sample_values or None,
            )
            for i in shown
        ],
        more_columns=len(table.columns) - len(shown),
        score=round(hit.score, 2),
    )


def _close_matches(
    hits: list[Hit[Item]], query: list[str], name_terms: Callable[[Item], set[str]] | None = None
) -> list[Hit[Item]]:
    """Hits that share at least two of the question's terms (one for a one-term question, or
    any term of a metric's own name) and score at least half the best: an example about
    something else is noise in the prompt."""
    if not hits:
        return []
    needed = min(2, len(set(query)))
    best = hits[0].score
    return [
        hit
        for hit in hits
        if hit.score >= best / 2 and (len(hit.matched) >= needed or (name_terms and hit.matched & name_terms(hit.item)))
    ]
