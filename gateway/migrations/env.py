"""Alembic environment: one migration history for the gateway's and the agent core's tables.

Run through `gateway.migrate.upgrade`, which hands in an open connection (so URLs never pass
through Alembic's ini interpolation, and PostgreSQL upgrades can hold an advisory lock).
"""

from __future__ import annotations

from alembic import context
from sqlmodel import SQLModel

import agent_core.catalog.learned  # registers the tables on SQLModel.metadata
import agent_core.catalog.tables
import agent_core.governance.approval_table
import agent_core.governance.audit_table
import agent_core.monitors.tables
import agent_core.schedules.tables
import agent_core.store.tables  # noqa: F401
import gateway.feedback_tables
import gateway.tables  # noqa: F401

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=SQLModel.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
