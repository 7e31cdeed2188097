"""scheduler: report schedules, per-run claims of scheduled jobs, the data-file index

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from alembic import op
import sqlalchemy as sa
import sqlmodel
import agent_core.store.types


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('data_files',
    sa.Column('path', sqlmodel.sql.sqltypes.AutoString(length=1024), nullable=False),
    sa.Column('workspace', sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
    sa.Column('thread_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
    sa.Column('area', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('size_bytes', sa.BigInteger(), nullable=False),
    sa.Column('modified_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('last_access_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('seen_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('path')
    )
    with op.batch_alter_table('data_files', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_data_files_last_access_at'), ['last_access_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_data_files_workspace'), ['workspace'], unique=False)

    op.create_table('report_schedules',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('creator', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('creator_name', sqlmodel.sql.sqltypes.AutoString(length=255), nullable=True),
    sa.Column('platform', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
    sa.Column('workspace', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('channel', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('thread_root', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True),
    sa.Column('is_dm', sa.Boolean(), nullable=False),
    sa.Column('cron', sqlmodel.sql.sqltypes.AutoString(length=120), nullable=False),
    sa.Column('tz', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('prompt', sa.Text(), nullable=False),
    sa.Column('enabled', sa.Boolean(), nullable=False),
    sa.Column('disabled_reason', sqlmodel.sql.sqltypes.AutoString(length=255), nullable=True),
    sa.Column('consecutive_failures', sa.Integer(), nullable=False),
    sa.Column('last_run_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=True),
    sa.Column('next_run_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=True),
    sa.Column('created_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('report_schedules', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_report_schedules_creator'), ['creator'], unique=False)
        batch_op.create_index(batch_op.f('ix_report_schedules_enabled'), ['enabled'], unique=False)

    op.create_table('scheduled_runs',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('job_id', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('fire_time', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('schedule_id', sa.BigInteger(), nullable=True),
    sa.Column('owner', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('status', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('started_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.Column('finished_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=True),
    sa.Column('outcome', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=True),
    sa.Column('settled_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('job_id', 'fire_time', name='uq_scheduled_runs_job_fire')
    )
    with op.batch_alter_table('scheduled_runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_scheduled_runs_fire_time'), ['fire_time'], unique=False)
        batch_op.create_index(batch_op.f('ix_scheduled_runs_schedule_id'), ['schedule_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('scheduled_runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_scheduled_runs_schedule_id'))
        batch_op.drop_index(batch_op.f('ix_scheduled_runs_fire_time'))

    op.drop_table('scheduled_runs')
    with op.batch_alter_table('report_schedules', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_report_schedules_enabled'))
        batch_op.drop_index(batch_op.f('ix_report_schedules_creator'))

    op.drop_table('report_schedules')
    with op.batch_alter_table('data_files', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_data_files_workspace'))
        batch_op.drop_index(batch_op.f('ix_data_files_last_access_at'))

    op.drop_table('data_files')
