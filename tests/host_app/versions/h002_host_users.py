"""Host app: create host_users (unique e-mail index).

Revision ID: h002_host_users
Revises: h001_host_orders
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "h002_host_users"
down_revision: str | Sequence[str] | None = "h001_host_orders"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "host_users",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("email", sa.String(255), nullable=False),
        sa.Column("full_name", sa.String(255), nullable=True),
        sa.Column("is_active", sa.Boolean(), nullable=False),
    )
    op.create_index("ix_host_users_email", "host_users", ["email"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_host_users_email", table_name="host_users")
    op.drop_table("host_users")
