"""What an audience may see of the schema catalog, which `search_schema` shows.

The catalog stores, beside names and types, the distinct values of low-cardinality columns
and each table's row count: data, read once by the refresh with the source's own rights. So
the access policy applies to it as to a query: a column the audience may not read is left
out with its values, and a table whose rows are filtered for the audience shows neither
sample values nor its row count (both may reveal rows outside the filter). The same decision
holds for SQL over the database's own catalog: a filtered audience reads no row counts or table
sizes there (``agent_core.governance.rewrite.refuse_row_counts``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from agent_core.governance.audience import (
    Audience,
    GroupAudience,
    Identity,
    TableView,
    audience_of,
    intersect_views,
    table_view,
)
from agent_core.governance.policy import DEFAULT_GROUP, AccessPolicy
from agent_core.governance.rewrite import TableKey, fold


@dataclass(frozen=True)
class CatalogAccess:
    """The views of the protected tables one audience may read, by source."""

    views: dict[str, dict[TableKey, TableView]]

    @classmethod
    def of(cls, policy: AccessPolicy, identity: Identity) -> CatalogAccess:
        """What the audience of ``identity`` may see."""
        return cls.for_audience(policy, audience_of(policy, identity))

    @classmethod
    def everyone(cls, policy: AccessPolicy) -> CatalogAccess:
        """What every audience may see: the ``default`` group's view, since everyone is in it
        and more groups (or a joint audience of two such) only ever see more."""
        return cls.for_audience(policy, GroupAudience(frozenset({DEFAULT_GROUP}), "everyone's access"))

    @classmethod
    def for_audience(cls, policy: AccessPolicy, audience: Audience) -> CatalogAccess:
        return cls(
            {
                source: {
                    TableKey.parse(name): view
                    for name, table in governed.tables.items()
                    if (view := table_view(name, table, audience)).restricts
                }
                for source, governed in policy.sources.items()
            }
        )

    def view(self, source: str, schema: str | None, table: str) -> TableView | None:
        """What the audience may read of one catalog table; None: all of it.

        A policy name without a schema matches the table in every schema. Where several
        names match (``orders`` and ``sales.orders``), each one's limits apply.
        """
        name, schema_name = fold(table), fold(schema) if schema else None
        matches = [
            view
            for key, view in self.views.get(source, {}).items()
            if key.name == name and (key.schema is None or schema_name is None or key.schema == schema_name)
        ]
        return _all_of(matches)


def _all_of(views: Iterable[TableView]) -> TableView | None:
    combined: TableView | None = None
    for view in views:
        combined = view if combined is None else intersect_views(combined, view)
    return combined


def visible_column(view: TableView | None, column: str) -> bool:
    return view is None or fold(column) not in view.hidden_columns


def shows_row_data(view: TableView | None) -> bool:
    """True if sample values and counts of the table's rows may be shown to the audience."""
    return view is None or view.row_filters is None
