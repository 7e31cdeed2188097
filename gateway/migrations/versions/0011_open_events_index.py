"""open events index: the inbox's open events in id order, in an index of their own

A look for work reads the oldest open events a window at a time (`Inbox.threads_with_work`).
The index holds only pending and processing events, so that read costs the same at any
backlog and however many answered events the table keeps. It replaces the index on `status`,
which every query of open events used and which cost every accept as much.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28
"""

from alembic import op
import sqlalchemy as sa


revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None

OPEN = sa.text("status IN ('pending', 'processing')")


def upgrade() -> None:
    with op.batch_alter_table('inbound_events', schema=None) as batch_op:
        batch_op.drop_index('ix_inbound_events_status')
        batch_op.create_index('ix_inbound_events_open', ['id'], unique=False, sqlite_where=OPEN, postgresql_where=OPEN)


def downgrade() -> None:
    with op.batch_alter_table('inbound_events', schema=None) as batch_op:
        batch_op.drop_index('ix_inbound_events_open')
        batch_op.create_index('ix_inbound_events_status', ['status'], unique=False)
