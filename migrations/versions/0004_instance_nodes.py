"""instance_nodes: each sharded instance's node set, the drain circuit breaker's fleet-wide denominator

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-06

One row per instance identity, refreshed by its instance while it holds shards (kvpilot.actuation.FleetShare); rows
not refreshed for three lease periods are ignored and deleted by the readers. Nothing to carry over: the table starts
empty and fills within a lease period of the upgraded instances' first ticks.
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"  # branch_labels, depends_on: none (alembic reads them as absent)


def upgrade() -> None:
    op.create_table(
        "instance_nodes",
        sa.Column("instance", sa.String(length=253), nullable=False),
        sa.Column("nodes", sa.JSON(), nullable=False),
        sa.Column("refreshed_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("instance", name=op.f("pk_instance_nodes")),
    )


def downgrade() -> None:
    op.drop_table("instance_nodes")
