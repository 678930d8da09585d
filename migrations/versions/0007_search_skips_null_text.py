"""Full-text index: rows without ``search_text`` cost nothing to write.

Revision ID: 0007_search_skips_null_text
Revises: 0006_full_text_search
Create Date: 2026-12-01

Most rows (conversation turns and heads, working facts) have ``search_text IS
NULL``.  Under 0006 every INSERT of such a row still paid for the search index:
PostgreSQL set up and called the generated column's SQL function (to get
NULL), SQLite's AFTER INSERT trigger wrote an empty FTS5 document (and the
DELETE trigger removed it again).

PostgreSQL
    ``search_vector`` stops being a generated column (``ALTER COLUMN ... DROP
    EXPRESSION``, PostgreSQL 13 or later: a catalog change under a short ACCESS
    EXCLUSIVE lock, no table rewrite; the stored vectors and the partial GIN
    index ``ix_memory_entries_search`` stay as they are).  The trigger function
    ``firefly_orm_search_vector_fill()`` sets it to
    ``firefly_orm_search_vector(search_language, search_text)`` (0006's
    function, called by its schema-qualified name: the body is resolved when it
    runs, whatever the writing session's search_path), or NULL without text;
    two BEFORE ROW triggers call it:

    * ``memory_entries_search_insert``, ``WHEN (NEW.search_text IS NOT NULL OR
      NEW.search_vector IS NOT NULL)``;
    * ``memory_entries_search_update``, ``WHEN`` ``search_text``,
      ``search_language`` or ``search_vector`` changes.

    A row without text costs one ``WHEN`` test; a vector written by hand is
    recomputed (or cleared), so the column always equals the function of the
    row's text.  Chosen over re-adding the generated column as ``CASE WHEN
    search_text IS NULL THEN NULL ELSE ... END`` by measurement on PostgreSQL 15
    (backend CPU, medians of 9 paired rounds): a one-row INSERT without text
    costs 44 µs, as on a table without any vector (43), where the CASE column
    costs 59 and 0006 73 (each statement still prepares the column's
    expression, trying to inline the SQL function); an upsert without text
    10.7 µs per row (none 10.0, CASE 11.4, 0006 14.0); an INSERT with text
    about the same as 0006 (one-row statements 90 µs against 96; in a
    20,000-row statement 37.6 against 35.5 µs per row: the PL/pgSQL call); and
    this upgrade is instant where the CASE column rewrites the table and
    rebuilds the GIN index under an ACCESS EXCLUSIVE lock (2.7 s for 200,000
    rows).

SQLite
    The FTS5 table indexes only rows with text.  Its external content becomes
    the view ``memory_entries_searchable(entry_rowid, search_text)`` (the rows
    of ``memory_entries`` whose ``search_text`` is not NULL), so FTS5's
    ``rebuild`` and ``integrity-check`` compare the index with exactly the
    rows it should hold (against the whole table, a row left out reads as
    corruption, and ``rebuild`` would index every row again).  The triggers
    keep their names and gain ``WHEN`` clauses:

    * INSERT: only when ``new.search_text IS NOT NULL``;
    * DELETE: only when ``old.search_text IS NOT NULL``.  An FTS5 ``'delete'``
      of a rowid the index does not hold is not a no-op: it still decrements
      the row count and token totals, and corrupts the index;
    * UPDATE (the text or the rowid changes, and one side has text): the old
      document is deleted only if the old text was not NULL, the new one
      inserted only if the new text is not NULL (``INSERT ... SELECT ... WHERE``
      in one trigger, so the delete always runs first).

    The FTS5 table is dropped and created again with the new content option,
    then filled by ``rebuild``, which leaves out the empty documents 0006 wrote
    for rows without text.  An INSERT without text now changes one row instead
    of four (``total_changes``) and executes 77k instructions instead of 98k
    (70k without any FTS table; callgrind, Python's call included); a DELETE
    39k instead of 57k (32k); ``add_turn`` 2.20M instead of 2.23M.
    ``bm25()`` now counts only searchable rows (0006's row count and average
    length included every empty document): which rows match is unchanged;
    scores, and so the order of rows matching different words of one query,
    may shift.

    A later revision that copies ``memory_entries`` (Alembic batch mode) must
    drop the view first (SQLite's ``ALTER TABLE ... RENAME`` refuses a schema
    whose view names a missing table), then create the view and the triggers
    again and run ``rebuild``.

Downgrade restores the objects of 0006 exactly: on PostgreSQL the triggers and
their function are dropped and the generated column and its GIN index created
again (a table rewrite); on SQLite the FTS5 table over ``memory_entries``, its
three triggers without ``WHEN`` clauses, and a ``rebuild`` (every row indexed
again, NULL text as an empty document).  Both directions work in a named schema
and offline (``--sql``).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from firefly_orm.migrate import revision_schema

revision: str = "0007_search_skips_null_text"
down_revision: str | Sequence[str] | None = "0006_full_text_search"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "memory_entries"
# PostgreSQL (the column, index and function of 0006; the trigger function and triggers of 0007).
VECTOR = "search_vector"
INDEX = "ix_memory_entries_search"
FUNCTION = "firefly_orm_search_vector"
FILL_FUNCTION = "firefly_orm_search_vector_fill"
INSERT_TRIGGER = "memory_entries_search_insert"
UPDATE_TRIGGER = "memory_entries_search_update"
# SQLite.
FTS = "memory_entries_fts"
SOURCE_VIEW = "memory_entries_searchable"
FTS_OPTIONS = "content_rowid='{rowid}', tokenize='unicode61 remove_diacritics 0'"

_SQLITE_0006_TRIGGERS = {
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

_SQLITE_0007_TRIGGERS = {
    "memory_entries_fts_insert": f"""
        CREATE TRIGGER memory_entries_fts_insert AFTER INSERT ON {TABLE}
        WHEN new.search_text IS NOT NULL BEGIN
            INSERT INTO {FTS}(rowid, search_text) VALUES (new.rowid, new.search_text);
        END""",
    "memory_entries_fts_delete": f"""
        CREATE TRIGGER memory_entries_fts_delete AFTER DELETE ON {TABLE}
        WHEN old.search_text IS NOT NULL BEGIN
            INSERT INTO {FTS}({FTS}, rowid, search_text)
                VALUES ('delete', old.rowid, old.search_text);
        END""",
    "memory_entries_fts_update": f"""
        CREATE TRIGGER memory_entries_fts_update AFTER UPDATE ON {TABLE}
        WHEN (old.search_text IS NOT new.search_text OR old.rowid IS NOT new.rowid)
            AND (old.search_text IS NOT NULL OR new.search_text IS NOT NULL) BEGIN
            INSERT INTO {FTS}({FTS}, rowid, search_text)
                SELECT 'delete', old.rowid, old.search_text WHERE old.search_text IS NOT NULL;
            INSERT INTO {FTS}(rowid, search_text)
                SELECT new.rowid, new.search_text WHERE new.search_text IS NOT NULL;
        END""",
}


def _table_schema() -> str | None:
    # Raw DDL does not follow schema_translate_map: name the schema (as 0006 does).
    return revision_schema() or op.get_context().version_table_schema


def _qualified(name: str) -> str:
    """``name`` quoted, in the table's schema when there is one."""
    schema = _table_schema()
    preparer = op.get_context().dialect.identifier_preparer
    quoted = preparer.quote(name)
    return quoted if schema is None else f"{preparer.quote_schema(schema)}.{quoted}"


def _pg_create_fill_function() -> None:
    """The trigger function, calling 0006's function by its schema-qualified name.

    Its body is text, resolved when it runs: an unqualified name would follow
    the search_path of whichever session writes.  Without a configured schema
    the objects land in the migrating session's ``current_schema()``, so the
    name is built from that, in the database (this also works offline).
    """
    schema = _table_schema()
    schema_sql = "current_schema()" if schema is None else "'" + schema.replace("'", "''") + "'"
    op.execute(
        f"DO $do$ DECLARE s text := quote_ident({schema_sql}); BEGIN EXECUTE "
        f"'CREATE FUNCTION ' || s || '.{FILL_FUNCTION}() RETURNS trigger LANGUAGE plpgsql "
        f"AS $fn$ BEGIN NEW.{VECTOR} := CASE WHEN NEW.search_text IS NULL THEN NULL ELSE ' "
        f"|| s || '.{FUNCTION}(NEW.search_language, NEW.search_text) END; RETURN NEW; END $fn$'; "
        "END $do$"
    )


def _pg_upgrade() -> None:
    table = _qualified(TABLE)
    fill = _qualified(FILL_FUNCTION)
    op.execute(f"ALTER TABLE {table} ALTER COLUMN {VECTOR} DROP EXPRESSION")
    _pg_create_fill_function()
    op.execute(
        f"CREATE TRIGGER {INSERT_TRIGGER} BEFORE INSERT ON {table} FOR EACH ROW "
        f"WHEN (NEW.search_text IS NOT NULL OR NEW.{VECTOR} IS NOT NULL) "
        f"EXECUTE FUNCTION {fill}()"
    )
    op.execute(
        f"CREATE TRIGGER {UPDATE_TRIGGER} BEFORE UPDATE ON {table} FOR EACH ROW "
        "WHEN (NEW.search_text IS DISTINCT FROM OLD.search_text "
        "OR NEW.search_language IS DISTINCT FROM OLD.search_language "
        f"OR NEW.{VECTOR} IS DISTINCT FROM OLD.{VECTOR}) "
        f"EXECUTE FUNCTION {fill}()"
    )


def _pg_downgrade() -> None:
    table = _qualified(TABLE)
    for trigger in (UPDATE_TRIGGER, INSERT_TRIGGER):
        op.execute(f"DROP TRIGGER {trigger} ON {table}")
    op.execute(f"DROP FUNCTION {_qualified(FILL_FUNCTION)}()")
    # 0006's column and index, as 0006 creates them (a generation expression
    # cannot be added to an existing column).
    op.drop_index(INDEX, table_name=TABLE, schema=revision_schema())
    op.drop_column(TABLE, VECTOR, schema=_table_schema())
    op.add_column(
        TABLE,
        sa.Column(
            VECTOR,
            postgresql.TSVECTOR(),
            sa.Computed(f"{_qualified(FUNCTION)}(search_language, search_text)", persisted=True),
        ),
        schema=_table_schema(),
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


def _sqlite_replace(triggers: dict[str, str], content: str, rowid: str) -> None:
    """Recreate the FTS5 table over ``content`` with ``triggers``, and fill it."""
    for name in triggers:
        op.execute(f"DROP TRIGGER {name}")
    op.execute(f"DROP TABLE {FTS}")
    options = f"content='{content}', " + FTS_OPTIONS.format(rowid=rowid)
    op.execute(f"CREATE VIRTUAL TABLE {FTS} USING fts5(search_text, {options})")
    for ddl in triggers.values():
        op.execute(ddl)
    op.execute(f"INSERT INTO {FTS}({FTS}) VALUES ('rebuild')")


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    if dialect == "postgresql":
        _pg_upgrade()
    elif dialect == "sqlite":
        op.execute(
            f"CREATE VIEW {SOURCE_VIEW}(entry_rowid, search_text) AS SELECT rowid, search_text "
            f"FROM {TABLE} WHERE search_text IS NOT NULL"
        )
        _sqlite_replace(_SQLITE_0007_TRIGGERS, SOURCE_VIEW, "entry_rowid")


def downgrade() -> None:
    dialect = op.get_context().dialect.name
    if dialect == "postgresql":
        _pg_downgrade()
    elif dialect == "sqlite":
        _sqlite_replace(_SQLITE_0006_TRIGGERS, TABLE, "rowid")
        op.execute(f"DROP VIEW {SOURCE_VIEW}")
