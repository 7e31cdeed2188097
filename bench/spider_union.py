"""SpiderUnion (open-domain table retrieval, the Murre setting) as the catalog sees it.

Every table of the 166 Spider databases in one warehouse, each database a schema named by its
``db_id``, tables and columns under their original identifiers, the natural-language names as
comments where they differ from the identifier, foreign keys declared or not. Two ways to build
it, searched by the same product code:

- :func:`catalog_tables`: the `CatalogTable` models a refresh would read (fast, in process);
- :func:`create_in_postgres`: the real PostgreSQL schemas and a SELECT-only role, for
  `refresh_catalog` to read, as the independent check does.

Metrics as the anchor defines them: R@k is the mean share of a question's gold tables in the
top k, CR@k the share of questions with all their gold tables in the top k.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_core.catalog.models import CatalogColumn, CatalogTable, ForeignKey

DATA = Path("/work/shared/datasets/spider-union-dev")
_TYPES = {"number": "numeric", "text": "text", "time": "timestamp", "boolean": "boolean", "others": "text"}
KS = (1, 3, 5, 10, 15)


@dataclass(frozen=True)
class Question:
    text: str
    gold: frozenset[str]  # schema.table, original identifiers


def load(data: Path = DATA) -> tuple[list[dict[str, Any]], list[Question]]:
    databases = json.loads((data / "tables.json").read_text())
    by_id = {db["db_id"]: db for db in databases}
    questions = []
    for item in json.loads((data / "questions.json").read_text()):
        gold = set()
        for relation in item["rel_schema"]:
            db_id, rest = relation.split(".", 1)
            natural = rest.split("(", 1)[0]
            db = by_id[db_id]
            gold.add(f"{db_id}.{db['table_names_original'][db['table_names'].index(natural)]}")
        questions.append(Question(item["utterance"], frozenset(gold)))
    return databases, questions


def _comment(natural: str, identifier: str) -> str | None:
    return natural if natural != identifier else None


def catalog_tables(databases: Sequence[dict[str, Any]], foreign_keys: bool, source: str = "dwh") -> list[CatalogTable]:
    """The tables a refresh of the PostgreSQL build reads (empty tables: no values, no rows)."""
    tables = []
    for db in databases:
        columns = db["column_names_original"]
        refs: dict[int, ForeignKey] = {}
        if foreign_keys:
            for child, parent in db["foreign_keys"]:
                target_table = db["table_names_original"][columns[parent][0]]
                refs[child] = ForeignKey(schema_name=db["db_id"], table=target_table, column=columns[parent][1])
        for number, (name, natural) in enumerate(zip(db["table_names_original"], db["table_names"], strict=True)):
            tables.append(
                CatalogTable(
                    source=source,
                    schema_name=db["db_id"],
                    name=name,
                    kind="table",
                    comment=_comment(natural, name),
                    row_count=0,
                    columns=[
                        CatalogColumn(
                            name=column,
                            type=_TYPES[db["column_types"][i]],
                            comment=_comment(db["column_names"][i][1], column),
                            primary_key=foreign_keys and i in _primary_keys(db),
                            references=refs.get(i),
                        )
                        for i, (owner, column) in enumerate(columns)
                        if owner == number
                    ],
                )
            )
    return tables


def _primary_keys(db: dict[str, Any]) -> set[int]:
    keys: set[int] = set()
    for key in db["primary_keys"]:
        keys.update(key if isinstance(key, list) else [key])
    return keys


@contextmanager
def create_in_postgres(
    databases: Sequence[dict[str, Any]], foreign_keys: bool, admin_url: str, tag: str, one_row: bool = False
) -> Iterator[str]:
    """The warehouse in PostgreSQL (one schema per database, prefixed by ``tag``), readable by a
    new SELECT-only role; yields that role's URL and drops everything afterwards. ``one_row``:
    each table gets a row (so a refresh must count it and read its values)."""
    import psycopg
    from psycopg import sql

    role = f"{tag}_ro"
    schemas = [f"{tag}_{db['db_id']}" for db in databases]
    with psycopg.connect(admin_url, autocommit=True) as conn, conn.cursor() as cursor:
        for schema, db in zip(schemas, databases, strict=True):
            with conn.transaction():  # one per database: 10,000 tables' locks do not fit in one
                cursor.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
                columns = db["column_names_original"]
                keys = _primary_keys(db)
                for number, (name, natural) in enumerate(zip(db["table_names_original"], db["table_names"], strict=True)):
                    relation = sql.Identifier(schema, name)
                    mine = [i for i, (owner, _) in enumerate(columns) if owner == number]
                    seen: set[str] = set()
                    parts = []
                    for i in mine:
                        if columns[i][1].lower() in seen:  # Spider has a few case-duplicate columns
                            continue
                        seen.add(columns[i][1].lower())
                        kind = sql.SQL(_TYPES[db["column_types"][i]])
                        parts.append(sql.SQL("{} {}").format(sql.Identifier(columns[i][1]), kind))
                    cursor.execute(sql.SQL("CREATE TABLE {} ({})").format(relation, sql.SQL(", ").join(parts)))
                    if one_row:
                        cursor.execute(sql.SQL("INSERT INTO {} DEFAULT VALUES").format(relation))
                    if comment := _comment(natural, name):
                        cursor.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(relation, sql.Literal(comment)))
                    for i in mine:
                        if comment := _comment(db["column_names"][i][1], columns[i][1]):
                            target = sql.Identifier(schema, name, columns[i][1])
                            cursor.execute(sql.SQL("COMMENT ON COLUMN {} IS {}").format(target, sql.Literal(comment)))
                    unique = [columns[i][1] for i in mine if i in keys]
                    if foreign_keys and unique:  # keys declared only with the foreign keys they serve
                        with conn.transaction():
                            cursor.execute(
                                sql.SQL("ALTER TABLE {} ADD PRIMARY KEY ({})").format(
                                    relation, sql.SQL(", ").join(map(sql.Identifier, unique))
                                )
                            )
                if foreign_keys:
                    for child, parent in db["foreign_keys"]:
                        try:  # Spider declares a few keys PostgreSQL refuses (no unique target, type clash)
                            with conn.transaction():
                                cursor.execute(
                                    sql.SQL("ALTER TABLE {} ADD FOREIGN KEY ({}) REFERENCES {} ({})").format(
                                        sql.Identifier(schema, db["table_names_original"][columns[child][0]]),
                                        sql.Identifier(columns[child][1]),
                                        sql.Identifier(schema, db["table_names_original"][columns[parent][0]]),
                                        sql.Identifier(columns[parent][1]),
                                    )
                                )
                        except psycopg.Error:
                            continue
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        for schema in schemas:
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), sql.Identifier(role)))
            conn.execute(
                sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(sql.Identifier(schema), sql.Identifier(role))
            )
    try:
        yield f"postgresql://{role}@127.0.0.1:5432/{admin_url.rsplit('/', 1)[1]}"
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            for schema in schemas:
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def scores(rankings: Sequence[Sequence[str]], questions: Sequence[Question]) -> dict[str, dict[int, tuple[float, float]]]:
    """By group ('all', '1 table', '2 tables', ...): k → (R@k, CR@k)."""
    groups: dict[str, list[tuple[Sequence[str], Question]]] = {"all": []}
    for ranking, question in zip(rankings, questions, strict=True):
        groups["all"].append((ranking, question))
        size = len(question.gold)
        groups.setdefault(f"{size} table{'s' if size > 1 else ''}", []).append((ranking, question))
    out: dict[str, dict[int, tuple[float, float]]] = {}
    for name in sorted(groups, key=lambda g: (g != "all", g)):
        pairs = groups[name]
        out[name] = {}
        for k in KS:
            shares = [len(q.gold & set(r[:k])) / len(q.gold) for r, q in pairs]
            out[name][k] = (sum(shares) / len(shares), sum(s == 1.0 for s in shares) / len(shares))
    return out


def count(questions: Sequence[Question]) -> dict[str, int]:
    sizes: dict[str, int] = {"all": len(questions)}
    for q in questions:
        size = len(q.gold)
        key = f"{size} table{'s' if size > 1 else ''}"
        sizes[key] = sizes.get(key, 0) + 1
    return sizes
