"""The app's own tables, on their own ``MetaData`` (the target of the app's Alembic).

firefly_orm's table lives on ``firefly_orm.entry.metadata``, so neither side's
``create_all`` or autogenerate ever sees the other's tables.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.orm import registry
from sqlmodel import Field, SQLModel

__all__ = ["NAMING", "ChatModel", "ReplyUsage", "Ticket", "metadata", "utcnow"]


def utcnow() -> datetime:
    """The current time, timezone-aware (UTC)."""
    return datetime.now(UTC)


#: Constraint and index names, so migrations can name what they drop (SQLite batch mode too).
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class ChatModel(SQLModel, registry=registry(metadata=sa.MetaData(naming_convention=NAMING))):
    """Base of the app's tables: a registry (and ``MetaData``) of their own."""


#: What the app's Alembic compares its revisions with (``target_metadata``).
metadata = ChatModel.metadata


class Ticket(ChatModel, table=True):
    """A support ticket; its conversation lives in firefly_orm's memory."""

    __tablename__ = "tickets"

    id: int | None = Field(default=None, primary_key=True)
    customer: str = Field(max_length=100, index=True)
    subject: str = Field(max_length=200)
    conversation_id: str = Field(max_length=32, unique=True)
    turns: int = Field(default=0)
    created_at: datetime = Field(default_factory=utcnow, sa_type=sa.DateTime(timezone=True))
    updated_at: datetime = Field(default_factory=utcnow, sa_type=sa.DateTime(timezone=True))


class ReplyUsage(ChatModel, table=True):
    """The app's usage ledger: the tokens of each answered message (what it bills)."""

    __tablename__ = "reply_usage"
    __table_args__ = (sa.UniqueConstraint("ticket_id", "turn_id"),)

    id: int | None = Field(default=None, primary_key=True)
    ticket_id: int = Field(foreign_key="tickets.id", index=True)
    turn_id: int
    input_tokens: int
    output_tokens: int
    created_at: datetime = Field(default_factory=utcnow, sa_type=sa.DateTime(timezone=True))
