"""drain claims: one live action per node, a rail row to claim the max-K under, and an audit table

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

Before the unique index can exist, duplicate live actions (the race this revision closes could have left some)
are cancelled, oldest kept, each with an audit event saying why.
"""

import time
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0003'
down_revision: str | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LIVE = "state IN ('requested', 'approved', 'executing')"


def upgrade() -> None:
    now = time.time()
    duplicates = (
        f"{LIVE} AND id NOT IN (SELECT MIN(id) FROM drain_actions WHERE {LIVE} GROUP BY node)"
    )
    op.execute(sa.text(
        "INSERT INTO drain_events (action_id, at, from_state, to_state, actor, message) "
        f"SELECT id, :now, state, 'cancelled', 'migration 0003', "
        f"'a second live action for this node; the oldest one is kept' FROM drain_actions WHERE {duplicates}"
    ).bindparams(now=now))
    op.execute(sa.text(
        f"UPDATE drain_actions SET state = 'cancelled', updated_at = :now WHERE {duplicates}"
    ).bindparams(now=now))
    op.create_index('uq_drain_actions_live_node', 'drain_actions', ['node'], unique=True,
                    sqlite_where=sa.text(LIVE), postgresql_where=sa.text(LIVE))
    rail = op.create_table('drain_rail',
    sa.Column('id', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('claims', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_drain_rail'))
    )
    op.bulk_insert(rail, [{'id': 1, 'claims': 0}])
    op.create_table('audit_events',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('at', sa.Float(), nullable=False),
    sa.Column('actor', sa.String(length=128), nullable=False),
    sa.Column('action', sa.String(length=64), nullable=False),
    sa.Column('subject', sa.String(length=2048), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_audit_events'))
    )
    op.create_index(op.f('ix_audit_events_at'), 'audit_events', ['at'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_audit_events_at'), table_name='audit_events')
    op.drop_table('audit_events')
    op.drop_table('drain_rail')
    op.drop_index('uq_drain_actions_live_node', table_name='drain_actions',
                  sqlite_where=sa.text(LIVE), postgresql_where=sa.text(LIVE))
