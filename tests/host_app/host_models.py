"""The host application's own models (SQLModel, on ``SQLModel.metadata``).

A small shop: users, the items they own (foreign key + index) and orders.
Every table has a migration in ``versions/`` (h001..h003), so the host's
``alembic check`` finds nothing to do.

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


class User(SQLModel, table=True):
    """The app's users (unique e-mail)."""

    __tablename__ = "host_users"

    id: int | None = Field(default=None, primary_key=True)
    email: str = Field(max_length=255, unique=True, index=True)
    full_name: str | None = Field(default=None, max_length=255)
    is_active: bool = True


class Item(SQLModel, table=True):
    """Items, each owned by a user (foreign key, indexed)."""

    __tablename__ = "host_items"

    id: int | None = Field(default=None, primary_key=True)
    title: str = Field(max_length=255)
    description: str | None = Field(default=None, max_length=255)
    owner_id: int = Field(foreign_key="host_users.id", index=True)


if os.environ.get("HOST_APP_EXTRA_MODEL") == "1":

    class Note(SQLModel, table=True):
        """A model without a migration (only when HOST_APP_EXTRA_MODEL=1)."""

        __tablename__ = "host_notes"

        id: int | None = Field(default=None, primary_key=True)
        text: str


metadata = SQLModel.metadata
