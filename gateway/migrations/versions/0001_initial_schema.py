"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-22
"""

from alembic import op
import sqlalchemy as sa
import sqlmodel
import agent_core.store.types


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('call_records',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('thread_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('user_id', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True),
    sa.Column('kind', sqlmodel.sql.sqltypes.AutoString(length=8), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('started_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('duration_ms', sa.Float(), nullable=False),
    sa.Column('input_tokens', sa.Integer(), nullable=False),
    sa.Column('output_tokens', sa.Integer(), nullable=False),
    sa.Column('cache_read_tokens', sa.Integer(), nullable=False),
    sa.Column('cache_write_tokens', sa.Integer(), nullable=False),
    sa.Column('success', sa.Boolean(), nullable=False),
    sa.Column('error_type', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
    sa.Column('retries', sa.Integer(), nullable=False),
    sa.Column('output_level', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('call_records', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_call_records_name'), ['name'], unique=False)
        batch_op.create_index('ix_call_records_user_started', ['user_id', 'started_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_call_records_started_at'), ['started_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_call_records_thread_id'), ['thread_id'], unique=False)

    op.create_table('inbound_events',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('platform', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
    sa.Column('event_id', sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
    sa.Column('dedupe_key', sqlmodel.sql.sqltypes.AutoString(length=512), nullable=False),
    sa.Column('thread_key', sqlmodel.sql.sqltypes.AutoString(length=512), nullable=False),
    sa.Column('payload', sa.Text(), nullable=False),
    sa.Column('status', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('available_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('created_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('updated_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('dedupe_key'),
    sa.UniqueConstraint('event_id')
    )
    with op.batch_alter_table('inbound_events', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_inbound_events_status'), ['status'], unique=False)
        batch_op.create_index(batch_op.f('ix_inbound_events_thread_key'), ['thread_key'], unique=False)

    op.create_table('outbound_deliveries',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('event_row_id', sa.Integer(), nullable=False),
    sa.Column('platform', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
    sa.Column('reply', sa.Text(), nullable=False),
    sa.Column('status', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('created_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('sent_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('outbound_deliveries', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_outbound_deliveries_event_row_id'), ['event_row_id'], unique=False)

    op.create_table('thread_leases',
    sa.Column('thread_key', sqlmodel.sql.sqltypes.AutoString(length=512), nullable=False),
    sa.Column('owner', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('expires_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('thread_key')
    )
    with op.batch_alter_table('thread_leases', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_thread_leases_expires_at'), ['expires_at'], unique=False)

    op.create_table('threads',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('key', sqlmodel.sql.sqltypes.AutoString(length=512), nullable=False),
    sa.Column('platform', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
    sa.Column('workspace', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('channel', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('root', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('dm_owner', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True),
    sa.Column('state', sa.Text(), server_default='{}', nullable=False),
    sa.Column('created_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('updated_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('archived_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('threads', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_threads_key'), ['key'], unique=False)
        batch_op.create_index('uq_threads_live_key', ['key'], unique=True, sqlite_where=sa.text('archived_at IS NULL'), postgresql_where=sa.text('archived_at IS NULL'))

    op.create_table('messages',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('thread_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.Column('role', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('content', sa.Text(), nullable=False),
    sa.Column('schema_version', sa.Integer(), nullable=False),
    sa.Column('event_key', sqlmodel.sql.sqltypes.AutoString(length=512), nullable=True),
    sa.Column('created_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['thread_id'], ['threads.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('thread_id', 'seq', name='uq_messages_thread_seq')
    )
    with op.batch_alter_table('messages', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_messages_event_key'), ['event_key'], unique=False)
        batch_op.create_index(batch_op.f('ix_messages_thread_id'), ['thread_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('messages', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_messages_thread_id'))
        batch_op.drop_index(batch_op.f('ix_messages_event_key'))

    op.drop_table('messages')
    with op.batch_alter_table('threads', schema=None) as batch_op:
        batch_op.drop_index('uq_threads_live_key', sqlite_where=sa.text('archived_at IS NULL'), postgresql_where=sa.text('archived_at IS NULL'))
        batch_op.drop_index(batch_op.f('ix_threads_key'))

    op.drop_table('threads')
    with op.batch_alter_table('thread_leases', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_thread_leases_expires_at'))

    op.drop_table('thread_leases')
    with op.batch_alter_table('outbound_deliveries', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_outbound_deliveries_event_row_id'))

    op.drop_table('outbound_deliveries')
    with op.batch_alter_table('inbound_events', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_inbound_events_thread_key'))
        batch_op.drop_index(batch_op.f('ix_inbound_events_status'))

    op.drop_table('inbound_events')
    with op.batch_alter_table('call_records', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_call_records_thread_id'))
        batch_op.drop_index(batch_op.f('ix_call_records_started_at'))
        batch_op.drop_index(batch_op.f('ix_call_records_name'))

    op.drop_table('call_records')
