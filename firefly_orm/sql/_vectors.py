"""Vectors on SQL: ``memory_vectors`` (the vector migrations) written and searched.

The table (see ``migrations/vector_versions``): one row per entry with a
vector, ``(entry_id, namespace, model, dimensions, embedding)``; deleting an
entry deletes its vector (PostgreSQL ``ON DELETE CASCADE``, SQLite triggers),
and so does a change of its ``search_text`` or ``namespace``.

One statement per search, the filters (live, user, importance, kind, tags) in
its ``WHERE`` clause and the cut last.  SQLite: an exact scan of the
namespace's vectors of the spec (the ``(namespace, model, dimensions)``
index) with sqlite-vec's ``vec_distance_cosine`` over float32 BLOBs: a
filtered search never loses hits to the ``LIMIT``.  PostgreSQL: pgvector's
``<=>`` (cosine distance); for the sizes of
:data:`~firefly_orm.vector._spec.HNSW_DIMENSIONS` the distance is written as
the expression of that size's HNSW index (vector migration v002), and the
planner picks the index walk or the exact scan by cost (a small namespace in
a large table: the exact scan).  An index walk runs with
``hnsw.iterative_scan = strict_order`` (set on each connection of a store
built with ``vectors=True``): rows failing the filters do not use up the
limit, pgvector keeps walking until it is filled, up to its
``hnsw.max_scan_tuples`` (20,000 by default) visited rows, and the results
come in exact distance order.  The walk is approximate (HNSW); the exact scan
is not.  It keeps ``hnsw.ef_search`` candidates:
:data:`~firefly_orm.vector._spec.DEFAULT_EF_SEARCH` (set on each connection,
with the iterative scan), more for a search of many hits
(:func:`ef_search_for`).  Each search shape is built once
(:func:`_search_statement`), so SQLAlchemy reuses its compiled form.

Writes: on PostgreSQL the writers of one namespace's vectors take a
transaction-level advisory lock before they read the namespace's spec, so two
writers of different models cannot both fill an empty namespace; SQLite
serializes write transactions itself.

:class:`VectorMethods` gives :class:`~firefly_orm.sql._ops.SQLEntryRepository`
the :class:`~firefly_orm.protocols.VectorRepository` methods; they need a store
built with ``vectors=True`` (the flag travels on the engine as the execution
option :data:`VECTORS_OPTION`), and raise
:class:`~firefly_orm.vector.VectorUnavailableError` otherwise.
"""

from __future__ import annotations

import builtins
import functools
import json
import struct
import sys
from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Unpack

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.orm import Session

from firefly_orm._layout import ITEM_DEFAULT_KIND, ITEM_KIND_FIELD, ITEM_TAGS_FIELD
from firefly_orm._search import SearchHit
from firefly_orm.entry import MemoryEntry, utcnow, validate_namespace
from firefly_orm.errors import EntryValidationError
from firefly_orm.sql import _statements as st
from firefly_orm.vector._errors import VectorUnavailableError
from firefly_orm.vector._spec import (
    DEFAULT_EF_SEARCH,
    EF_SEARCH_PER_HIT,
    HNSW_DIMENSIONS,
    MAX_EF_SEARCH,
    MAX_MODEL_NAME_LENGTH,
    VECTOR_TABLE,
    EmbeddingMismatchError,
    EmbeddingSpec,
    VectorRequest,
    VectorSearchOptions,
    check_vector,
)
from firefly_orm.vector._sqlite_vec import load_sqlite_vec, sqlite_vec_module

__all__ = [
    "VECTORS",
    "VECTORS_OPTION",
    "VectorMethods",
    "install_vector_hooks",
    "vector_engine_options",
]

#: The engine execution option a store built with ``vectors=True`` sets.
VECTORS_OPTION = "firefly_orm_vectors"

VECTORS = sa.Table(
    VECTOR_TABLE,
    sa.MetaData(),
    sa.Column("entry_id", sa.String(64), primary_key=True),
    sa.Column("namespace", sa.String(), nullable=False),
    sa.Column("model", sa.String(MAX_MODEL_NAME_LENGTH), nullable=False),
    sa.Column("dimensions", sa.Integer(), nullable=False),
    sa.Column("embedding", sa.LargeBinary(), nullable=False),
)
_V = VECTORS.c
_E = st.TABLE.c
_P = sa.bindparam
_LIVE = sa.or_(_E.expires_at.is_(None), _E.expires_at > _P("now"))
_OF_SPEC = sa.and_(_V.namespace == _P("ns"), _V.model == _P("model"), _V.dimensions == _P("dims"))

_LITTLE_ENDIAN = sys.byteorder == "little"
#: PostgreSQL: this connection's ``hnsw.ef_search`` (session-level; see :func:`ef_search_for`).
_SET_EF_SEARCH = sa.text("SELECT set_config('hnsw.ef_search', :ef, false)")

#: PostgreSQL: the transaction lock of a namespace's vector writes (``pg_advisory_xact_lock``
#: of this class and the namespace's hash; a hash collision only makes two namespaces
#: take turns).
_LOCK_KEY = 0x0F1F_0029
_LOCK_NAMESPACE = sa.text("SELECT pg_advisory_xact_lock(:key, hashtext(:ns))")

_SPEC = sa.select(_V.model, _V.dimensions).where(_V.namespace == _P("ns")).limit(1)
_IDS_IN = sa.select(_E.entry_id).where(
    _E.namespace == _P("ns"), _E.entry_id.in_(_P("eids", expanding=True))
)
_DROP = sa.delete(VECTORS).where(_V.namespace == _P("ns"))
_UNEMBEDDED = (
    sa.select(*st.COLUMNS)
    .where(
        _E.namespace == _P("ns"),
        _E.search_text.is_not(None),
        _LIVE,
        ~sa.exists().where(_V.entry_id == _E.entry_id),
    )
    .order_by(_E.created_at, _E.entry_id)
    .limit(_P("limit"))
)


# --------------------------------------------------------------------------- engines


def vector_engine_options(url: URL, is_async: bool, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``create_engine`` arguments for vectors: SQLite's DB-API module that loads sqlite-vec.

    Raises:
        EntryValidationError: An async SQLite engine (aiosqlite) for vectors.
        VectorUnavailableError: No SQLite module of this Python loads extensions.
    """
    if url.get_backend_name() != "sqlite":
        return kwargs
    if is_async:
        raise EntryValidationError(
            "async_url", "vectors on SQLite run on the sync engine: leave async_url unset"
        )
    return {"module": sqlite_vec_module(), **kwargs}


def install_vector_hooks(engine: Engine) -> None:
    """On each new connection of an engine the store built: SQLite loads sqlite-vec,
    PostgreSQL turns on pgvector's iterative index scans (:func:`_iterative_index_scans`)."""
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", lambda conn, _record: load_sqlite_vec(conn))
    elif engine.dialect.name == "postgresql":
        event.listen(engine, "connect", _iterative_index_scans)


def _iterative_index_scans(dbapi_connection: Any, _record: Any) -> None:
    """pgvector: HNSW walks go on until a filtered query's limit is filled (in exact order),
    visiting :data:`~firefly_orm.vector._spec.DEFAULT_EF_SEARCH` candidates at least.

    Committed: a ``SET`` in a transaction that rolls back is undone.
    """
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("SET hnsw.iterative_scan = strict_order")
        cursor.execute(f"SET hnsw.ef_search = {int(DEFAULT_EF_SEARCH)}")
    finally:
        cursor.close()
    dbapi_connection.commit()


class _PgVector(sa.types.UserDefinedType[Any]):
    """pgvector's ``vector`` type (``vector(n)`` with ``dimensions``), for a ``CAST``."""

    cache_ok = True

    def __init__(self, dimensions: int | None = None) -> None:
        self.dimensions = dimensions

    def get_col_spec(self, **kw: Any) -> str:
        return "vector" if self.dimensions is None else f"vector({self.dimensions})"


#: Runs a statement with its parameters on the repository's transaction (the
#: SQL repository's own ``_execute``, which applies the schema mapping).
Run = Callable[[Any, Any], Any]


def _connection(target: Session | Connection) -> Connection:
    return target if isinstance(target, Connection) else target.connection()


def _require(target: Session | Connection) -> None:
    """Refuse unless the store was built with ``vectors=True`` (its tables migrated).

    A store's engines carry :data:`VECTORS_OPTION`; a caller's session joined
    by such a store carries it in ``session.info`` while the work runs.
    """
    if isinstance(target, Session):
        marked = target.info.get(VECTORS_OPTION)
    else:
        marked = target.get_execution_options().get(VECTORS_OPTION)
    if not marked:
        raise VectorUnavailableError(
            "this SQL store keeps no vectors: build it with vectors=True (SQLiteStore(..., "
            "vectors=True), PostgreSQLStore(..., vectors=True)), which migrates the vector "
            "tables (`firefly-orm migrate --vectors`)"
        )


def _bound(dialect: str, vector: Sequence[float]) -> Any:
    """A vector as the database takes it: pgvector's text form, or float32 little-endian bytes.

    ``vector`` holds Python floats (:func:`~firefly_orm.vector._spec.check_vector`'s
    output): ``repr`` is their shortest exact text.
    """
    if dialect == "postgresql":
        return "[" + ",".join(map(repr, vector)) + "]"
    return (
        array("f", vector).tobytes() if _LITTLE_ENDIAN else struct.pack(f"<{len(vector)}f", *vector)
    )


def _vector_expression(dialect: str, name: str, dimensions: int | None = None) -> Any:
    """SQL of the bound vector ``:name`` in the column's type (``vector(dimensions)``)."""
    if dialect == "postgresql":
        # Text first, which every driver binds; then pgvector's input function.
        return sa.cast(sa.cast(_P(name, type_=sa.Text()), sa.Text()), _PgVector(dimensions))
    return _P(name, type_=sa.LargeBinary())


def _distance(dialect: str, dimensions: int) -> Any:
    """The cosine distance of a row's vector and ``:q``.

    PostgreSQL, for a size of :data:`~firefly_orm.vector._spec.HNSW_DIMENSIONS`:
    both sides cast to ``vector(<size>)``, the expression of that size's HNSW
    index (so the planner may walk it; the ``dimensions`` filter matches its
    predicate).
    """
    if dialect == "postgresql":
        column: Any
        if dimensions in HNSW_DIMENSIONS:
            column = sa.cast(_V.embedding, _PgVector(dimensions))
            query = _vector_expression(dialect, "q", dimensions)
        else:
            column, query = _V.embedding, _vector_expression(dialect, "q")
        return column.op("<=>", return_type=sa.Float())(query)
    query = _vector_expression(dialect, "q")
    if dialect == "sqlite":
        return sa.func.vec_distance_cosine(_V.embedding, query, type_=sa.Float())
    raise VectorUnavailableError(f"vectors are not available on {dialect}")


def _kind_and_tags(dialect: str, kind: bool, tags: int) -> list[Any]:
    """The ``WHERE`` terms of the long-term ``kind`` and ``tags`` filters (``tags`` of them)."""
    terms: list[Any] = []
    if kind:
        if dialect == "postgresql":
            field = f"e.content ->> '{ITEM_KIND_FIELD}'"
        else:
            field = f"json_extract(e.content, '$.{ITEM_KIND_FIELD}')"
        terms.append(sa.text(f"COALESCE({field}, :default_kind) = :kind"))
    if tags and dialect == "postgresql":
        terms.append(sa.text(f"(e.content -> '{ITEM_TAGS_FIELD}') @> CAST(:tags AS jsonb)"))
    elif tags:
        for i in range(tags):
            terms.append(
                sa.text(
                    f"EXISTS (SELECT 1 FROM json_each(e.content, '$.{ITEM_TAGS_FIELD}') "
                    f"WHERE json_each.value = :tag{i} AND json_each.type = 'text')"
                )
            )
    return terms


@functools.lru_cache(maxsize=512)
def _search_statement(
    dialect: str,
    dimensions: int,  # an HNSW size, else 0
    user: bool,
    importance: bool,
    kind: bool,
    tags: int,
    limit: bool,
) -> Any:
    """The search of one shape, built once (SQLAlchemy then reuses its compiled form).

    The distance is selected once, as ``distance``, and the rows are ordered by
    that column: SQLite computes ``vec_distance_cosine`` once per row (an
    expression repeated in ``ORDER BY`` would be computed twice), and
    PostgreSQL's ``ORDER BY`` is still the HNSW index's expression.  The score
    (``1 - distance``) is computed from the row.
    """
    distance = _distance(dialect, dimensions).label("distance")
    entries = st.TABLE.alias("e")
    e = entries.c
    stmt = (
        sa.select(*[e[c.name] for c in st.COLUMNS], distance)
        .select_from(VECTORS.join(entries, e.entry_id == _V.entry_id))
        .where(_OF_SPEC, e.namespace == _P("ns"))
        .where(sa.or_(e.expires_at.is_(None), e.expires_at > _P("now")))
    )
    if user:
        stmt = stmt.where(e.user_id == _P("uid"))
    if importance:
        stmt = stmt.where(e.importance >= _P("imp"))
    for term in _kind_and_tags(dialect, kind, tags):
        stmt = stmt.where(term)
    stmt = stmt.order_by(distance, e.importance.desc(), e.created_at.desc(), e.entry_id.desc())
    return stmt.limit(_P("limit")) if limit else stmt


def _search_params(dialect: str, request: VectorRequest) -> dict[str, Any]:
    params: dict[str, Any] = {
        "ns": request.namespace,
        "model": request.spec.model,
        "dims": request.spec.dimensions,
        "q": _bound(dialect, request.vector),
        "now": utcnow(),
    }
    if request.user_id is not None:
        params["uid"] = request.user_id
    if request.min_importance is not None:
        params["imp"] = request.min_importance
    if request.kind is not None:
        params["kind"] = request.kind
        params["default_kind"] = ITEM_DEFAULT_KIND
    if request.tags and dialect == "postgresql":
        params["tags"] = json.dumps(list(request.tags))
    else:
        params.update({f"tag{i}": tag for i, tag in enumerate(request.tags)})
    if request.limit is not None:
        params["limit"] = request.limit
    return params


def ef_search_for(limit: int | None) -> int | None:
    """pgvector's ``hnsw.ef_search`` for a search of ``limit`` hits (``None``: the default).

    :data:`~firefly_orm.vector._spec.DEFAULT_EF_SEARCH` (set on each
    connection) serves a limit up to ``DEFAULT_EF_SEARCH / EF_SEARCH_PER_HIT``
    (40); a larger limit keeps ``limit * EF_SEARCH_PER_HIT`` candidates, at
    most pgvector's :data:`~firefly_orm.vector._spec.MAX_EF_SEARCH`.  Without
    a limit the search is exact (the planner does not walk the index).
    """
    if limit is None or limit * EF_SEARCH_PER_HIT <= DEFAULT_EF_SEARCH:
        return None
    return min(limit * EF_SEARCH_PER_HIT, MAX_EF_SEARCH)


def vector_search(run: Run, dialect: str, request: VectorRequest) -> list[SearchHit]:
    """The entries nearest ``request.vector``, filters inside the one scan."""
    if request.finds_nothing:
        return []
    dimensions = request.spec.dimensions
    stmt = _search_statement(
        dialect,
        dimensions if dimensions in HNSW_DIMENSIONS else 0,  # one statement for the others
        request.user_id is not None,
        request.min_importance is not None,
        request.kind is not None,
        len(request.tags),
        request.limit is not None,
    )
    params = _search_params(dialect, request)
    ef_search = ef_search_for(request.limit) if dialect == "postgresql" else None
    if ef_search is None:
        rows = run(stmt, params).all()
    else:  # session-level, then back: a SET LOCAL would be lost in autocommit
        run(_SET_EF_SEARCH, {"ef": str(ef_search)})
        try:
            rows = run(stmt, params).all()
        finally:
            run(_SET_EF_SEARCH, {"ef": str(DEFAULT_EF_SEARCH)})
    return [SearchHit(st.row_to_entry(row), 1.0 - float(row[-1])) for row in rows]


def embedding_spec(run: Run, namespace: str) -> EmbeddingSpec | None:
    """The spec of ``namespace``'s vectors (``None``: it has none)."""
    row = run(_SPEC, {"ns": namespace}).first()
    return None if row is None else EmbeddingSpec(row[0], int(row[1]))


def save_vectors(
    run: Run,
    dialect: str,
    namespace: str,
    spec: EmbeddingSpec,
    vectors: Mapping[str, Sequence[float]],
) -> None:
    """Store the vectors (checked first: spec, lengths, ids; nothing written on a refusal)."""
    checked = {
        entry_id: check_vector(vector, spec, f"vectors[{entry_id!r}]")
        for entry_id, vector in vectors.items()
    }
    if not checked:
        return
    if dialect == "postgresql":
        # Writers of one namespace's vectors take turns until they commit: the spec
        # read next then sees a committed writer's vectors (READ COMMITTED takes a
        # snapshot per statement), so two models cannot both start an empty
        # namespace.  SQLite's write transactions are serialized already (BEGIN
        # IMMEDIATE; a deferred one that read first cannot write after another).
        run(_LOCK_NAMESPACE, {"key": _LOCK_KEY, "ns": namespace})
    stored = embedding_spec(run, namespace)
    if stored is not None and stored != spec:
        raise EmbeddingMismatchError(namespace, stored, spec)
    ids = list(checked)
    found = set(run(_IDS_IN, {"ns": namespace, "eids": ids}).scalars())
    missing = [entry_id for entry_id in ids if entry_id not in found]
    if missing:
        raise EntryValidationError(
            "vectors", f"{missing[0]!r} is no entry of namespace {namespace!r}"
        )
    insert: Any = (
        sa.dialects.postgresql.insert(VECTORS)
        if dialect == "postgresql"
        else sa.dialects.sqlite.insert(VECTORS)
    )
    value = _vector_expression(dialect, "embedding")
    stmt = insert.values(
        entry_id=_P("eid"),
        namespace=_P("ns"),
        model=_P("model"),
        dimensions=_P("dims"),
        embedding=value,
    )
    stmt = stmt.on_conflict_do_update(
        index_elements=[_V.entry_id],
        set_={
            "namespace": stmt.excluded.namespace,
            "model": stmt.excluded.model,
            "dimensions": stmt.excluded.dimensions,
            "embedding": stmt.excluded.embedding,
        },
    )
    rows = [
        {
            "eid": entry_id,
            "ns": namespace,
            "model": spec.model,
            "dims": spec.dimensions,
            "embedding": _bound(dialect, vector),
        }
        for entry_id, vector in checked.items()
    ]
    run(stmt, rows)  # one executemany


def unembedded(run: Run, namespace: str, limit: int) -> list[MemoryEntry]:
    """Up to ``limit`` live entries with text and no vector, oldest first."""
    params = {"ns": namespace, "now": utcnow(), "limit": limit}
    return [st.row_to_entry(row) for row in run(_UNEMBEDDED, params)]


class VectorMethods:
    """The :class:`~firefly_orm.protocols.VectorRepository` methods of the SQL repository.

    The repository gives :attr:`session` (its transaction's Session or
    Connection) and :meth:`_execute` (a statement run on it, schema mapped).
    """

    session: Session | Connection

    def _execute(self, stmt: Any, params: Any) -> Any:
        raise NotImplementedError

    def _vector_connection(self) -> tuple[Run, str]:
        """``(run, dialect)`` after checking the store keeps vectors."""
        _require(self.session)
        return self._execute, str(_connection(self.session).dialect.name)

    def save_vectors(
        self, namespace: str, spec: EmbeddingSpec, vectors: Mapping[str, Sequence[float]]
    ) -> None:
        """Store these entries' vectors (see ``VectorRepository.save_vectors``)."""
        validate_namespace(namespace)
        if not isinstance(spec, EmbeddingSpec):
            raise EntryValidationError("spec", f"must be an EmbeddingSpec, got {spec!r}")
        run, dialect = self._vector_connection()
        save_vectors(run, dialect, namespace, spec, vectors)

    def vector_search(
        self,
        namespace: str,
        vector: Sequence[float],
        spec: EmbeddingSpec,
        **options: Unpack[VectorSearchOptions],
    ) -> builtins.list[SearchHit]:
        """The nearest live entries (see ``VectorRepository.vector_search``)."""
        request = VectorRequest.build(namespace, vector, spec, **options)
        run, dialect = self._vector_connection()
        return vector_search(run, dialect, request)

    def embedding_spec(self, namespace: str) -> EmbeddingSpec | None:
        """The spec of ``namespace``'s vectors (``None``: none stored)."""
        validate_namespace(namespace)
        return embedding_spec(self._vector_connection()[0], namespace)

    def unembedded(self, namespace: str, *, limit: int) -> builtins.list[MemoryEntry]:
        """Live entries with text and no vector, oldest first, at most ``limit``."""
        validate_namespace(namespace)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise EntryValidationError("limit", f"must be a non-negative integer, got {limit!r}")
        return unembedded(self._vector_connection()[0], namespace, limit)

    def drop_vectors(self, namespace: str) -> None:
        """Delete every vector of ``namespace`` (its entries stay)."""
        validate_namespace(namespace)
        self._vector_connection()[0](_DROP, {"ns": namespace})
