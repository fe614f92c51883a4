"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0001'
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('capacity_profiles',
    sa.Column('deployment', sa.String(length=253), nullable=False),
    sa.Column('requests_per_s', sa.Float(), nullable=True),
    sa.Column('tokens_per_s', sa.Float(), nullable=True),
    sa.Column('source', sa.String(length=16), nullable=False),
    sa.Column('observations', sa.Integer(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('deployment', name=op.f('pk_capacity_profiles'))
    )
    op.create_table('decisions',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('deployment', sa.String(length=253), nullable=False),
    sa.Column('timestamp', sa.Float(), nullable=False),
    sa.Column('current_replicas', sa.Integer(), nullable=False),
    sa.Column('ready_replicas', sa.Integer(), nullable=False),
    sa.Column('desired_replicas', sa.Integer(), nullable=False),
    sa.Column('warm_pool', sa.Integer(), nullable=False),
    sa.Column('reason', sa.String(length=64), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('predictive_replicas', sa.Integer(), nullable=True),
    sa.Column('reactive_replicas', sa.Integer(), nullable=True),
    sa.Column('forecast', sa.JSON(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_decisions'))
    )
    with op.batch_alter_table('decisions', schema=None) as batch_op:
        batch_op.create_index('ix_decisions_deployment_timestamp', ['deployment', 'timestamp'], unique=False)
        batch_op.create_index(batch_op.f('ix_decisions_timestamp'), ['timestamp'], unique=False)

    op.create_table('deployments',
    sa.Column('key', sa.String(length=253), nullable=False),
    sa.Column('namespace', sa.String(length=63), nullable=False),
    sa.Column('name', sa.String(length=189), nullable=False),
    sa.Column('engine', sa.String(length=32), nullable=True),
    sa.Column('model', sa.String(length=255), nullable=True),
    sa.Column('first_seen', sa.Float(), nullable=False),
    sa.Column('last_seen', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('key', name=op.f('pk_deployments'))
    )
    op.create_table('drain_actions',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('node', sa.String(length=253), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('dry_run', sa.Boolean(), nullable=False),
    sa.Column('requested_by', sa.String(length=128), nullable=False),
    sa.Column('requested_at', sa.Float(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('finding_id', sa.String(length=16), nullable=True),
    sa.Column('evidence', sa.JSON(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_drain_actions'))
    )
    with op.batch_alter_table('drain_actions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_drain_actions_node'), ['node'], unique=False)
        batch_op.create_index(batch_op.f('ix_drain_actions_state'), ['state'], unique=False)

    op.create_table('findings',
    sa.Column('id', sa.String(length=16), nullable=False),
    sa.Column('kind', sa.String(length=64), nullable=False),
    sa.Column('severity', sa.String(length=16), nullable=False),
    sa.Column('deployment', sa.String(length=253), nullable=False),
    sa.Column('replica', sa.String(length=253), nullable=False),
    sa.Column('node', sa.String(length=253), nullable=False),
    sa.Column('gpu', sa.String(length=64), nullable=False),
    sa.Column('since', sa.Float(), nullable=False),
    sa.Column('summary', sa.Text(), nullable=False),
    sa.Column('evidence', sa.JSON(), nullable=False),
    sa.Column('action', sa.String(length=32), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('last_seen', sa.Float(), nullable=False),
    sa.Column('closed_at', sa.Float(), nullable=True),
    sa.Column('acknowledged_at', sa.Float(), nullable=True),
    sa.Column('acknowledged_by', sa.String(length=128), nullable=True),
    sa.Column('acknowledge_note', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_findings'))
    )
    with op.batch_alter_table('findings', schema=None) as batch_op:
        batch_op.create_index('ix_findings_state_kind', ['state', 'kind'], unique=False)

    op.create_table('rollups',
    sa.Column('deployment', sa.String(length=253), nullable=False),
    sa.Column('minute', sa.Integer(), nullable=False),
    sa.Column('samples', sa.Integer(), nullable=False),
    sa.Column('arrival_rate', sa.Float(), nullable=True),
    sa.Column('requests_waiting', sa.Float(), nullable=True),
    sa.Column('requests_running', sa.Float(), nullable=True),
    sa.Column('kv_usage_mean', sa.Float(), nullable=True),
    sa.Column('kv_usage_max', sa.Float(), nullable=True),
    sa.Column('prompt_tokens_rate', sa.Float(), nullable=True),
    sa.Column('generation_tokens_rate', sa.Float(), nullable=True),
    sa.Column('prefix_hit_ratio', sa.Float(), nullable=True),
    sa.Column('preemptions_rate', sa.Float(), nullable=True),
    sa.Column('ready_replicas', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('deployment', 'minute', name=op.f('pk_rollups'))
    )
    op.create_table('drain_events',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('action_id', sa.Integer(), nullable=False),
    sa.Column('at', sa.Float(), nullable=False),
    sa.Column('from_state', sa.String(length=16), nullable=True),
    sa.Column('to_state', sa.String(length=16), nullable=False),
    sa.Column('actor', sa.String(length=128), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['action_id'], ['drain_actions.id'], name=op.f('fk_drain_events_action_id_drain_actions'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_drain_events'))
    )
    with op.batch_alter_table('drain_events', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_drain_events_action_id'), ['action_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('drain_events', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_drain_events_action_id'))

    op.drop_table('drain_events')
    op.drop_table('rollups')
    with op.batch_alter_table('findings', schema=None) as batch_op:
        batch_op.drop_index('ix_findings_state_kind')

    op.drop_table('findings')
    with op.batch_alter_table('drain_actions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_drain_actions_state'))
        batch_op.drop_index(batch_op.f('ix_drain_actions_node'))

    op.drop_table('drain_actions')
    op.drop_table('deployments')
    with op.batch_alter_table('decisions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_decisions_timestamp'))
        batch_op.drop_index('ix_decisions_deployment_timestamp')

    op.drop_table('decisions')
    op.drop_table('capacity_profiles')
