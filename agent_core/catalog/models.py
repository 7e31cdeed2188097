"""What a catalog refresh reads from a source: its tables and their columns."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class ForeignKey(BaseModel):
    """The column a foreign key points to (declared in the source)."""

    schema_name: str | None
    table: str
    column: str


class CatalogColumn(BaseModel):
    name: str
    type: str
    comment: str | None = None
    # The distinct values of a low-cardinality text column (at most MAX_SAMPLE_VALUES).
    sample_values: list[str] = Field(default_factory=list)
    primary_key: bool = False  # part of the table's declared primary key
    references: ForeignKey | None = None  # a declared foreign key


class CatalogTable(BaseModel):
    source: str
    schema_name: str | None
    name: str
    kind: Literal["table", "view"]
    comment: str | None = None
    row_count: int | None = None
    row_count_estimated: bool = False  # from the engine's statistics, not counted
    columns: list[CatalogColumn]

    @property
    def qualified_name(self) -> str:
        """The name as written in SQL (schema.table, or table when there is no schema)."""
        return f"{self.schema_name}.{self.name}" if self.schema_name else self.name


class SourceCatalog(BaseModel):
    """Everything one refresh read from one source."""

    source: str
    kind: str
    tables: list[CatalogTable]
    duration_ms: float
