"""Help desk: create tickets and reply_usage (the app's first revision).

Revision ID: c001_help_desk_tables
Revises:
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "c001_help_desk_tables"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tickets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("customer", sa.String(100), nullable=False),
        sa.Column("subject", sa.String(200), nullable=False),
        sa.Column("conversation_id", sa.String(32), nullable=False),
        sa.Column("turns", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_tickets"),
        sa.UniqueConstraint("conversation_id", name="uq_tickets_conversation_id"),
    )
    op.create_index("ix_tickets_customer", "tickets", ["customer"])
    op.create_table(
        "reply_usage",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("ticket_id", sa.Integer(), nullable=False),
        sa.Column("turn_id", sa.Integer(), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_reply_usage"),
        sa.ForeignKeyConstraint(
            ["ticket_id"], ["tickets.id"], name="fk_reply_usage_ticket_id_tickets"
        ),
        sa.UniqueConstraint("ticket_id", "turn_id", name="uq_reply_usage_ticket_id_turn_id"),
    )
    op.create_index("ix_reply_usage_ticket_id", "reply_usage", ["ticket_id"])


def downgrade() -> None:
    op.drop_index("ix_reply_usage_ticket_id", table_name="reply_usage")
    op.drop_table("reply_usage")
    op.drop_index("ix_tickets_customer", table_name="tickets")
    op.drop_table("tickets")
