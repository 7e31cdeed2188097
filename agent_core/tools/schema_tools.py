"""`search_schema`: the few tables (and verified example queries, and metrics) a question needs,
found in the catalog of the configured data sources instead of listing a whole warehouse.

Under an access policy it shows only the sources open to the conversation's audience, and of
their tables only what that audience may read (`agent_core.governance.catalog_access`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from agent_core.catalog.search import SchemaSearch
from agent_core.catalog.service import schema_search
from agent_core.config import AgentConfig
from agent_core.data.source_config import DataSourceConfig
from agent_core.governance.audience import Identity
from agent_core.governance.catalog_access import CatalogAccess
from agent_core.governance.enforce import is_source_open
from agent_core.governance.policy import AccessPolicy
from agent_core.run_context import RunContext
from agent_core.toolkit.protocol import ErrorType, Tool, ToolError
from agent_core.toolkit.queries import usable_sources

if TYPE_CHECKING:
    from agent_core.tools.deps import ToolDeps


def build(deps: ToolDeps) -> list[Tool]:
    """`search_schema` searches the sources' catalog kept in the service database: without
    either, there is nothing to search."""
    if deps.sessions is None or not deps.config.datasources:
        return []
    return [search_schema_tool(deps.config, deps.sessions)]


def search_schema_tool(config: AgentConfig, sessions: async_sessionmaker[AsyncSession]) -> SearchSchemaTool:
    return SearchSchemaTool(schema_search(config, sessions), config.datasources, config.access_policy)


class SearchSchemaInput(BaseModel):
    question: str = Field(
        ...,
        min_length=2,
        max_length=2000,
        description="The user's question, or the subject you need data about, in any language.",
    )
    limit: int = Field(5, ge=1, le=20, description="How many tables to return, best first.")


class SearchSchemaTool(Tool[SearchSchemaInput]):
    name = "search_schema"
    description = (
        "Find the tables of the company data sources that can answer a question: keyword search "
        "over table and column names, comments (English or Chinese) and column values. Returns "
        "the best tables with their source, columns (name, type, comment, values of category "
        "columns) and row counts; when the question needs several tables, the groups of tables "
        "that join and their join conditions (declared foreign keys, or inferred from column "
        "names: declared=false, check them); plus verified example SQL for similar questions and "
        "matching metric definitions. Call it first when a data source has many tables, then "
        "query with sql_query(source=...)."
    )
    Input = SearchSchemaInput
    # The first call may read a source's catalog (a new source, a fresh install).
    timeout_s = 180.0
    # Read-only: harmless to retry, and may run alongside other read-only calls.
    idempotent = True
    concurrency_safe = True

    def __init__(
        self,
        search: SchemaSearch,
        datasources: Mapping[str, DataSourceConfig],
        access_policy: AccessPolicy | None = None,
    ) -> None:
        self._search = search
        self._datasources = dict(datasources)
        self._policy = access_policy

    async def run(self, args: SearchSchemaInput, ctx: RunContext) -> Any:
        identity = Identity.of(ctx)
        usable = [
            name for name in usable_sources(self._datasources, ctx) if is_source_open(self._policy, name, identity)
        ]
        if not usable:
            raise ToolError(
                "No company data source is available in this conversation; search the uploaded "
                "and demo tables with list_tables instead.",
                ErrorType.PERMISSION_DENIED,
            )
        access = CatalogAccess.of(self._policy, identity) if self._policy is not None else None
        result = await self._search.search(args.question, usable, args.limit, access)
        # Absent comments, values and empty lists would only cost the model tokens.
        return result.model_dump(mode="json", exclude_defaults=True)
