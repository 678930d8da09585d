"""Host app: create host_orders.

Revision ID: h001_host_orders
Revises:
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "h001_host_orders"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = ("host",)
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "host_orders",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("item", sa.String(100), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("host_orders")
