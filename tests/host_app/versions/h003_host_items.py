"""Host app: create host_items (owner foreign key, indexed).

Revision ID: h003_host_items
Revises: h002_host_users
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "h003_host_items"
down_revision: str | Sequence[str] | None = "h002_host_users"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "host_items",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("title", sa.String(255), nullable=False),
        sa.Column("description", sa.String(255), nullable=True),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["owner_id"], ["host_users.id"]),
    )
    op.create_index("ix_host_items_owner_id", "host_items", ["owner_id"])


def downgrade() -> None:
    op.drop_index("ix_host_items_owner_id", table_name="host_items")
    op.drop_table("host_items")
