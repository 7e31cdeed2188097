"""The catalog's tables in the service database (migration ``0003`` creates them).

Rows are keyed by source and a per-refresh table number rather than by generated ids, so a
refresh writes a whole source in two bulk inserts without reading ids back.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, Column, Text, false
from sqlmodel import Field, SQLModel

from agent_core.store.types import utc_column


class CatalogSourceRow(SQLModel, table=True):
    """The state of one source's catalog: when it was last read, and the last failure."""

    __tablename__ = "catalog_sources"

    source: str = Field(primary_key=True, max_length=64)
    kind: str = Field(max_length=16)
    refreshed_at: datetime | None = Field(default=None, sa_column=utc_column(nullable=True))
    attempted_at: datetime = Field(sa_column=utc_column())
    table_count: int = 0
    duration_ms: float = 0.0
    error: str | None = Field(default=None, sa_column=Column(Text, nullable=True))  # last attempt's


class CatalogTableRow(SQLModel, table=True):
    __tablename__ = "catalog_tables"

    source: str = Field(primary_key=True, max_length=64)
    table_no: int = Field(primary_key=True)
    schema_name: str | None = Field(default=None, max_length=255)
    name: str = Field(max_length=255)
    kind: str = Field(max_length=8)  # table or view
    comment: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    row_count: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    row_count_estimated: bool = False


class CatalogColumnRow(SQLModel, table=True):
    __tablename__ = "catalog_columns"

    source: str = Field(primary_key=True, max_length=64)
    table_no: int = Field(primary_key=True)
    position: int = Field(primary_key=True)
    name: str = Field(max_length=255)
    type: str = Field(sa_column=Column(Text, nullable=False))
    comment: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    sample_values: str | None = Field(default=None, sa_column=Column(Text, nullable=True))  # JSON list
    # Declared keys (migration 0008): part of the primary key; the foreign key's target as JSON.
    primary_key: bool = Field(default=False, sa_column=Column(Boolean, nullable=False, server_default=false()))
    foreign_key: str | None = Field(default=None, sa_column=Column(Text, nullable=True))


CATALOG_TABLES = (CatalogSourceRow, CatalogTableRow, CatalogColumnRow)
