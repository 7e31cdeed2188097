"""metric monitors: monitors made in chats, their state between runs, their alerts

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-10
"""

from alembic import op
import sqlalchemy as sa
import sqlmodel
import agent_core.store.types


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('metric_monitors',
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('platform', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
    sa.Column('workspace', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('spec', sa.Text(), nullable=False),
    sa.Column('created_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('monitor_states',
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('anomalous', sa.Boolean(), nullable=False),
    sa.Column('last_period', sqlmodel.sql.sqltypes.AutoString(length=10), nullable=True),
    sa.Column('last_run_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=True),
    sa.Column('alert_id', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
    sa.Column('muted_until', agent_core.store.types.UTCDateTime(timezone=True), nullable=True),
    sa.Column('muted_by', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('monitor_alerts',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
    sa.Column('monitor', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('view', sa.Text(), nullable=False),
    sa.Column('created_at', agent_core.store.types.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('monitor_alerts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_monitor_alerts_monitor'), ['monitor'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('monitor_alerts', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_monitor_alerts_monitor'))
    op.drop_table('monitor_alerts')
    op.drop_table('monitor_states')
    op.drop_table('metric_monitors')
