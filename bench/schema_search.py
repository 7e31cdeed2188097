"""Schema catalog benchmark: refresh time of a 500-table PostgreSQL warehouse, and search latency.

Builds the generated warehouse of the tests (`tests/schema_catalog_warehouse.py`: 508 tables
over 25 domains, comments in English and Chinese) in the local PostgreSQL, then:

- refresh: reading the catalog through the read-only role and storing it (SQLite service
  database), once with engine statistics (analyzed tables: three catalog queries in all) and
  once without (never analyzed: small tables are counted and their text columns' distinct
  values read, two statements per table);
- index: building the BM25 index from the stored catalog;
- search: latency of `SchemaSearch.search` per question (the test questions, repeated),
  including the catalog-version check against the database, p50 / p95 / max, and whether the
  expected table was in the top 3.

    .venv/bin/python bench/schema_search.py [--filler 500] [--rounds 50]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent_core.catalog.refresh import refresh_catalog  # noqa: E402
from agent_core.catalog.search import SchemaIndex, SchemaSearch  # noqa: E402
from agent_core.catalog.store import CatalogStore, create_catalog_tables  # noqa: E402
from agent_core.data.source_config import DataSourceConfig  # noqa: E402
from agent_core.store.db import create_engine, session_factory  # noqa: E402
from tests.schema_catalog_warehouse import QUESTIONS, generated_tables, warehouse  # noqa: E402


async def measure(source: DataSourceConfig, database: Path, rounds: int, label: str) -> None:
    engine = create_engine(f"sqlite:///{database}")
    await create_catalog_tables(engine)
    sessions = session_factory(engine)
    started = time.perf_counter()
    [outcome] = await refresh_catalog({"dwh": source}, sessions)
    total = time.perf_counter() - started
    print(
        f"refresh ({label}): {outcome.table_count} tables, read {outcome.duration_ms / 1000:.2f} s, "
        f"read + store {total:.2f} s"
    )
    tables = await CatalogStore(sessions).load()
    started = time.perf_counter()
    SchemaIndex(tables, [], [])
    print(f"index build: {(time.perf_counter() - started) * 1000:.1f} ms for {len(tables)} tables")
    search = SchemaSearch(sessions, {"dwh": source})
    await search.search("warm up", ["dwh"], 3)
    latencies: list[float] = []
    found = 0
    for _ in range(rounds):
        for question, table in QUESTIONS:
            started = time.perf_counter()
            result = await search.search(question, ["dwh"], 3)
            latencies.append((time.perf_counter() - started) * 1000)
            found += any(hit.name.endswith(f".{table}") for hit in result.tables)
    latencies.sort()
    p95 = latencies[int(len(latencies) * 0.95) - 1]
    print(
        f"search ({len(latencies)} searches): p50 {statistics.median(latencies):.2f} ms, p95 {p95:.2f} ms, "
        f"max {latencies[-1]:.2f} ms; expected table in top 3: {found}/{len(latencies)}"
    )
    await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--filler", type=int, default=500, help="generated tables besides the 8 targets")
    parser.add_argument("--rounds", type=int, default=50, help="times each question is searched")
    args = parser.parse_args()
    tables = generated_tables(args.filler)
    with tempfile.TemporaryDirectory() as tmp:
        for analyze in (True, False):
            label = "analyzed" if analyze else "never analyzed"
            with warehouse(tables, analyze=analyze) as wh:
                source = DataSourceConfig(name="dwh", url=wh.url)
                asyncio.run(measure(source, Path(tmp) / f"catalog-{analyze}.db", args.rounds, label))


if __name__ == "__main__":
    main()
