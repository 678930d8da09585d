"""A user_id column: the user an entry belongs to, indexed for per-user reads.

Revision ID: 0005_user_id
Revises: 0004_postgres_key_collation_c
Create Date: 2026-11-23

Conversations, their archives and working scopes can belong to a user.  The
partial index ``(user_id, namespace, created_at, entry_id) WHERE user_id IS NOT
NULL`` serves "this user's conversations, newest first" and "everything this
user left" without scanning other users' rows.  Existing rows get NULL (no
user).  Downgrade drops the index and the column (SQLite through a batch copy
of the table, inside the migration's transaction).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from firefly_orm.migrate import revision_schema

revision: str = "0005_user_id"
down_revision: str | Sequence[str] | None = "0004_postgres_key_collation_c"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_memory_entries_user"


def _table_schema() -> str | None:
    # ADD/DROP COLUMN do not follow schema_translate_map: name the schema.
    return revision_schema() or op.get_context().version_table_schema


def upgrade() -> None:
    op.add_column(
        "memory_entries",
        sa.Column("user_id", sa.String(), nullable=True),
        schema=_table_schema(),
    )
    op.create_index(
        INDEX,
        "memory_entries",
        ["user_id", "namespace", "created_at", "entry_id"],
        postgresql_where=sa.text("user_id IS NOT NULL"),
        sqlite_where=sa.text("user_id IS NOT NULL"),
        schema=revision_schema(),
    )


def downgrade() -> None:
    op.drop_index(INDEX, table_name="memory_entries", schema=revision_schema())
    with op.batch_alter_table("memory_entries", schema=_table_schema()) as batch:
        batch.drop_column("user_id")
