"""Vectors beside the entries: the ``memory_vectors`` table, kept in step with ``memory_entries``.

Revision ID: v001_memory_vectors
Revises: (the first revision of the vector history)
Create Date: 2026-11-28

The first revision of the vector history (:mod:`firefly_orm.migrate._vectors`):
its own version table, ``firefly_orm_vector_alembic_version``, run only for
stores built with ``vectors=True`` and by ``firefly-orm migrate --vectors``,
after the main history is at head.  The main history never needs pgvector.

One row per entry that has a vector: ``entry_id`` (the entry's primary key),
``namespace``, ``model`` and ``dimensions`` (the embedding spec, one per
namespace) and ``embedding``.

PostgreSQL
    ``CREATE EXTENSION IF NOT EXISTS vector`` first (a server without
    pgvector, or a role that may not create it, is refused with
    :class:`~firefly_orm.vector.VectorUnavailableError` saying what to do;
    nothing is written).  ``embedding`` is a ``vector`` without a fixed
    dimension (namespaces may use models of different sizes; a CHECK ties its
    length to ``dimensions``).  ``entry_id`` REFERENCES ``memory_entries`` ON
    DELETE CASCADE: every delete of an entry (``delete``, ``clear``,
    ``erase_user``, expiry cleanup, eviction) removes its vector in the same
    statement.  A trigger, ``memory_entries_vector_stale``, deletes the vector
    of an entry whose ``search_text`` or ``namespace`` changes (the vector no
    longer describes it; the writer that embeds stores the new one after).

SQLite
    A plain table (``embedding`` a BLOB of little-endian float32, the format of
    ``sqlite-vec``, whose ``vec_distance_cosine`` the searches call) rather
    than a ``vec0`` virtual table: a ``vec0`` column has one fixed dimension
    for the whole table, and its KNN query filters only on its own metadata
    columns, where the searches filter on the entry's user, importance,
    expiry, kind and tags inside the scan.  No foreign key (the store does not
    turn on ``PRAGMA foreign_keys``): the triggers ``memory_entries_vector_delete``
    (AFTER DELETE) and ``memory_entries_vector_stale`` (as on PostgreSQL) do
    the cascade.  A later main revision that copies ``memory_entries`` (Alembic
    batch mode) drops these triggers with the old table and must create them
    again.

Downgrade drops the table, the triggers and the trigger function; it leaves
the ``vector`` extension installed (other tables of the database may use it).
"""

from collections.abc import Sequence

from alembic import op

from firefly_orm.entry import TABLE_NAME
from firefly_orm.migrate._vectors import ensure_pgvector, vector_schema
from firefly_orm.vector._spec import MAX_MODEL_NAME_LENGTH, VECTOR_TABLE

revision: str = "v001_memory_vectors"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = ("vector",)
depends_on: str | Sequence[str] | None = None

INDEX = "ix_memory_vectors_namespace"
STALE_TRIGGER = "memory_entries_vector_stale"
DELETE_TRIGGER = "memory_entries_vector_delete"
STALE_FUNCTION = "firefly_orm_vector_stale"


def _name(name: str) -> str:
    """``name`` quoted, in the migrated schema when there is one."""
    preparer = op.get_context().dialect.identifier_preparer
    schema = vector_schema()
    quoted = preparer.quote(name)
    return quoted if schema is None else f"{preparer.quote_schema(schema)}.{quoted}"


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    table, entries = _name(VECTOR_TABLE), _name(TABLE_NAME)
    if dialect == "postgresql":
        extension = ensure_pgvector(op.get_bind())
        op.execute(
            f"CREATE TABLE {table} ("
            f"entry_id varchar(64) PRIMARY KEY REFERENCES {entries} (entry_id) ON DELETE CASCADE, "
            "namespace varchar NOT NULL, "
            f"model varchar({MAX_MODEL_NAME_LENGTH}) NOT NULL, "
            "dimensions integer NOT NULL CHECK (dimensions > 0), "
            f"embedding {extension}.vector NOT NULL, "
            f"CHECK ({extension}.vector_dims(embedding) = dimensions))"
        )
        op.execute(f"CREATE INDEX {INDEX} ON {table} (namespace, model, dimensions)")
        op.execute(
            f"CREATE FUNCTION {_name(STALE_FUNCTION)}() RETURNS trigger LANGUAGE plpgsql AS $$ "
            f"BEGIN DELETE FROM {table} WHERE entry_id = OLD.entry_id; RETURN NULL; END $$"
        )
        op.execute(
            f"CREATE TRIGGER {STALE_TRIGGER} AFTER UPDATE OF namespace, search_text "
            f"ON {entries} FOR EACH ROW WHEN (OLD.namespace IS DISTINCT FROM NEW.namespace "
            "OR OLD.search_text IS DISTINCT FROM NEW.search_text) "
            f"EXECUTE FUNCTION {_name(STALE_FUNCTION)}()"
        )
    elif dialect == "sqlite":
        op.execute(
            f"CREATE TABLE {table} ("
            "entry_id VARCHAR(64) NOT NULL PRIMARY KEY, "
            "namespace VARCHAR NOT NULL, "
            f"model VARCHAR({MAX_MODEL_NAME_LENGTH}) NOT NULL, "
            "dimensions INTEGER NOT NULL, "
            "embedding BLOB NOT NULL, "
            "CHECK (dimensions > 0 AND length(embedding) = 4 * dimensions))"
        )
        op.execute(f"CREATE INDEX {INDEX} ON {table} (namespace, model, dimensions)")
        op.execute(
            f"CREATE TRIGGER {DELETE_TRIGGER} AFTER DELETE ON {entries} "
            f"BEGIN DELETE FROM {table} WHERE entry_id = old.entry_id; END"
        )
        op.execute(
            f"CREATE TRIGGER {STALE_TRIGGER} AFTER UPDATE OF namespace, search_text "
            f"ON {entries} WHEN old.namespace IS NOT new.namespace "
            "OR old.search_text IS NOT new.search_text "
            f"BEGIN DELETE FROM {table} WHERE entry_id = old.entry_id; END"
        )
    else:  # pragma: no cover - the stores refuse other databases
        raise NotImplementedError(f"vectors are not supported on {dialect}")


def downgrade() -> None:
    dialect = op.get_context().dialect.name
    entries = _name(TABLE_NAME)
    if dialect == "postgresql":
        op.execute(f"DROP TRIGGER {STALE_TRIGGER} ON {entries}")
        op.execute(f"DROP TABLE {_name(VECTOR_TABLE)}")
        op.execute(f"DROP FUNCTION {_name(STALE_FUNCTION)}()")
    else:
        op.execute(f"DROP TRIGGER {STALE_TRIGGER}")
        op.execute(f"DROP TRIGGER {DELETE_TRIGGER}")
        op.execute(f"DROP TABLE {_name(VECTOR_TABLE)}")
