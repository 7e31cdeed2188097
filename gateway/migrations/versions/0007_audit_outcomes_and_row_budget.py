"""audit outcomes and row budget: every attempt recorded with its outcome, a retention no session
can declare, and the daily row budget reserved atomically

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27

- data_access_audit: ``outcome`` (succeeded, failed, timed_out, refused) and ``error`` (its kind).
- data_row_budget: rows charged per user and UTC day (agent_core/governance/budget.py).
- PostgreSQL: the append-only trigger no longer trusts the session setting
  ``ba_agent.audit_prune_before`` (any session could set it); a DELETE passes only for rows older
  than the retention in data_access_audit_retention, by the database's clock. See
  agent_core/governance/audit_table.py.
"""

from alembic import op
import sqlalchemy as sa
import sqlmodel


revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None

POSTGRES_RETENTION = (
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
POSTGRES_PREVIOUS = """
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
"""


def upgrade() -> None:
    # Plain ADD COLUMN (SQLite takes it without copying the table, so its trigger stays).
    op.add_column('data_access_audit', sa.Column('outcome', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False, server_default='succeeded'))
    op.add_column('data_access_audit', sa.Column('error', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True))
    op.create_table('data_row_budget',
    sa.Column('platform', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
    sa.Column('user_id', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('day', sqlmodel.sql.sqltypes.AutoString(length=10), nullable=False),
    sa.Column('used', sa.Integer(), nullable=False),
    sa.Column('last_grant', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('platform', 'user_id', 'day')
    )
    if op.get_bind().dialect.name == 'postgresql':
        for statement in POSTGRES_RETENTION:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        op.execute(POSTGRES_PREVIOUS)
        op.execute('DROP TABLE data_access_audit_retention')
    op.drop_table('data_row_budget')
    with op.batch_alter_table('data_access_audit') as batch:
        batch.drop_column('error')
        batch.drop_column('outcome')
