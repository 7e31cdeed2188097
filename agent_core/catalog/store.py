"""Reading and writing the catalog in the service database (SQLite or PostgreSQL)."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable
from datetime import datetime

from pydantic import BaseModel
from sqlalchemy import delete, insert, text
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from sqlmodel import SQLModel, col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from agent_core.catalog.models import CatalogColumn, CatalogTable, ForeignKey, SourceCatalog
from agent_core.catalog.tables import CATALOG_TABLES, CatalogColumnRow, CatalogSourceRow, CatalogTableRow
from agent_core.messages import utcnow
from agent_core.store.db import table_of


class SourceState(BaseModel):
    """One source's catalog status (`ba-agent catalog refresh` prints these)."""

    source: str
    kind: str
    refreshed_at: datetime | None  # the last successful refresh
    attempted_at: datetime
    table_count: int
    duration_ms: float
    error: str | None  # why the last attempt failed, when it did


async def create_catalog_tables(engine: AsyncEngine) -> None:
    """Create the catalog's tables if missing: for tests and tools that run without the
    gateway's migrations (which create the same tables in revision 0003)."""
    from agent_core.catalog.learned import ExampleProposalRow  # searched beside the catalog

    tables = [table_of(model) for model in (*CATALOG_TABLES, ExampleProposalRow)]
    async with engine.begin() as conn:
        await conn.run_sync(lambda sync: SQLModel.metadata.create_all(sync, tables=tables))


class CatalogStore:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def save(self, catalog: SourceCatalog) -> None:
        """Replace one source's catalog with what a refresh read, in one transaction."""
        now = utcnow()
        tables = [
            {
                "source": catalog.source,
                "table_no": number,
                "schema_name": table.schema_name,
                "name": table.name,
                "kind": table.kind,
                "comment": table.comment,
                "row_count": table.row_count,
                "row_count_estimated": table.row_count_estimated,
            }
            for number, table in enumerate(catalog.tables)
        ]
        columns = [
            {
                "source": catalog.source,
                "table_no": number,
                "position": position,
                "name": column.name,
                "type": column.type,
                "comment": column.comment,
                "sample_values": json.dumps(column.sample_values, ensure_ascii=False) if column.sample_values else None,
                "primary_key": column.primary_key,
                "foreign_key": column.references.model_dump_json() if column.references else None,
            }
            for number, table in enumerate(catalog.tables)
            for position, column in enumerate(table.columns)
        ]
        state = CatalogSourceRow(
            source=catalog.source,
            kind=catalog.kind,
            refreshed_at=now,
            attempted_at=now,
            table_count=len(catalog.tables),
            duration_ms=catalog.duration_ms,
        )
        async with self._sessions() as session, session.begin():
            await _lock_source(session, catalog.source)
            for model in (CatalogColumnRow, CatalogTableRow, CatalogSourceRow):
                await session.exec(delete(table_of(model)).where(table_of(model).c.source == catalog.source))
            if tables:
                await session.exec(insert(table_of(CatalogTableRow)), params=tables)
            if columns:
                await session.exec(insert(table_of(CatalogColumnRow)), params=columns)
            await session.exec(insert(table_of(CatalogSourceRow)), params=[state.model_dump()])

    async def record_failure(self, source: str, kind: str, error: str) -> None:
        """Note a failed refresh; the source's last good catalog stays searchable."""
        async with self._sessions() as session, session.begin():
            await _lock_source(session, source)
            row = await session.get(CatalogSourceRow, source)
            if row is None:
                session.add(CatalogSourceRow(source=source, kind=kind, attempted_at=utcnow(), error=error))
            else:
                row.attempted_at, row.error = utcnow(), error

    async def states(self, sources: Iterable[str] | None = None) -> list[SourceState]:
        stmt = select(CatalogSourceRow).order_by(col(CatalogSourceRow.source))
        if sources is not None:
            stmt = stmt.where(col(CatalogSourceRow.source).in_(list(sources)))
        async with self._sessions() as session:
            rows = (await session.exec(stmt)).all()
        return [SourceState.model_validate(row, from_attributes=True) for row in rows]

    async def version(self) -> tuple[tuple[str, datetime | None], ...]:
        """Changes whenever any source's catalog is replaced: the search index's cache key."""
        row = CatalogSourceRow
        stmt = select(col(row.source), col(row.refreshed_at)).order_by(col(row.source))
        async with self._sessions() as session:
            return tuple((source, refreshed) for source, refreshed in (await session.exec(stmt)).all())

    async def load(self) -> list[CatalogTable]:
        """Every stored table with its columns, in source and table order."""
        # Core statements: plain rows, no ORM objects (a 10,000-table catalog has 50,000 columns).
        tables, columns_table = table_of(CatalogTableRow), table_of(CatalogColumnRow)
        table_stmt = tables.select().order_by(tables.c.source, tables.c.table_no)
        column_stmt = columns_table.select().order_by(
            columns_table.c.source, columns_table.c.table_no, columns_table.c.position
        )
        async with self._sessions() as session:
            connection = await session.connection()
            table_rows = (await connection.execute(table_stmt)).all()
            column_rows = (await connection.execute(column_stmt)).all()
        columns: dict[tuple[str, int], list[CatalogColumn]] = {}
        for row in column_rows:
            columns.setdefault((row.source, row.table_no), []).append(
                CatalogColumn(
                    name=row.name,
                    type=row.type,
                    comment=row.comment,
                    sample_values=json.loads(row.sample_values) if row.sample_values else [],
                    primary_key=row.primary_key,
                    references=ForeignKey.model_validate_json(row.foreign_key) if row.foreign_key else None,
                )
            )
        return [
            CatalogTable(
                source=row.source,
                schema_name=row.schema_name,
                name=row.name,
                kind=row.kind,
                comment=row.comment,
                row_count=row.row_count,
                row_count_estimated=row.row_count_estimated,
                columns=columns.get((row.source, row.table_no), []),
            )
            for row in table_rows
        ]


async def _lock_source(session: AsyncSession, source: str) -> None:
    """Serialize writers of one source's catalog across processes (workers refreshing at
    start-up at the same time). SQLite has one writer at a time anyway."""
    bind = session.get_bind()
    if bind.dialect.name == "postgresql":
        key = zlib.crc32(f"ba-agent catalog {source}".encode())
        connection = await session.connection()
        await connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
