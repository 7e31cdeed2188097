"""Where a conversation's queryable data lives: the DuckDB file of its uploaded tables, beside
the shared demo database."""

from __future__ import annotations

from pathlib import Path

from agent_core.data.demo import demo_database_path
from agent_core.run_context import RunDeps
from agent_core.workspace.local import thread_dir_name

TABLES_FILE = "tables.duckdb"


def conversation_database(deps: RunDeps) -> Path:
    """The DuckDB file holding a conversation's uploaded tables (outside the agent's view; with
    workspaces in object storage a local copy, fetched at the start of each turn)."""
    return deps.data_dir / "workspaces" / thread_dir_name(deps.thread_id) / TABLES_FILE


def demo_database(deps: RunDeps) -> Path:
    """The shared, read-only demo database (``demo.sales``)."""
    return demo_database_path(deps.data_dir)
