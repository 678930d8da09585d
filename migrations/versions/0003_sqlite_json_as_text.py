"""Store JSON as TEXT on SQLite.

Revision ID: 0003_sqlite_json_as_text
Revises: 0002_key_index_entry_id
Create Date: 2026-11-23

A SQLite column declared ``JSON`` has NUMERIC affinity: a top-level JSON number
such as ``1.0`` was stored as the integer ``1`` and a large integer as a float.
Declared ``TEXT``, the JSON text is kept verbatim.  PostgreSQL (JSONB) is
unchanged.  Values stored before this revision keep whatever SQLite made of
them.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from firefly_orm.migrate import revision_schema

revision: str = "0003_sqlite_json_as_text"
down_revision: str | Sequence[str] | None = "0002_key_index_entry_id"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = ("content", "metadata")


def _retype(old: sa.types.TypeEngine[object], new: sa.types.TypeEngine[object]) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    with op.batch_alter_table(
        "memory_entries",
        schema=revision_schema(),
        recreate="always",
        naming_convention={"ck": "%(constraint_name)s"},
    ) as batch:
        for column in _COLUMNS:
            batch.alter_column(column, type_=new, existing_type=old, existing_nullable=False)


def upgrade() -> None:
    _retype(sa.JSON(), sa.Text())


def downgrade() -> None:
    _retype(sa.Text(), sa.JSON())
