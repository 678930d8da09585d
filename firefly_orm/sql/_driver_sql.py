"""Hot statements run as cached SQL text through ``Connection.exec_driver_sql``.

``Connection.execute`` of a Core statement builds the statement's cache key on
every call (a walk of the whole expression: hundreds of thousands of
instructions for the SQLite head bump, more than SQLite takes to run it), looks
the compiled form up, and builds its parameters through the compiled form's
machinery.  :func:`execute` compiles a statement once per dialect, schema map
and parameter names, keeps its SQL text, the order of its parameters, the
values of its literal parameters and the bind and result processors of their
types, and runs the text with ``exec_driver_sql`` on the same ``Connection``:
the engine's events (``before_cursor_execute`` ...), its DBAPI error wrapping,
its transaction and the store's schema (``schema_translate_map``, rendered into
the cached text) are kept; only the per-call compilation work goes.

Only on a ``Connection`` (a caller's ``Session`` keeps ``Session.execute``) and
for statements whose every parameter is a plain value: one with an
``expanding`` (``IN``) parameter, a column default computed in Python, or a
parameter the caller left out runs through ``Connection.execute`` as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Connection, Dialect

__all__ = [
    "DriverStatement",
    "driver_statement",
    "execute_first",
    "execute_rowcount",
    "execute_scalars",
]

_Processor = Callable[[Any], Any] | None
#: A placeholder whose value the caller gives (no fixed value).
_CALLER: Any = object()


@dataclass(frozen=True)
class DriverStatement:
    """A statement compiled once: its SQL text and how to bind and read it."""

    sql: str
    #: Parameter names in the order of the text's placeholders (positional
    #: paramstyles), else ``None`` (the parameters go as a mapping).
    order: tuple[str, ...] | None
    #: Values of the statement's own parameters (literals such as JSON paths).
    fixed: Mapping[str, Any]
    #: Bind processors of the parameters that have one.
    binds: Mapping[str, Callable[[Any], Any]]
    #: One result processor per returned column (``None``: the value as read).
    results: tuple[_Processor, ...]
    _steps: tuple[tuple[str, Any, _Processor], ...] = field(default=(), init=False, repr=False)

    def __post_init__(self) -> None:
        # Per placeholder: its name, its fixed value (or _CALLER's) and its processor.
        steps = tuple(
            (name, self.fixed.get(name, _CALLER), self.binds.get(name)) for name in self.order or ()
        )
        object.__setattr__(self, "_steps", steps)

    def parameters(self, params: Mapping[str, Any]) -> Any:
        """The DBAPI parameters of one execution with ``params``."""
        if self.order is not None:
            values = []
            for name, fixed, process in self._steps:
                value = params[name] if fixed is _CALLER else params.get(name, fixed)
                values.append(value if process is None else process(value))
            return tuple(values)
        binds = self.binds
        return {
            name: (value if (process := binds.get(name)) is None else process(value))
            for name, value in {**self.fixed, **params}.items()
        }

    def row(self, raw: Sequence[Any]) -> tuple[Any, ...]:
        """A returned row with its columns' result processors applied."""
        return tuple(
            value if process is None else process(value)
            for process, value in zip(self.results, raw, strict=True)
        )


#: Compiled forms by (statement, dialect, schema map, parameter names); ``None``:
#: the statement cannot run as driver SQL (it keeps ``Connection.execute``).
_CACHE: dict[tuple[Any, ...], DriverStatement | None] = {}
_LOCK = threading.Lock()
#: Bounded: keys are statements built once per shape, so this is never reached
#: in practice; past it, new shapes run through ``Connection.execute``.
_MAX_ENTRIES = 512


def _compile(
    stmt: Any, dialect: Dialect, translate: Mapping[Any, Any] | None, names: frozenset[str]
) -> DriverStatement | None:
    kwargs: dict[str, Any] = {"column_keys": sorted(names)}
    if translate:
        kwargs["schema_translate_map"] = dict(translate)
        kwargs["render_schema_translate"] = True
    compiled: Any = stmt.compile(dialect=dialect, **kwargs)
    binds = compiled.binds
    if "__[POSTCOMPILE" in compiled.string or any(b.expanding for b in binds.values()):
        return None  # rendered per call
    fixed: dict[str, Any] = {}
    processors: dict[str, Callable[[Any], Any]] = {}
    for name, bind in binds.items():
        if name not in names:
            if bind.callable is not None or bind.required:
                return None  # a value computed per call (a Python-side default)
            fixed[name] = bind.value
        process = bind.type.dialect_impl(dialect).bind_processor(dialect)
        if process is not None:
            processors[name] = process
    order: tuple[str, ...] | None = None
    if compiled.positional:
        order = tuple(compiled.positiontup)
        if any(name not in names and name not in fixed for name in order):
            return None
    results = tuple(
        column.type.dialect_impl(dialect).result_processor(dialect, None)
        for column in stmt.exported_columns
    )
    return DriverStatement(compiled.string, order, fixed, processors, results)


def driver_statement(
    conn: Connection, stmt: Any, params: Mapping[str, Any]
) -> DriverStatement | None:
    """``stmt``'s compiled form for ``conn`` and these parameter names (``None``: none)."""
    translate = conn.get_execution_options().get("schema_translate_map")
    dialect = conn.dialect
    names = frozenset(params)
    key = (
        stmt,
        dialect.name,
        dialect.paramstyle,
        None if not translate else tuple(sorted(translate.items(), key=repr)),
        names,
    )
    try:
        return _CACHE[key]
    except KeyError:
        pass
    compiled = _compile(stmt, dialect, translate, names)
    with _LOCK:
        if len(_CACHE) < _MAX_ENTRIES:
            _CACHE[key] = compiled
    return compiled


def execute_first(conn: Connection, stmt: Any, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """Run ``stmt`` with ``params`` on ``conn``; its first row (processed), or ``None``.

    Through its cached SQL text (:func:`driver_statement`), or ``conn.execute``
    when it has none.
    """
    compiled = driver_statement(conn, stmt, params)
    if compiled is None:
        row = conn.execute(stmt, dict(params)).first()
        return None if row is None else tuple(row)
    raw = conn.exec_driver_sql(compiled.sql, compiled.parameters(params)).first()
    return None if raw is None else compiled.row(raw)


def execute_scalars(conn: Connection, stmt: Any, params: Mapping[str, Any]) -> list[Any]:
    """The first column of every row of ``stmt`` with ``params`` on ``conn`` (processed).

    Through its cached SQL text, or ``conn.execute`` when it has none.
    """
    compiled = driver_statement(conn, stmt, params)
    if compiled is None:
        return list(conn.execute(stmt, dict(params)).scalars())
    rows = conn.exec_driver_sql(compiled.sql, compiled.parameters(params)).fetchall()
    process = compiled.results[0] if compiled.results else None
    if process is None:
        return [row[0] for row in rows]
    return [process(row[0]) for row in rows]


def execute_rowcount(conn: Connection, stmt: Any, params: Mapping[str, Any]) -> int:
    """Run ``stmt`` (a DML statement) with ``params`` on ``conn``; the rows it matched.

    Through its cached SQL text, or ``conn.execute`` when it has none.
    """
    compiled = driver_statement(conn, stmt, params)
    if compiled is None:
        return int(conn.execute(stmt, dict(params)).rowcount)
    return int(conn.exec_driver_sql(compiled.sql, compiled.parameters(params)).rowcount)
