"""schema catalog: each data source's tables and columns, for search_schema

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from alembic import op
import sqlalchemy as sa
import sqlmodel
import agent_core.store.types


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('catalog_sources',
    sa.Column('source', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('kind', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('refreshed_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=True),
    sa.Column('attempted_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('table_count', sa.Integer(), nullable=False),
    sa.Column('duration_ms', sa.Float(), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('source')
    )
    op.create_table('catalog_tables',
    sa.Column('source', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('table_no', sa.Integer(), nullable=False),
    sa.Column('schema_name', sqlmodel.sql.sqltypes.AutoString(length=255), nullable=True),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
    sa.Column('kind', sqlmodel.sql.sqltypes.AutoString(length=8), nullable=False),
    sa.Column('comment', sa.Text(), nullable=True),
    sa.Column('row_count', sa.BigInteger(), nullable=True),
    sa.Column('row_count_estimated', sa.Boolean(), nullable=False),
    sa.PrimaryKeyConstraint('source', 'table_no')
    )
    op.create_table('catalog_columns',
    sa.Column('source', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('table_no', sa.Integer(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
    sa.Column('type', sa.Text(), nullable=False),
    sa.Column('comment', sa.Text(), nullable=True),
    sa.Column('sample_values', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('source', 'table_no', 'position')
    )


def downgrade() -> None:
    op.drop_table('catalog_columns')
    op.drop_table('catalog_tables')
    op.drop_table('catalog_sources')
