"""The ``data_access_audit`` table: one row per access to a configured data source.

Append-only. The application only ever INSERTs rows, and deletes them only when the retention
pruning (`agent_core.governance.audit.prune_audit`) removes rows past ``BA_AUDIT_RETENTION_DAYS``.
The database holds the application to that:

- PostgreSQL: a trigger refuses every UPDATE and TRUNCATE, and every DELETE except of rows
  older than the cut-off the pruning transaction declares (``ba_agent.audit_prune_before``,
  a transaction-local setting). A trigger rather than ``REVOKE UPDATE, DELETE``: the service
  usually runs its own migrations and so owns the table, and an owner (or superuser) is never
  stopped by privileges, while a trigger binds every role. (A deployment that runs migrations
  under a separate role may REVOKE on top; the pruning then needs that role.)
- SQLite (the single-host default): a trigger refuses UPDATE; SQLite has no session settings
  for the pruning to declare itself with, so DELETE is not refused there.

Migration ``0004`` creates the table and triggers for the service; `create_audit_table` does the
same for tests and tools that run without the migrations.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Column, Index, Integer, Text, inspect, text
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel import Field, SQLModel

from agent_core.store.types import utc_column

AUDIT_TABLE = "data_access_audit"

# Kept in step with migration 0004 (migrations are frozen copies; this is what tests create).
POSTGRES_GUARD = (
    """
    CREATE OR REPLACE FUNCTION data_access_audit_append_only() RETURNS trigger
    LANGUAGE plpgsql AS $$
    DECLARE
        prune_before timestamptz := NULLIF(current_setting('ba_agent.audit_prune_before', true), '');
    BEGIN
        IF TG_OP = 'DELETE' THEN
            IF prune_before IS NOT NULL AND OLD.accessed_at < prune_before THEN
                RETURN OLD;
            END IF;
        END IF;
        RAISE EXCEPTION 'data_access_audit is append-only: % refused', TG_OP
            USING ERRCODE = 'insufficient_privilege';
    END
    $$
    """,
    """
    CREATE TRIGGER data_access_audit_append_only
    BEFORE UPDATE OR DELETE ON data_access_audit
    FOR EACH ROW EXECUTE FUNCTION data_access_audit_append_only()
    """,
    """
    CREATE TRIGGER data_access_audit_no_truncate
    BEFORE TRUNCATE ON data_access_audit
    FOR EACH STATEMENT EXECUTE FUNCTION data_access_audit_append_only()
    """,
)
SQLITE_GUARD = (
    """
    CREATE TRIGGER data_access_audit_no_update BEFORE UPDATE ON data_access_audit
    BEGIN SELECT RAISE(ABORT, 'data_access_audit is append-only: UPDATE refused'); END
    """,
)


class DataAccessAuditRow(SQLModel, table=True):
    """One query a tool ran on a configured data source, as it ran."""

    __tablename__ = AUDIT_TABLE
    # The per-user daily row count reads one user's rows since midnight.
    __table_args__ = (Index("ix_data_access_audit_user_at", "platform", "user_id", "accessed_at"),)

    id: int | None = Field(
        default=None,
        sa_column=Column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    )
    accessed_at: datetime = Field(sa_column=utc_column(index=True))  # when the query finished
    platform: str = Field(max_length=32)  # "" outside any chat (an operator's `tool run`)
    user_id: str = Field(max_length=128)
    channel: str = Field(max_length=128)
    source: str = Field(index=True, max_length=64)
    tool: str = Field(max_length=64)
    sql: str = Field(sa_column=Column(Text, nullable=False))  # after the access-policy rewrite
    row_count: int  # rows the source returned
    duration_ms: float
    approval_id: str | None = Field(default=None, max_length=64)  # the approval that allowed it
    thread_id: str = Field(sa_column=Column(Text, nullable=False))
    tool_call_id: str = Field(max_length=128)


def guard_statements(dialect: str) -> tuple[str, ...]:
    """The DDL that makes the table append-only on ``dialect`` (sqlite or postgresql)."""
    return POSTGRES_GUARD if dialect == "postgresql" else SQLITE_GUARD


async def create_audit_table(engine: AsyncEngine) -> None:
    """Create the audit table and its append-only triggers if missing: for tests and tools that
    run without the gateway's migrations (which create the same in revision 0004)."""
    table = DataAccessAuditRow.__table__  # type: ignore[attr-defined]

    async with engine.begin() as conn:
        exists = await conn.run_sync(lambda sync: inspect(sync).has_table(AUDIT_TABLE))
        if exists:
            return
        await conn.run_sync(lambda sync: SQLModel.metadata.create_all(sync, tables=[table]))
        for statement in guard_statements(conn.dialect.name):
            await conn.execute(text(statement))
