"""Loading ``sqlite-vec`` into SQLite connections: which DB-API module can, and how.

Python's :mod:`sqlite3` may be built without extension loading (macOS's system
Python, some pyenv builds, the Python of these machines: ``sqlite3.Connection``
then has no ``enable_load_extension``).  The ``vector`` extra installs
``pysqlite3-binary`` where a wheel exists: the same DB-API with its own SQLite,
extension loading on.  :func:`sqlite_vec_module` picks, in order:

1. ``pysqlite3.dbapi2`` when it is installed;
2. the standard :mod:`sqlite3` when its connections can load extensions;
3. otherwise it raises :class:`~firefly_orm.vector.VectorUnavailableError`
   saying what to install.

Pass the module to SQLAlchemy (``create_engine(url, module=sqlite_vec_module())``)
and call :func:`load_sqlite_vec` on each new DB-API connection (a ``connect``
event), so the ``vec0`` virtual tables work on every connection of the pool.
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType
from typing import Any

from firefly_orm.vector._errors import VectorUnavailableError

__all__ = ["INSTALL_HINT", "load_sqlite_vec", "sqlite_vec_module"]

_log = logging.getLogger("firefly_orm")

#: What to install for vectors on SQLite (the end of every message of this module).
INSTALL_HINT = (
    "pip install 'firefly-orm[vector]' (it installs sqlite-vec and pysqlite3-binary, "
    "a SQLite that loads extensions; where no pysqlite3-binary wheel exists, use a Python "
    "whose sqlite3 was built with --enable-loadable-sqlite-extensions)"
)


def _import(name: str) -> ModuleType | None:
    """The module ``name``, or ``None`` when it is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def sqlite_vec_module() -> ModuleType:
    """A DB-API module (sqlite3's interface) whose connections can load ``sqlite-vec``.

    ``pysqlite3.dbapi2`` when installed, else the standard :mod:`sqlite3` when
    it can load extensions.

    Raises:
        VectorUnavailableError: ``sqlite-vec`` is not installed, or no SQLite
            module of this Python can load extensions; nothing was done.
    """
    if _import("sqlite_vec") is None:
        raise VectorUnavailableError(
            f"vectors on SQLite need the sqlite-vec package: {INSTALL_HINT}"
        )
    module = _import("pysqlite3.dbapi2")
    if module is not None:
        return module
    import sqlite3

    if _loads_extensions(sqlite3.Connection):
        return sqlite3
    raise VectorUnavailableError(
        "vectors on SQLite need SQLite extension loading, and this Python's sqlite3 "
        f"was built without it (sqlite3.Connection has no enable_load_extension): {INSTALL_HINT}"
    )


def _loads_extensions(connection_class: type[Any]) -> bool:
    """Whether connections of ``connection_class`` can load extensions."""
    return hasattr(connection_class, "enable_load_extension")


def load_sqlite_vec(dbapi_connection: Any) -> None:
    """Load ``sqlite-vec`` into one DB-API connection (of :func:`sqlite_vec_module`'s module).

    Extension loading is switched on only while ``sqlite-vec`` loads, then off
    again (SQL cannot load other extensions afterwards).

    Raises:
        VectorUnavailableError: ``sqlite-vec`` is not installed, or the connection
            cannot load extensions (it came from a module built without it).
    """
    sqlite_vec = _import("sqlite_vec")
    if sqlite_vec is None:
        raise VectorUnavailableError(
            f"vectors on SQLite need the sqlite-vec package: {INSTALL_HINT}"
        )
    if not _loads_extensions(type(dbapi_connection)):
        raise VectorUnavailableError(
            f"this SQLite connection ({type(dbapi_connection).__module__}."
            f"{type(dbapi_connection).__qualname__}) cannot load extensions; open it with "
            f"firefly_orm.vector's sqlite_vec_module(): {INSTALL_HINT}"
        )
    dbapi_connection.enable_load_extension(True)
    try:
        sqlite_vec.load(dbapi_connection)
    finally:
        dbapi_connection.enable_load_extension(False)
    _log.debug("sqlite-vec loaded into a %s connection", type(dbapi_connection).__module__)
