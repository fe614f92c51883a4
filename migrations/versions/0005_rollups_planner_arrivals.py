"""rollups_planner_arrivals: each minute's arrival rate as the planner read it, and how much of it was a gateway's

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-07

Two nullable columns on rollups: planner_arrival_rate (a gateway's rate where collector.arrivals or the scale source's
router gave one, else the engines' estimate) and gateway_arrival_share (0..1, the share of the minute's samples that
were a gateway's). Nothing to carry over: rows written before stay NULL there, and the warm start reads their
arrival_rate (the engines' estimate, what the planner read before a gateway source existed).
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"  # branch_labels, depends_on: none (alembic reads them as absent)


def upgrade() -> None:
    with op.batch_alter_table("rollups", schema=None) as batch_op:
        batch_op.add_column(sa.Column("planner_arrival_rate", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("gateway_arrival_share", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rollups", schema=None) as batch_op:
        batch_op.drop_column("gateway_arrival_share")
        batch_op.drop_column("planner_arrival_rate")
