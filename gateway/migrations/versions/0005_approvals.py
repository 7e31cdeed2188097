"""approvals: tool calls paused until someone approves them in the thread

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from alembic import op
import sqlalchemy as sa
import sqlmodel
import agent_core.store.types


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('approvals',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
    sa.Column('thread_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('tool_use_id', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('platform', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
    sa.Column('asker', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('origin', sa.Text(), nullable=False),
    sa.Column('request', sa.Text(), nullable=False),
    sa.Column('status', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('decided_by', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True),
    sa.Column('message_ref', sqlmodel.sql.sqltypes.AutoString(length=255), nullable=True),
    sa.Column('created_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('expires_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('decided_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('thread_id', 'tool_use_id', name='uq_approvals_thread_call')
    )
    with op.batch_alter_table('approvals', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_approvals_expires_at'), ['expires_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_approvals_status'), ['status'], unique=False)
        batch_op.create_index(batch_op.f('ix_approvals_thread_id'), ['thread_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('approvals', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_approvals_thread_id'))
        batch_op.drop_index(batch_op.f('ix_approvals_status'))
        batch_op.drop_index(batch_op.f('ix_approvals_expires_at'))
    op.drop_table('approvals')
