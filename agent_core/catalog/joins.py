"""Which catalog tables join, and on which columns: declared foreign keys, and joins inferred
from names where a warehouse declares none (most do not).

Inferred joins stay inside one source and schema and follow the naming habits of warehouses:

- the same key-like column in two tables (``Has_Pet.StuID`` = ``Student.StuID``,
  ``concert.Stadium_ID`` = ``stadium.Stadium_ID``);
- a column named after another table, with or without a key suffix, pointing at that table's
  key (``orders.customer_id`` → ``customers.id``, ``countrylanguage.CountryCode`` →
  ``country.Code``, ``model_list.Maker`` → ``car_makers.Id``);
- text columns whose sampled values overlap (a refresh keeps the values of low-cardinality
  columns), when both look like keys.

A wrong inferred edge costs little: search follows an edge only to bring in a table that the
question's own words point at, or that links two such tables.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agent_core.catalog.models import CatalogTable
from agent_core.catalog.text import identifier_parts, stem

# Stemmed as column names are (``code`` → ``cod``).
KEY_PARTS = frozenset(stem(word) for word in ("id", "code", "key", "no", "num", "number", "pk", "fk", "uid", "sk", "cd"))
_BARE_KEYS = frozenset((stem(word),) for word in ("id", "key", "code"))
# A column shared by this many tables of one schema is a dimension everyone carries
# (``tenant_id``), not a join that says anything.
MAX_SHARED = 12


@dataclass(frozen=True)
class Join:
    """``table``.``column`` = ``other``.``other_column`` (table numbers of the index)."""

    table: int
    column: str
    other: int
    other_column: str
    declared: bool


@functools.lru_cache(maxsize=1 << 16)
def _parts(name: str) -> tuple[str, ...]:
    return tuple(stem(part) for part in identifier_parts(name))


def _key_like(parts: tuple[str, ...]) -> bool:
    return bool(parts) and parts[-1] in KEY_PARTS


@functools.lru_cache(maxsize=1 << 16)
def _normal(name: str) -> str:
    return "".join(identifier_parts(name))


def _table_keys(table: CatalogTable) -> list[str]:
    """The columns another table's reference most likely points at: the declared primary key,
    else ``id``/``<table>_id``-like columns, else a first key-like column."""
    declared = [c.name for c in table.columns if c.primary_key]
    if declared:
        return declared
    own = _parts(table.name)
    keys = []
    for column in table.columns:
        parts = _parts(column.name)
        if parts in _BARE_KEYS or (_key_like(parts) and parts[:-1] and parts[:-1] == own[-len(parts[:-1]) :]):
            keys.append(column.name)
    if not keys and table.columns and _key_like(_parts(table.columns[0].name)):
        keys.append(table.columns[0].name)
    return keys


def find_joins(tables: Sequence[CatalogTable]) -> list[Join]:
    """Every join edge, once per direction (a → b and b → a)."""
    edges: dict[tuple[int, int], Join] = {}

    def add(join: Join) -> None:
        key = (join.table, join.other)
        current = edges.get(key)
        if current is None or (join.declared and not current.declared):
            edges[key] = join
            edges[(join.other, join.table)] = Join(join.other, join.other_column, join.table, join.column, join.declared)

    by_schema: dict[tuple[str, str | None], list[int]] = {}
    by_name: dict[tuple[str, str | None, str], int] = {}
    for number, table in enumerate(tables):
        by_schema.setdefault((table.source, table.schema_name), []).append(number)
        by_name[(table.source, table.schema_name, table.name)] = number
    for number, table in enumerate(tables):
        for column in table.columns:
            ref = column.references
            if ref is None:
                continue
            other = by_name.get((table.source, ref.schema_name, ref.table))
            if other is not None and other != number:
                add(Join(number, column.name, other, ref.column, True))
    for members in by_schema.values():
        _infer(tables, members, add)
    return list(edges.values())


def _infer(tables: Sequence[CatalogTable], members: list[int], add: Callable[[Join], None]) -> None:
    # 1. The same key-like column name in a few tables of the schema.
    shared: dict[str, list[tuple[int, str]]] = {}
    for number in members:
        for column in tables[number].columns:
            if _key_like(_parts(column.name)) or column.primary_key:
                shared.setdefault(_normal(column.name), []).append((number, column.name))
    for holders in shared.values():
        owners = {number for number, _ in holders}
        if 2 <= len(owners) <= MAX_SHARED:
            for i, (a, a_column) in enumerate(holders):
                for b, b_column in holders[i + 1 :]:
                    if a != b:
                        add(_inferred(a, a_column, b, b_column))
    # 2. A column named after another table (whole name, or its last word): that table's key.
    named: dict[str, list[int]] = {}
    for number in members:
        parts = _parts(tables[number].name)
        if parts:
            named.setdefault("".join(parts), []).append(number)
            named.setdefault(parts[-1], []).append(number)
    keys = {number: _table_keys(tables[number]) for number in members}
    for number in members:
        for column in tables[number].columns:
            parts = _parts(column.name)
            stem_parts = parts[:-1] if _key_like(parts) and len(parts) > 1 else parts
            if not stem_parts:
                continue
            targets = named.get("".join(stem_parts), []) or named.get(stem_parts[-1], [])
            for other in targets[:MAX_SHARED]:
                if other == number or not keys[other]:
                    continue
                add(_inferred(number, column.name, other, _best_key(keys[other], parts)))
    # 3. Low-cardinality key-like text columns whose sampled values overlap.
    valued = [
        (number, column.name, set(column.sample_values))
        for number in members
        for column in tables[number].columns
        if len(column.sample_values) >= 3 and _key_like(_parts(column.name))
    ]
    for i, (a, a_column, a_values) in enumerate(valued):
        for b, b_column, b_values in valued[i + 1 :]:
            if a != b and len(a_values & b_values) >= 0.8 * min(len(a_values), len(b_values)):
                add(_inferred(a, a_column, b, b_column))


def _inferred(a: int, a_column: str, b: int, b_column: str) -> Join:
    return Join(a, a_column, b, b_column, False)


def _best_key(keys: list[str], parts: tuple[str, ...]) -> str:
    """Of a table's key columns, the one whose key word matches the referring column's."""
    if _key_like(parts):
        for key in keys:
            if _parts(key)[-1:] == parts[-1:]:
                return key
    return keys[0]
