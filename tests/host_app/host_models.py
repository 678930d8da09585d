"""The host application's own models (SQLModel, on ``SQLModel.metadata``).

``HOST_APP_EXTRA_MODEL=1`` adds a model that has no migration yet, as a
developer who forgot ``alembic revision --autogenerate`` would have: the
host's ``alembic check`` must then report it (the sanity side of the tests).
"""

from __future__ import annotations

import os

from sqlmodel import Field, SQLModel


class Order(SQLModel, table=True):
    """A host table that lives in the same database as firefly_orm's."""

    __tablename__ = "host_orders"

    id: int | None = Field(default=None, primary_key=True)
    item: str = Field(max_length=100)


if os.environ.get("HOST_APP_EXTRA_MODEL") == "1":

    class Note(SQLModel, table=True):
        """A model without a migration (only when HOST_APP_EXTRA_MODEL=1)."""

        __tablename__ = "host_notes"

        id: int | None = Field(default=None, primary_key=True)
        text: str


metadata = SQLModel.metadata
