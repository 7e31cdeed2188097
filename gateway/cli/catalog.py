"""`ba-agent catalog refresh|search`: the schema catalog behind `search_schema`, from a terminal.

``refresh`` re-reads the configured sources' tables and columns now (the service does it at
start-up and every ``BA_CATALOG_REFRESH_HOURS``); ``search`` shows what `search_schema` would
return for a question, over every source, so operators can check comments and examples work.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from gateway.cli.startup_checks import StartupError, verify_start_up
from gateway.config import Settings, load_settings

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import async_sessionmaker
    from sqlmodel.ext.asyncio.session import AsyncSession

    from agent_core.catalog.search import SchemaSearchResult


def register(commands: argparse._SubParsersAction) -> None:
    catalog = commands.add_parser("catalog", help="the data sources' schema catalog (search_schema)")
    catalog_commands = catalog.add_subparsers(dest="catalog_command", required=True)
    refresh = catalog_commands.add_parser("refresh", help="re-read the data sources' tables and columns now")
    refresh.add_argument("--source", action="append", help="only this source (repeatable; default: all)")
    refresh.set_defaults(func=_refresh)
    search = catalog_commands.add_parser("search", help="the tables search_schema finds for a question")
    search.add_argument("question")
    search.add_argument("--limit", type=int, default=5, help="how many tables (default 5)")
    search.set_defaults(func=_search)


def _refresh(args: argparse.Namespace) -> int:
    settings = _settings_with_sources()
    unknown = sorted(set(args.source or ()) - set(settings.datasources))
    if unknown:
        print(f"ba-agent: no data source {', '.join(map(repr, unknown))} in BA_DATASOURCES", file=sys.stderr)
        return 2
    return asyncio.run(_run_refresh(settings, args.source))


async def _run_refresh(settings: Settings, sources: list[str] | None) -> int:
    from agent_core.catalog.refresh import refresh_catalog

    async with _sessions(settings) as sessions:
        outcomes = await refresh_catalog(settings.datasources, sessions, sources=sources)
    for outcome in outcomes:
        if outcome.error:
            print(f"{outcome.source}: not refreshed: {outcome.error}")
        else:
            print(f"{outcome.source}: {outcome.table_count} tables in {outcome.duration_ms / 1000:.1f} s")
    return 1 if any(outcome.error for outcome in outcomes) else 0


def _search(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= 50:
        print("ba-agent: --limit must be between 1 and 50", file=sys.stderr)
        return 2
    settings = _settings_with_sources()
    return asyncio.run(_run_search(settings, args.question, args.limit))


async def _run_search(settings: Settings, question: str, limit: int) -> int:
    from agent_core.catalog.service import schema_search

    async with _sessions(settings) as sessions:
        # The examples file was checked at start-up (verify_examples_file).
        result = await schema_search(settings, sessions).search(question, list(settings.datasources), limit)
    print(_render(result))
    return 0


def _render(result: SchemaSearchResult) -> str:
    lines: list[str] = []
    for table in result.tables:
        rows = "" if table.row_count is None else f"{'~' if table.row_count_estimated else ''}{table.row_count:,} rows"
        lines.append(f"{table.score:6.2f}  {table.source}:{table.name}  {rows}  {table.comment or ''}".rstrip())
        for column in table.columns:
            values = f"  [{', '.join(column.values)}]" if column.values else ""
            comment = f"  -- {column.comment}" if column.comment else ""
            lines.append(f"          {column.name} {column.type}{values}{comment}")
        if table.more_columns:
            lines.append(f"          … {table.more_columns} more columns")
        for join in table.joins:
            lines.append(f"          joins {join.table} on {join.on}{'' if join.declared else '  (inferred)'}")
    if not result.tables:
        lines.append("no matching tables")
    for group in result.groups:
        lines.append(f"together: {', '.join(group.tables)}")
        lines += [f"          {condition}" for condition in group.joins]
    for example in result.examples:
        lines.append(f"example ({example.source or 'demo/uploads'}, {example.score:.2f}): {example.question}")
        lines += [f"          {line}" for line in example.sql.strip().splitlines()]
    for metric in result.metrics:
        lines.append(f"metric ({metric.source}, {metric.score:.2f}): {metric.name}: {metric.description or ''}".rstrip())
    lines += [f"note: {note}" for note in result.notes]
    return "\n".join(lines)


def _settings_with_sources() -> Settings:
    """The settings, after the start-up checks every command runs (read-only sources, valid
    metric definitions)."""
    settings = load_settings()
    logging.basicConfig(level=logging.WARNING)
    if not settings.datasources:
        raise StartupError("no data sources are configured (set BA_DATASOURCES)")
    verify_start_up(settings)
    return settings


@asynccontextmanager
async def _sessions(settings: Settings) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """The migrated service database, for one command."""
    from agent_core.store.db import create_engine, session_factory
    from gateway.migrate_check import is_current

    if not await asyncio.to_thread(is_current, settings.effective_database_url):
        from gateway.migrate import upgrade

        await asyncio.to_thread(upgrade, settings.effective_database_url)
    engine = create_engine(settings.effective_database_url)
    try:
        yield session_factory(engine)
    finally:
        await engine.dispose()
