"""Compare keys byte-wise on PostgreSQL (COLLATE "C").

Revision ID: 0004_postgres_key_collation_c
Revises: 0003_sqlite_json_as_text
Create Date: 2026-11-23

Listing entries by key prefix uses the range ``key >= 'turn:' AND key <
'turn;'`` and orders by key.  Under a linguistic collation (ICU, or glibc
locales such as en_US.UTF-8) ``'turn;'`` sorts before ``'turn:'``, so the range
was empty and conversation histories came back empty.  With the C collation
the column sorts by code point, like Python and SQLite, and the index still
serves the range.  SQLite is unchanged (it compares with BINARY already).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from firefly_orm.migrate import revision_schema

revision: str = "0004_postgres_key_collation_c"
down_revision: str | Sequence[str] | None = "0003_sqlite_json_as_text"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _schema() -> str | None:
    # Alembic's ALTER COLUMN does not follow schema_translate_map, so name the
    # schema: the host's choice in mode (b), else the one our env migrates.
    return revision_schema() or op.get_context().version_table_schema


def _set_collation(collation: str | None) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.alter_column(
        "memory_entries",
        "key",
        type_=sa.String(collation=collation),
        existing_type=sa.String(),
        existing_nullable=True,
        schema=_schema(),
    )


def upgrade() -> None:
    _set_collation("C")


def downgrade() -> None:
    _set_collation("default")
