"""The schema search a deployment runs: the stored catalog, the configured verified examples and
metrics, what the access policy lets everyone see. Light to import (no tool machinery), so
`ba-agent catalog search` starts fast."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from agent_core.catalog.examples import load_examples
from agent_core.catalog.metrics import metric_documents
from agent_core.catalog.search import SchemaSearch
from agent_core.config import AgentConfig

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import async_sessionmaker
    from sqlmodel.ext.asyncio.session import AsyncSession


def schema_search(config: AgentConfig, sessions: async_sessionmaker[AsyncSession]) -> SchemaSearch:
    """Search over the catalog in the service database, with the configured examples and
    metrics. Raises ExamplesFileError for an invalid ``BA_EXAMPLES_FILE`` (start-up then fails
    with its file and line)."""
    examples = load_examples(config.examples_file, config.datasources) if config.examples_file else []
    metrics = partial(metric_documents, config.semantic_dir, config.datasources)
    everyone = None
    if config.access_policy is not None:
        from agent_core.governance.catalog_access import CatalogAccess

        everyone = CatalogAccess.everyone(config.access_policy)
    return SchemaSearch(sessions, config.datasources, examples, metrics, everyone)
