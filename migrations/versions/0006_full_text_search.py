"""Full-text search over ``search_text``: SQLite FTS5, PostgreSQL tsvector + GIN.

Revision ID: 0006_full_text_search
Revises: 0005_user_id
Create Date: 2026-11-24

Both databases get two nullable columns in the model: ``search_text`` (the text
to index; NULL: not searchable) and ``search_language`` (a PostgreSQL text-search
configuration name; NULL means ``simple``).  Existing rows get NULL.

PostgreSQL
    ``search_vector tsvector GENERATED ALWAYS AS
    (firefly_orm_search_vector(search_language, search_text)) STORED`` and the
    GIN index ``ix_memory_entries_search`` on it.  The function (created in the
    table's schema) is ``to_tsvector(coalesce(language, 'simple')::regconfig,
    text)`` declared IMMUTABLE, which a generated column requires (the cast from
    text to ``regconfig`` alone is only STABLE).  Language is therefore chosen
    per row, without a ``regconfig`` column (``pg_upgrade`` refuses tables with
    one).  Rows write ``search_text``/``search_language``; the database computes
    the vector.  The index is partial (rows without ``search_text`` cost it
    nothing; ``vector @@ query`` implies the predicate, as ``@@`` is strict) and
    built with ``fastupdate = off``: new rows go straight into the index instead
    of a pending list that every search would scan and the planner would price
    as a scan (only autovacuum, not ANALYZE, empties it).  Neither the vector
    column nor the index is in the SQLAlchemy
    model: :func:`firefly_orm.migrate.include_name` leaves them out of
    comparisons.

SQLite
    The FTS5 external-content table ``memory_entries_fts(search_text)``
    (``content='memory_entries', content_rowid='rowid'``, tokenizer ``unicode61
    remove_diacritics 0``) indexes every row, NULL text as an empty document, so
    the index always matches the table row for row (FTS5's ``integrity-check``
    holds).  Three triggers keep it in sync: after INSERT, after DELETE, and after
    an UPDATE that changes ``search_text`` or the rowid (upserts are ``INSERT ...
    ON CONFLICT DO UPDATE``, which fires the UPDATE trigger, never DELETE +
    INSERT).  Existing rows are indexed by FTS5's ``rebuild``.  A later revision
    that copies the table (Alembic batch mode drops the old table and with it
    the triggers; copied rows may get new rowids) must recreate the triggers
    and run ``INSERT INTO memory_entries_fts(memory_entries_fts) VALUES
    ('rebuild')``; so must anyone who rewrites rowids by hand.

Downgrade removes everything (SQLite drops the columns through a batch copy,
inside the migration's transaction).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from firefly_orm.migrate import revision_schema

revision: str = "0006_full_text_search"
down_revision: str | Sequence[str] | None = "0005_user_id"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "memory_entries"
FTS = "memory_entries_fts"
VECTOR = "search_vector"
INDEX = "ix_memory_entries_search"
FUNCTION = "firefly_orm_search_vector"

_SQLITE_TRIGGERS = {
    "memory_entries_fts_insert": f"""
        CREATE TRIGGER memory_entries_fts_insert AFTER INSERT ON {TABLE} BEGIN
            INSERT INTO {FTS}(rowid, search_text) VALUES (new.rowid, new.search_text);
        END""",
    "memory_entries_fts_delete": f"""
        CREATE TRIGGER memory_entries_fts_delete AFTER DELETE ON {TABLE} BEGIN
            INSERT INTO {FTS}({FTS}, rowid, search_text)
                VALUES ('delete', old.rowid, old.search_text);
        END""",
    "memory_entries_fts_update": f"""
        CREATE TRIGGER memory_entries_fts_update AFTER UPDATE ON {TABLE}
        WHEN old.search_text IS NOT new.search_text OR old.rowid IS NOT new.rowid BEGIN
            INSERT INTO {FTS}({FTS}, rowid, search_text)
                VALUES ('delete', old.rowid, old.search_text);
            INSERT INTO {FTS}(rowid, search_text) VALUES (new.rowid, new.search_text);
        END""",
}


def _table_schema() -> str | None:
    # ADD/DROP COLUMN and raw DDL do not follow schema_translate_map: name the schema.
    return revision_schema() or op.get_context().version_table_schema


def _function_name() -> str:
    schema = _table_schema()
    preparer = op.get_context().dialect.identifier_preparer
    name = preparer.quote(FUNCTION)
    return name if schema is None else f"{preparer.quote_schema(schema)}.{name}"


def upgrade() -> None:
    schema = _table_schema()
    op.add_column(TABLE, sa.Column("search_text", sa.Text(), nullable=True), schema=schema)
    op.add_column(TABLE, sa.Column("search_language", sa.String(63), nullable=True), schema=schema)
    dialect = op.get_context().dialect.name
    if dialect == "postgresql":
        function = _function_name()
        op.execute(
            f"CREATE FUNCTION {function}(language text, document text) RETURNS tsvector "
            "LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT pg_catalog.to_tsvector("
            "COALESCE($1, 'simple')::pg_catalog.regconfig, $2) $$"
        )
        op.add_column(
            TABLE,
            sa.Column(
                VECTOR,
                postgresql.TSVECTOR(),
                sa.Computed(f"{function}(search_language, search_text)", persisted=True),
            ),
            schema=schema,
        )
        op.create_index(
            INDEX,
            TABLE,
            [VECTOR],
            postgresql_using="gin",
            postgresql_with={"fastupdate": "off"},
            postgresql_where=sa.text(f"{VECTOR} IS NOT NULL"),
            schema=revision_schema(),
        )
    elif dialect == "sqlite":
        op.execute(
            f"CREATE VIRTUAL TABLE {FTS} USING fts5(search_text, content='{TABLE}', "
            "content_rowid='rowid', tokenize='unicode61 remove_diacritics 0')"
        )
        for ddl in _SQLITE_TRIGGERS.values():
            op.execute(ddl)
        op.execute(f"INSERT INTO {FTS}({FTS}) VALUES ('rebuild')")


def downgrade() -> None:
    schema = _table_schema()
    dialect = op.get_context().dialect.name
    if dialect == "postgresql":
        op.drop_index(INDEX, table_name=TABLE, schema=revision_schema())
        op.drop_column(TABLE, VECTOR, schema=schema)
        op.execute(f"DROP FUNCTION {_function_name()}(text, text)")
    elif dialect == "sqlite":
        for name in _SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER {name}")
        op.execute(f"DROP TABLE {FTS}")
    with op.batch_alter_table(TABLE, schema=schema) as batch:
        batch.drop_column("search_language")
        batch.drop_column("search_text")
