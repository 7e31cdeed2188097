"""The ``data_access_audit`` table: one row per attempt to read a configured data source.

Append-only. The application only ever INSERTs rows, and deletes them only when the retention
pruning (`agent_core.governance.audit.prune_audit`) removes rows past ``BA_AUDIT_RETENTION_DAYS``.
The database holds the application to that:

- PostgreSQL: a trigger refuses every UPDATE and TRUNCATE, and every DELETE of a row younger
  than the retention kept in ``data_access_audit_retention`` (one row, days), by the database's
  own clock. Nothing a session declares for itself moves that cut-off: the retention table is
  read in the audit table's own schema with a fixed search path, and only a role allowed to
  UPDATE it (its owner: the service, which runs the migrations) can change the retention. Give
  the bot's query role no privileges on these tables at all. A trigger rather than ``REVOKE``:
  the service usually owns the table, and an owner is never stopped by privileges, while a
  trigger binds every role (a superuser can still disable triggers: that is the operator's).
- SQLite (the single-host default): a trigger refuses UPDATE; whoever can write the file can do
  anything to it, so DELETE is not refused there.

Migrations ``0004`` and ``0007`` create the table and triggers for the service;
`create_audit_table` does the same for tests and tools that run without the migrations.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Column, Index, Integer, Text, inspect, text
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel import Field, SQLModel

from agent_core.store.types import utc_column

AUDIT_TABLE = "data_access_audit"

RETENTION_TABLE = "data_access_audit_retention"
# Kept in step with migrations 0004 and 0007 (migrations are frozen copies; this is what tests create).
POSTGRES_GUARD = (
    """
    CREATE TABLE IF NOT EXISTS data_access_audit_retention (
        id integer PRIMARY KEY CHECK (id = 1),
        days integer NOT NULL CHECK (days >= 1)
    )
    """,
    "INSERT INTO data_access_audit_retention (id, days) VALUES (1, 365) ON CONFLICT (id) DO NOTHING",
    """
    CREATE OR REPLACE FUNCTION data_access_audit_append_only() RETURNS trigger
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
    DECLARE
        keep_days integer;
    BEGIN
        IF TG_OP = 'DELETE' THEN
            -- The retention of the audit table's own schema: no session setting or search path
            -- of the deleting session decides which rows may go.
            EXECUTE format('SELECT days FROM %I.data_access_audit_retention WHERE id = 1', TG_TABLE_SCHEMA)
                INTO keep_days;
            IF keep_days IS NOT NULL AND OLD.accessed_at < now() - make_interval(days => keep_days) THEN
                RETURN OLD;
            END IF;
        END IF;
        RAISE EXCEPTION 'data_access_audit is append-only: % refused', TG_OP
            USING ERRCODE = 'insufficient_privilege';
    END
    $$
    """,
)
POSTGRES_TRIGGERS = (
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
    """One query a tool ran or tried to run on a configured data source, as it ran."""

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
    # succeeded, failed, timed_out or refused (by the policy, the SQL guard or the row budget)
    outcome: str = Field(default="succeeded", max_length=16, sa_column_kwargs={"server_default": "succeeded"})
    error: str | None = Field(default=None, max_length=64)  # the error's kind, never its text
    approval_id: str | None = Field(default=None, max_length=64)  # the approval that allowed it
    thread_id: str = Field(sa_column=Column(Text, nullable=False))
    tool_call_id: str = Field(max_length=128)


def guard_statements(dialect: str) -> tuple[str, ...]:
    """The DDL that makes the table append-only on ``dialect`` (sqlite or postgresql)."""
    return POSTGRES_GUARD + POSTGRES_TRIGGERS if dialect == "postgresql" else SQLITE_GUARD


async def create_audit_table(engine: AsyncEngine) -> None:
    """Create the audit and row-budget tables and the audit's append-only triggers if missing:
    for tests and tools that run without the gateway's migrations (revisions 0004 and 0007)."""
    from agent_core.governance.budget_table import DataRowBudgetRow

    table = DataAccessAuditRow.__table__  # type: ignore[attr-defined]
    budget = DataRowBudgetRow.__table__  # type: ignore[attr-defined]

    async with engine.begin() as conn:
        exists = await conn.run_sync(lambda sync: inspect(sync).has_table(AUDIT_TABLE))
        if exists:
            return
        await conn.run_sync(lambda sync: SQLModel.metadata.create_all(sync, tables=[table, budget]))
        for statement in guard_statements(conn.dialect.name):
            await conn.execute(text(statement))
