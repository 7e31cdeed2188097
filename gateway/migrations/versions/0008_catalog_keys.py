"""schema catalog: primary keys and foreign keys of catalog columns, for search_schema's joins

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('catalog_columns') as batch:
        batch.add_column(sa.Column('primary_key', sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column('foreign_key', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('catalog_columns') as batch:
        batch.drop_column('foreign_key')
        batch.drop_column('primary_key')
