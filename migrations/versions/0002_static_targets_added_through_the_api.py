"""static targets added through the API

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0002'
down_revision: str | None = '0001'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('static_targets',
    sa.Column('url', sa.String(length=2048), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('engine', sa.String(length=32), nullable=True),
    sa.Column('namespace', sa.String(length=63), nullable=False),
    sa.Column('deployment', sa.String(length=253), nullable=False),
    sa.Column('pod', sa.String(length=253), nullable=False),
    sa.Column('node', sa.String(length=253), nullable=False),
    sa.Column('added_by', sa.String(length=128), nullable=False),
    sa.Column('added_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('url', name=op.f('pk_static_targets'))
    )


def downgrade() -> None:
    op.drop_table('static_targets')
