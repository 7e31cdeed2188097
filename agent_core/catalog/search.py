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
import bisect
import heapq
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel, Field
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from agent_core.catalog.bm25 import Bm25Index, Hit, weighted_terms
from agent_core.catalog.examples import VerifiedExample, tables_read
from agent_core.catalog.joins import Join, find_joins
from agent_core.catalog.learned import LearnedExamples
from agent_core.catalog.metrics import MetricDocument
from agent_core.catalog.models import CatalogTable
from agent_core.catalog.ranking import Group, rank_groups
from agent_core.catalog.refresh import refresh_catalog
from agent_core.catalog.store import CatalogStore
from agent_core.catalog.text import terms
from agent_core.data.source_config import DataSourceConfig
from agent_core.messages import utcnow
from agent_core.semantic.model import DEMO_SOURCE  # the demo data: open to every conversation

if TYPE_CHECKING:  # the governance modules import sqlglot: only searches under a policy need them
    from agent_core.governance.catalog_access import CatalogAccess

MAX_COLUMNS_SHOWN = 40  # per table; describe_table lists the rest
MAX_EXAMPLES = 3
MAX_METRICS = 5
RETRY_UNREADABLE = timedelta(minutes=5)  # a source never read is tried again after this
Item = TypeVar("Item")
PREFIX_MIN = 4  # shortest abbreviation matched as a prefix
PREFIX_WEIGHT = 0.3  # a prefix match counts this much of a full one
# A table's final score: OWN_WEIGHT × its own BM25 score + the score of the best group it is
# in + SCHEMA_WEIGHT × its schema's BM25 score (the schema as one document: a subject area).
OWN_WEIGHT = 0.5
SCHEMA_WEIGHT = 2.5
SCHEMA_FILL = 3  # every table of the best schemas is a candidate, however few words it shares
FILL_WEIGHT = 0.7
SCHEMA_FILL_MAX = 40  # ... in schemas this small (a big schema's tables compete on their own)
SHARED_MIN = 5  # a shared beginning this long...
SHARED_SHARE = 0.8  # ...and covering this share of the shorter word: the same word
SHARED_FANOUT = 40
# Words of the question's arithmetic rather than its subject ("average salary by department"):
# they count, but less, so a column named ``average`` does not outrank the salary table.
SOFT_TERMS = frozenset(terms("average mean total sum number count maximum minimum max min distinct different "
                             "highest lowest largest smallest most least order descending ascending"))
SOFT_WEIGHT = 0.3  # longer catalog terms a question's word may stand for

# Field weights: a table's own name says most about what it holds, a sample value least.
_TABLE_NAME, _SCHEMA_NAME, _TABLE_COMMENT = 3.0, 0.5, 2.0
_COLUMN_NAME, _COLUMN_COMMENT, _SAMPLE_VALUE = 1.0, 1.0, 0.5
_EXAMPLE_QUESTION = 1.0  # a verified example's question, on the tables its SQL reads


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
    joins: list[JoinKey] = Field(default_factory=list)  # to the other tables returned


class JoinKey(BaseModel):
    """How a returned table joins another returned table."""

    table: str  # the other table, schema.table
    on: str  # the join condition, e.g. "orders.customer_id = customers.id"
    declared: bool  # a declared foreign key; False: inferred from names (check it)


class TableGroup(BaseModel):
    """Returned tables that answer the question together, and how they join."""

    tables: list[str]
    joins: list[str]


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
    groups: list[TableGroup] = Field(default_factory=list)  # tables to join, with their join keys
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
        described = _described_by_examples(tables, examples)
        self._tables = Bm25Index(
            [(table, _table_terms(visible_part(table, everyone), described.get(n, []))) for n, table in enumerate(tables)]
        )
        self._vocabulary = sorted(self._tables.vocabulary())
        self._sources = {table.source for table in tables}
        # A schema is a subject area: the whole schema's words are context for each of its tables.
        schemas: dict[tuple[str, str | None], dict[str, float]] = {}
        schema_numbers: dict[tuple[str, str | None], int] = {}
        self._schema_of: list[int] = []
        for number, table in enumerate(tables):
            key = (table.source, table.schema_name)
            merged = schemas.setdefault(key, {})
            for term, weight in self._tables.document(number).items():
                merged[term] = merged.get(term, 0.0) + weight
            self._schema_of.append(schema_numbers.setdefault(key, len(schema_numbers)))
        self._schemas = Bm25Index(list(schemas.items()))
        self._schema_members: list[list[int]] = [[] for _ in schemas]
        for number, schema in enumerate(self._schema_of):
            self._schema_members[schema].append(number)
        self._neighbours: dict[int, list[Join]] = {}
        for join in find_joins([visible_part(table, everyone) for table in tables]):
            self._neighbours.setdefault(join.table, []).append(join)
        self._examples = Bm25Index(
            [(e, weighted_terms([(terms(e.question), 2.0), (terms(e.sql), 0.5)])) for e in examples]
        )
        self._metrics = Bm25Index(
            [(m, weighted_terms([(terms(m.name), 3.0), (terms(m.description), 1.5)])) for m in metrics]
        )

    @property
    def table_count(self) -> int:
        return len(self._tables)

    def rank(self, query: list[str], usable: Collection[str], limit: int) -> tuple[list[int], list[Group], dict[int, float]]:
        """The numbers of the ``limit`` best tables of the ``usable`` sources, best first; the
        groups of several tables among them; each table's ranking score."""
        items = self._tables.items
        weights = self._query_weights(query)
        everywhere = self._sources <= set(usable)

        def accept(number: int) -> bool:
            return everywhere or items[number].source in usable

        contributions = {n: t for n, t in self._tables.term_scores(weights).items() if accept(n)}
        totals = {number: sum(terms.values()) for number, terms in contributions.items()}
        schema_scores = {number: sum(terms.values()) for number, terms in self._schemas.term_scores(weights).items()}
        groups = rank_groups(contributions, totals, lambda number: self._neighbours.get(number, []), accept)
        final = {
            number: OWN_WEIGHT * total + SCHEMA_WEIGHT * schema_scores.get(self._schema_of[number], 0.0)
            for number, total in totals.items()
        }
        for group in groups:
            for number in group.tables:
                base = OWN_WEIGHT * totals.get(number, 0.0) + SCHEMA_WEIGHT * schema_scores.get(self._schema_of[number], 0.0)
                final[number] = max(final.get(number, 0.0), base + group.score)
        for number in self._members_of_best(schema_scores, usable) - final.keys():
            final[number] = FILL_WEIGHT * SCHEMA_WEIGHT * schema_scores[self._schema_of[number]]
        order = heapq.nsmallest(limit, final, key=lambda number: (-final[number], number))
        shown = set(order)
        joined = [group for group in groups if len(group.tables) > 1 and shown.issuperset(group.tables)]
        return order, joined, {number: final[number] for number in order}

    def _members_of_best(self, schema_scores: dict[int, float], usable: Collection[str]) -> set[int]:
        best = sorted(schema_scores, key=lambda number: -schema_scores[number])[:SCHEMA_FILL]
        items = self._tables.items
        return {
            number
            for schema in best
            if len(self._schema_members[schema]) <= SCHEMA_FILL_MAX
            for number in self._schema_members[schema]
            if items[number].source in usable
        }

    def _query_weights(self, query: list[str]) -> dict[str, float]:
        """The question's terms, and the catalog's terms that are a prefix of one of them or
        that one of them is a prefix of (``indep`` for ``independent``, ``weight`` for
        ``weigh``): identifiers abbreviate by cutting words short."""
        weights = {term: SOFT_WEIGHT if term in SOFT_TERMS else 1.0 for term in query}
        for term in query:
            if len(term) < PREFIX_MIN or not term.isalpha():
                continue
            for size in range(PREFIX_MIN, len(term)):
                if term[:size] not in weights and _in_sorted(self._vocabulary, term[:size]):
                    weights[term[:size]] = PREFIX_WEIGHT
            # Catalog words sharing most of a long-enough beginning with the question's word:
            # ``enrolment``/``enroll``, ``weight``/``weigh``.
            start = bisect.bisect_left(self._vocabulary, term[:SHARED_MIN])
            for other in self._vocabulary[start : start + SHARED_FANOUT]:
                if not other.startswith(term[:SHARED_MIN]):
                    break
                if other.isalpha() and other not in weights and _shared(term, other) >= SHARED_SHARE * min(len(term), len(other)):
                    weights[other] = PREFIX_WEIGHT
        return weights

    def _group(self, group: Group, access: CatalogAccess | None) -> TableGroup:
        items = self._tables.items
        return TableGroup(
            tables=[items[number].qualified_name for number in group.tables],
            joins=[
                _condition(items[j.table], j.column, items[j.other], j.other_column)
                for j in group.joins
                if self._visible(j, access)
            ],
        )

    def _visible(self, join: Join, access: CatalogAccess | None) -> bool:
        """Both join columns are ones the audience may see (a hidden key is never named)."""
        if access is None:
            return True
        items = self._tables.items
        return any(c.name == join.column for c in visible_part(items[join.table], access).columns) and any(
            c.name == join.other_column for c in visible_part(items[join.other], access).columns
        )

    def _table_hit(
        self, number: int, order: list[int], score: float, query: set[str], access: CatalogAccess | None
    ) -> TableHit:
        items = self._tables.items
        hit = _table_hit(Hit(items[number], score, frozenset()), query, access)
        shown = set(order)
        hit.joins = [
            JoinKey(
                table=items[j.other].qualified_name,
                on=_condition(items[j.table], j.column, items[j.other], j.other_column),
                declared=j.declared,
            )
            for j in self._neighbours.get(number, [])
            if j.other in shown and self._visible(j, access)
        ]
        return hit

    def search(
        self, question: str, usable: Collection[str], limit: int, access: CatalogAccess | None = None
    ) -> SchemaSearchResult:
        """The ``limit`` best tables of the ``usable`` sources, and the examples and metrics
        that match the question well (never ones of a source outside ``usable``); each table
        as far as ``access`` lets its audience see it (None: all of it)."""
        query = terms(question)

        def open_here(source: str | None) -> bool:
            return source is None or source == DEMO_SOURCE or source in usable

        order, groups, scores = self.rank(query, usable, limit)
        examples = _close_matches(self._examples.search(query, MAX_EXAMPLES, lambda e: open_here(e.source)), query)
        metrics = _close_matches(
            self._metrics.search(query, MAX_METRICS, lambda m: open_here(m.source)), query, lambda m: set(terms(m.name))
        )
        # A metric the question names outright comes first, however common its name's words are.
        metrics.sort(key=lambda hit: hit.item.name.lower() not in query)
        return SchemaSearchResult(
            tables=[self._table_hit(number, order, scores.get(number, 0.0), set(query), access) for number in order],
            groups=[self._group(group, access) for group in groups],
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
        self._building = asyncio.Lock()
        self._learned = LearnedExamples(sessions)  # confirmed from feedback, searched alike

    async def search(
        self, question: str, usable: Collection[str], limit: int, access: CatalogAccess | None = None
    ) -> SchemaSearchResult:
        notes = await self._read_missing(usable)
        result = (await self.index()).search(question, usable, limit, access)
        result.notes += notes
        return result

    async def index(self) -> SchemaIndex:
        async with self._building:  # searches arriving during a build wait for it, not build too
            return await self._current_index()

    async def _current_index(self) -> SchemaIndex:
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


def _condition(table: CatalogTable, column: str, other: CatalogTable, other_column: str) -> str:
    """``a.x = b.y`` as SQL: each name quoted where it needs it."""

    def reference(owner: CatalogTable, name: str) -> str:
        return ".".join(quote_name(part) for part in (owner.schema_name, owner.name, name) if part)

    return f"{reference(table, column)} = {reference(other, other_column)}"


def quote_name(name: str) -> str:
    """An identifier as SQL needs it written (plain lower-case names stay bare)."""
    return name if re.fullmatch(r"[a-z_][a-z0-9_]*", name) else '"' + name.replace('"', '""') + '"'


def _shared(a: str, b: str) -> int:
    size = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        size += 1
    return size


def _in_sorted(words: list[str], word: str) -> bool:
    at = bisect.bisect_left(words, word)
    return at < len(words) and words[at] == word


def _described_by_examples(tables: list[CatalogTable], examples: Sequence[VerifiedExample]) -> dict[int, list[str]]:
    """Table number → the questions of the verified examples whose SQL reads it: an operator's
    words for what the table holds (``churn`` for ``cust_attr_m``)."""
    if not examples:
        return {}
    by_name: dict[str, list[int]] = {}
    for number, table in enumerate(tables):
        by_name.setdefault(table.name.lower(), []).append(number)
    described: dict[int, list[str]] = {}
    for example in examples:
        for schema, name in tables_read(example.sql):
            for number in by_name.get(name, []):
                table = tables[number]
                if (example.source is None or example.source == table.source) and (
                    schema is None or schema == (table.schema_name or "").lower()
                ):
                    described.setdefault(number, []).append(example.question)
    return described


def _table_terms(table: CatalogTable, questions: list[str]) -> dict[str, float]:
    fields: list[tuple[list[str], float]] = [(terms(question), _EXAMPLE_QUESTION) for question in questions]
    fields += [
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
    if access is None:
        return table
    from agent_core.governance.catalog_access import shows_row_data, visible_column

    view = access.view(table.source, table.schema_name, table.name)
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
