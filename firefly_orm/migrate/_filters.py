"""Autogenerate filters: which objects are firefly_orm's (internal; see :mod:`firefly_orm.migrate`).

A host app's autogenerate must not see our tables (:func:`include_name`,
:func:`include_object`, :func:`autogenerate_filters`); our own environment
compares only our table, without the parts of the full-text index the model
does not describe (:func:`own_include_name`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from firefly_orm._layout import LISTING_INDEXES
from firefly_orm._search import is_search_index_object
from firefly_orm.entry import TABLE_NAME
from firefly_orm.migrate._config import VERSION_TABLE, validate_schema_name
from firefly_orm.sql._graph import GRAPH_TABLES
from firefly_orm.vector._spec import VECTOR_TABLE, VECTOR_VERSION_TABLE

__all__ = [
    "NameFilter",
    "ObjectFilter",
    "autogenerate_filters",
    "include_name",
    "include_object",
    "own_include_name",
]

_OUR_TABLES = frozenset(
    {TABLE_NAME, VERSION_TABLE, VECTOR_TABLE, VECTOR_VERSION_TABLE}
    | {table.name for table in GRAPH_TABLES}
)

NameFilter = Callable[[str | None, str, Any], bool]
ObjectFilter = Callable[[Any, str | None, str, bool, Any], bool]


def _is_ours(name: str | None) -> bool:
    """Our tables: the entries, the vectors, the knowledge graph, their version tables,
    SQLite's full-text index."""
    return name in _OUR_TABLES or is_search_index_object(name, "table")


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """For a HOST app's ``env.py``: keep firefly_orm's tables out of its autogenerate.

    Alembic's autogenerate (``alembic revision --autogenerate``, ``alembic
    check``) compares the app's models with the LIVE database, so without this
    filter it proposes to drop our tables.  Pass it as
    ``context.configure(include_name=firefly_orm.migrate.include_name)``, or
    use :func:`autogenerate_filters` to combine it with a filter of your own.
    It returns False for our tables (the entries, our version table, and on
    SQLite the FTS5 tables of the full-text index) and for every index,
    constraint and column of theirs, True for everything else.
    """
    if type_ == "table":
        return not _is_ours(name)
    parent = parent_names.get("table_name") if isinstance(parent_names, Mapping) else None
    return not _is_ours(parent)


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """``include_object`` twin of :func:`include_name` (also filters our indexes)."""
    if type_ == "table":
        return not _is_ours(name)
    table = getattr(obj, "table", None)
    return not (table is not None and _is_ours(getattr(table, "name", None)))


def autogenerate_filters(
    *,
    include_name: NameFilter | None = None,
    include_object: ObjectFilter | None = None,
    schema_name: str | None = None,
) -> dict[str, Any]:
    """``context.configure`` keyword arguments that keep our objects out of autogenerate.

    Combines our filters with the app's own: an object is compared only when
    the app's filter (if any) AND ours keep it.  With ``schema_name`` (our
    tables in their own PostgreSQL schema), that whole schema is left out too,
    which matters when the app's env.py passes ``include_schemas=True``::

        context.configure(
            connection=connection,
            target_metadata=Base.metadata,
            **migrate.autogenerate_filters(include_name=my_include_name),
        )

    Raises:
        EntryValidationError: ``schema_name`` is not a valid schema name.
    """
    own_schema = validate_schema_name(schema_name)
    app_name, app_object = include_name, include_object

    def name_filter(name: str | None, type_: str, parent_names: Any) -> bool:
        if own_schema is not None and type_ == "schema" and name == own_schema:
            return False
        if not _our_name_filter(name, type_, parent_names):
            return False
        return app_name is None or bool(app_name(name, type_, parent_names))

    def object_filter(
        obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
    ) -> bool:
        if not _our_object_filter(obj, name, type_, reflected, compare_to):
            return False
        return app_object is None or bool(app_object(obj, name, type_, reflected, compare_to))

    return {"include_name": name_filter, "include_object": object_filter}


# The parameters of autogenerate_filters shadow the module's filters inside it.
_our_name_filter = include_name
_our_object_filter = include_object


def own_include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """Our env's filter: only our own table is compared or migrated, without the
    parts of the full-text index that the model does not describe (PostgreSQL's
    generated ``search_vector`` column and its GIN index) nor the expression indexes
    of the conversation list (:data:`~firefly_orm._layout.LISTING_INDEXES`)."""
    if type_ == "table":
        return name == TABLE_NAME
    if type_ == "index" and name in LISTING_INDEXES:
        return False
    return not is_search_index_object(name, type_)
