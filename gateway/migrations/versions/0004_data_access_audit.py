"""data access audit: every query on a configured data source, append-only

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-08

PostgreSQL: a trigger refuses UPDATE, TRUNCATE and any DELETE except the retention pruning's
(rows older than the transaction-local ``ba_agent.audit_prune_before``). SQLite: a trigger
refuses UPDATE. See agent_core/governance/audit_table.py.
"""

from alembic import op
import sqlalchemy as sa
import sqlmodel
import agent_core.store.types


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None

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


def upgrade() -> None:
    op.create_table('data_access_audit',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('accessed_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('platform', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
    sa.Column('user_id', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('channel', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('source', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('tool', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('sql', sa.Text(), nullable=False),
    sa.Column('row_count', sa.Integer(), nullable=False),
    sa.Column('duration_ms', sa.Float(), nullable=False),
    sa.Column('approval_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
    sa.Column('thread_id', sa.Text(), nullable=False),
    sa.Column('tool_call_id', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_data_access_audit_accessed_at', 'data_access_audit', ['accessed_at'], unique=False)
    op.create_index('ix_data_access_audit_source', 'data_access_audit', ['source'], unique=False)
    op.create_index('ix_data_access_audit_user_at', 'data_access_audit', ['platform', 'user_id', 'accessed_at'], unique=False)
    guard = POSTGRES_GUARD if op.get_bind().dialect.name == 'postgresql' else SQLITE_GUARD
    for statement in guard:
        op.execute(statement)


def downgrade() -> None:
    op.drop_table('data_access_audit')
    if op.get_bind().dialect.name == 'postgresql':
        op.execute('DROP FUNCTION IF EXISTS data_access_audit_append_only()')
