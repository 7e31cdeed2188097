"""search_schema benchmark: retrieval quality on SpiderUnion beside plain BM25, and latencies.

1. Quality on the dev split (`bench/spider_union.py`: 658 questions, 876 tables of 166
   databases in one catalog; the question never names its database). R@k and CR@k for
   k = 1, 3, 5, 10, 15, overall and by number of gold tables, without and with foreign keys
   declared, for `search_schema` (`SchemaIndex.search`, the code the tool runs) and for plain
   Okapi BM25 over the same documents (table name, column names and comments, lower-cased
   words; no stemming, fields, joins or schema context). ``--build postgres`` (the default)
   creates the warehouse in the local PostgreSQL with a SELECT-only role and reads it with
   `refresh_catalog`, as the independent check does; ``--build memory`` builds the catalog
   models directly (same search code, seconds instead of a minute).
2. Latency: a search inside the agent (`SchemaSearch.search`: catalog-version check against
   the service database, then the index) at 1,000 and 10,000 tables (copies of the SpiderUnion
   schemas), index build time; a refresh of 10,000 tables on PostgreSQL (read + store);
   the CLI `ba-agent catalog search` end to end.
3. Second line, for continuity: the test suite's generated 508-table warehouse, expected table
   in the top 3.

    nice -n 10 .venv/bin/python bench/schema_search.py [--build postgres|memory] [--skip-latency]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from spider_union import KS, Question, catalog_tables, count, create_in_postgres, load, scores  # noqa: E402

from agent_core.catalog.models import CatalogTable  # noqa: E402
from agent_core.catalog.refresh import refresh_catalog  # noqa: E402
from agent_core.catalog.search import SchemaIndex, SchemaSearch  # noqa: E402
from agent_core.catalog.store import CatalogStore, create_catalog_tables  # noqa: E402
from agent_core.data.source_config import DataSourceConfig  # noqa: E402
from agent_core.store.db import create_engine, session_factory  # noqa: E402

ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"


# -- plain BM25 ---------------------------------------------------------------------------


def _words(text: str | None) -> list[str]:
    return re.findall(r"[a-z0-9]+", (text or "").lower())


def plain_bm25(tables: Sequence[CatalogTable], questions: Sequence[Question], limit: int = 15) -> list[list[str]]:
    """Okapi BM25 (k1 1.2, b 0.75) over each table's name, column names and comments."""
    documents = []
    for table in tables:
        words = _words(table.name.replace("_", " ")) + _words(table.comment)
        for column in table.columns:
            words += _words(column.name.replace("_", " ")) + _words(column.comment)
        documents.append(Counter(words))
    lengths = [sum(d.values()) for d in documents]
    average = sum(lengths) / len(lengths)
    frequency: Counter[str] = Counter(word for d in documents for word in d)
    rankings = []
    for question in questions:
        query = set(_words(question.text))
        ranked: list[tuple[float, int]] = []
        for number, document in enumerate(documents):
            score = 0.0
            for word in query & document.keys():
                idf = math.log(1 + (len(documents) - frequency[word] + 0.5) / (frequency[word] + 0.5))
                tf = document[word]
                score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * lengths[number] / average))
            if score > 0:
                ranked.append((-score, number))
        rankings.append([tables[number].qualified_name for _, number in sorted(ranked)[:limit]])
    return rankings


# -- quality ------------------------------------------------------------------------------


def ours(index: SchemaIndex, questions: Sequence[Question], limit: int = 15) -> list[list[str]]:
    return [[hit.name for hit in index.search(q.text, ["dwh"], limit).tables] for q in questions]


def print_scores(label: str, rankings: list[list[str]], questions: Sequence[Question]) -> dict[str, Any]:
    table = scores(rankings, questions)
    sizes = count(questions)
    print(f"  {label}")
    print("    " + " " * 14 + "  ".join(f"R@{k:<2}  CR@{k:<2}" for k in KS))
    for group, by_k in table.items():
        cells = "  ".join(f"{r:.3f} {c:.3f}" for r, c in by_k.values())
        print(f"    {group:9s} {sizes[group]:3d}  {cells}")
    return table


def quality(databases: list[dict[str, Any]], questions: list[Question], build: str) -> None:
    print(f"SpiderUnion dev: {len(questions)} questions, {sum(len(d['table_names']) for d in databases)} tables "
          f"of {len(databases)} databases in one catalog (build: {build})")
    for foreign_keys in (False, True):
        print(f"\n{'with' if foreign_keys else 'without'} foreign keys declared")
        tables = asyncio.run(_read_catalog(databases, foreign_keys)) if build == "postgres" else catalog_tables(
            databases, foreign_keys
        )
        started = time.perf_counter()
        index = SchemaIndex(tables, [], [])
        built = time.perf_counter() - started
        started = time.perf_counter()
        mine = ours(index, questions)
        per_question = (time.perf_counter() - started) / len(questions) * 1000
        print_scores(f"search_schema (index {built * 1000:.0f} ms, {per_question:.1f} ms per question)", mine, questions)
        print_scores("plain BM25 (same documents)", plain_bm25(tables, questions), questions)


async def _read_catalog(databases: list[dict[str, Any]], foreign_keys: bool) -> list[CatalogTable]:
    """Create the warehouse in PostgreSQL, refresh the catalog through the SELECT-only role,
    load it back; schema names lose the build's unique prefix so they match the gold."""
    tag = f"su{uuid.uuid4().hex[:6]}"
    with create_in_postgres(databases, foreign_keys, ADMIN_URL, tag) as url, tempfile.TemporaryDirectory() as tmp:
        engine = create_engine(f"sqlite:///{tmp}/catalog.db")
        await create_catalog_tables(engine)
        sessions = session_factory(engine)
        started = time.perf_counter()
        [outcome] = await refresh_catalog({"dwh": DataSourceConfig(name="dwh", url=url)}, sessions)
        print(f"  refresh: {outcome.table_count} tables in {time.perf_counter() - started:.1f} s ({outcome.error or 'ok'})")
        tables = await CatalogStore(sessions).load()
        await engine.dispose()
    prefix = f"{tag}_"
    renamed = []
    for table in tables:
        columns = []
        for column in table.columns:
            ref = column.references
            if ref is not None and ref.schema_name:
                target = ref.model_copy(update={"schema_name": ref.schema_name[len(prefix) :]})
                column = column.model_copy(update={"references": target})
            columns.append(column)
        renamed.append(table.model_copy(update={"schema_name": (table.schema_name or "")[len(prefix) :], "columns": columns}))
    return renamed


# -- latency ------------------------------------------------------------------------------


def copies(databases: list[dict[str, Any]], tables: int) -> list[dict[str, Any]]:
    """Copies of the SpiderUnion databases (renamed schemas) until there are ``tables`` tables."""
    out: list[dict[str, Any]] = []
    total = copy = 0
    while total < tables:
        for db in databases:
            if total >= tables:
                break
            out.append({**db, "db_id": f"{db['db_id']}_c{copy}"})
            total += len(db["table_names"])
        copy += 1
    return out


def percentiles(values: list[float]) -> str:
    values = sorted(values)
    p95 = values[max(0, int(len(values) * 0.95) - 1)]
    return f"p50 {statistics.median(values):.1f} ms, p95 {p95:.1f} ms, max {values[-1]:.1f} ms"


async def agent_latency(databases: list[dict[str, Any]], questions: list[Question], size: int) -> None:
    """SchemaSearch.search over a stored catalog of ``size`` tables (SQLite service database)."""
    tables = catalog_tables(copies(databases, size), False)
    with tempfile.TemporaryDirectory() as tmp:
        engine = create_engine(f"sqlite:///{tmp}/catalog.db")
        await create_catalog_tables(engine)
        sessions = session_factory(engine)
        from agent_core.catalog.models import SourceCatalog

        await CatalogStore(sessions).save(SourceCatalog(source="dwh", kind="postgresql", tables=tables, duration_ms=0))
        source = DataSourceConfig(name="dwh", url="postgresql://unused@127.0.0.1:1/none")
        search = SchemaSearch(sessions, {"dwh": source})
        started = time.perf_counter()
        await search.search("warm up", ["dwh"], 5)
        first = time.perf_counter() - started
        latencies = []
        for question in questions[::3]:
            started = time.perf_counter()
            await search.search(question.text, ["dwh"], 15)
            latencies.append((time.perf_counter() - started) * 1000)
        print(
            f"  in the agent, {len(tables):,} tables: search {percentiles(latencies)} "
            f"({len(latencies)} questions); first search after a refresh (load + index) {first:.2f} s"
        )
        await engine.dispose()


async def refresh_latency(databases: list[dict[str, Any]], size: int) -> None:
    tag = f"sl{uuid.uuid4().hex[:6]}"
    many = copies(databases, size)
    started = time.perf_counter()
    with create_in_postgres(many, False, ADMIN_URL, tag, one_row=True) as url, tempfile.TemporaryDirectory() as tmp:
        created = time.perf_counter() - started
        engine = create_engine(f"sqlite:///{tmp}/catalog.db")
        await create_catalog_tables(engine)
        started = time.perf_counter()
        [outcome] = await refresh_catalog({"dwh": DataSourceConfig(name="dwh", url=url)}, session_factory(engine))
        total = time.perf_counter() - started
        await engine.dispose()
        print(
            f"  refresh on PostgreSQL, {outcome.table_count:,} tables of one row each (never analyzed: counted and "
            f"sampled): read {outcome.duration_ms / 1000:.1f} s, "
            f"read + store {total:.1f} s (warehouse created in {created:.0f} s)"
        )


def cli_latency(databases: list[dict[str, Any]], questions: list[Question]) -> None:
    """`ba-agent catalog search --limit 15` per question, end to end, on the 876-table catalog."""
    tag = f"sc{uuid.uuid4().hex[:6]}"
    with create_in_postgres(databases, False, ADMIN_URL, tag) as url, tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "BA_DATASOURCES": json.dumps({"dwh": url}),
            "DATABASE_URL": f"sqlite:///{tmp}/service.db",
            "BA_DATA_DIR": tmp,
        }
        command = [str(ROOT / ".venv/bin/ba-agent"), "catalog"]
        subprocess.run([*command, "refresh"], env=env, check=True, capture_output=True, cwd=tmp)
        latencies, cpu = [], []
        for question in questions[::66]:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            search = [*command, "search", question.text, "--limit", "15"]
            subprocess.run(search, env=env, check=True, capture_output=True, cwd=tmp)
            latencies.append((time.perf_counter() - started) * 1000)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000)
        print(
            f"  CLI ba-agent catalog search --limit 15, 876 tables: wall {percentiles(latencies)}; "
            f"CPU {percentiles(cpu)} ({len(latencies)} runs; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
        )


def own_generator() -> None:
    """The generated warehouse of the tests: expected table in the top 3 (in process)."""
    from tests.schema_catalog_warehouse import QUESTIONS, Table, generated_tables

    def model(table: Table) -> CatalogTable:
        from agent_core.catalog.models import CatalogColumn

        return CatalogTable(
            source="dwh",
            schema_name="wh",
            name=table.name,
            kind="table",
            comment=table.comment,
            columns=[CatalogColumn(name=n, type=t, comment=c) for n, t, c in table.columns],
        )

    index = SchemaIndex([model(t) for t in generated_tables(500)], [], [])
    found = sum(any(h.name == f"wh.{table}" for h in index.search(q, ["dwh"], 3).tables) for q, table in QUESTIONS)
    print(f"second line, own generator (508 tables, no sample values): expected table in the top 3: {found}/{len(QUESTIONS)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", choices=["postgres", "memory"], default="postgres", help="how SpiderUnion is built")
    parser.add_argument("--skip-latency", action="store_true", help="quality only")
    parser.add_argument("--skip-quality", action="store_true", help="latency only")
    args = parser.parse_args()
    databases, questions = load()
    if not args.skip_quality:
        quality(databases, questions, args.build)
    if not args.skip_latency:
        print("\nlatency")
        for size in (1_000, 10_000):
            asyncio.run(agent_latency(databases, questions, size))
        asyncio.run(refresh_latency(databases, 10_000))
        cli_latency(databases, questions)
    print()
    own_generator()


if __name__ == "__main__":
    main()
