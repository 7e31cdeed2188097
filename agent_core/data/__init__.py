"""Data access for the agent: SQL guard, demo database, uploads workspace, configured sources."""

from agent_core.data.demo import DEMO_ANOMALIES, DEMO_DESCRIPTION, ensure_demo_database
from agent_core.data.errors import (
    DataError,
    SQLParseError,
    UnsafeSQLError,
)
from agent_core.data.sql_guard import ensure_read_only, with_row_limit

__all__ = [
    "DEMO_ANOMALIES",
    "DEMO_DESCRIPTION",
    "DataError",
    "SQLParseError",
    "UnsafeSQLError",
    "ensure_demo_database",
    "ensure_read_only",
    "with_row_limit",
]
