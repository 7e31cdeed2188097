"""answer feedback: 👍/👎 per answer and person, and the verified examples a 👍 proposes

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27
"""

from alembic import op
import sqlalchemy as sa
import sqlmodel
import agent_core.store.types


revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('answer_feedback',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('answer_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('platform', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
    sa.Column('workspace', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('channel', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('thread_key', sqlmodel.sql.sqltypes.AutoString(length=512), nullable=False),
    sa.Column('user', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('rating', sa.Integer(), nullable=False),
    sa.Column('comment', sa.Text(), nullable=True),
    sa.Column('created_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('updated_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('answer_id', 'platform', 'user')
    )
    with op.batch_alter_table('answer_feedback', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_answer_feedback_answer_id'), ['answer_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_answer_feedback_thread_key'), ['thread_key'], unique=False)
    op.create_table('example_proposals',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('answer_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('sql_hash', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('question', sa.Text(), nullable=False),
    sa.Column('sql', sa.Text(), nullable=False),
    sa.Column('source', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('proposed_by', sqlmodel.sql.sqltypes.AutoString(length=160), nullable=False),
    sa.Column('status', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('decided_by', sqlmodel.sql.sqltypes.AutoString(length=160), nullable=True),
    sa.Column('created_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('decided_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('answer_id', 'sql_hash')
    )
    with op.batch_alter_table('example_proposals', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_example_proposals_answer_id'), ['answer_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_example_proposals_source'), ['source'], unique=False)
        batch_op.create_index(batch_op.f('ix_example_proposals_status'), ['status'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('example_proposals', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_example_proposals_status'))
        batch_op.drop_index(batch_op.f('ix_example_proposals_source'))
        batch_op.drop_index(batch_op.f('ix_example_proposals_answer_id'))
    op.drop_table('example_proposals')
    with op.batch_alter_table('answer_feedback', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_answer_feedback_thread_key'))
        batch_op.drop_index(batch_op.f('ix_answer_feedback_answer_id'))
    op.drop_table('answer_feedback')
