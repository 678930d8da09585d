"""Where upstream data is read from (internal; public path: :mod:`firefly_orm.upstream_import`).

Upstream's FileStore directory, SQLiteStore file and MongoDB collection, and
:func:`upstream_source`, which picks one from a location.

A source is untrusted input, read within bounds: JSON through
:func:`~firefly_orm.entry._json.load_untrusted_json` (nesting, integer
digits, size), a directory's entries without following links or opening
anything but regular files, a SQLite file read-only, its table checked to be a
plain table and every statement stopped after a budget of steps.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from firefly_orm._interop._upstream_plan import (
    UpstreamReadError,
    UpstreamRecord,
    UpstreamSource,
    UpstreamSourceError,
    shown,
)
from firefly_orm.entry._json import JSONInputError, load_untrusted_json
from firefly_orm.errors import (
    DatabaseConnectionError,
    EntryValidationError,
    MissingExtraError,
    StoreError,
    redact_url,
    scrub_secret,
    url_secrets,
)
from firefly_orm.file_store._log import DATA_FILE
from firefly_orm.file_store._regular import read_regular_file

__all__ = [
    "DEFAULT_MONGO_COLLECTION",
    "DEFAULT_MONGO_DATABASE",
    "DEFAULT_SQLITE_TABLE",
    "MAX_UPSTREAM_FILE_BYTES",
    "UpstreamFileSource",
    "UpstreamMongoSource",
    "UpstreamSQLiteSource",
    "find_upstream_files",
    "find_upstream_sqlite",
    "sqlite_has_table",
    "upstream_source",
]

#: Upstream ``SQLiteStore``'s table.
DEFAULT_SQLITE_TABLE = "firefly_memory"
#: Upstream ``MongoDBStore``'s default database and collection.
DEFAULT_MONGO_DATABASE = "firefly_memory"
DEFAULT_MONGO_COLLECTION = "entries"
#: What an upstream ``FileStore`` file name ends with.
_FILE_SUFFIX = ".json"
#: The first bytes of every SQLite database file.
_SQLITE_HEADER = b"SQLite format 3\x00"
#: Upstream ``SQLiteStore``'s columns.
_SQLITE_COLUMNS = frozenset({"entry_id", "namespace", "content"})
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MONGO_SCHEMES = ("mongodb://", "mongodb+srv://")
#: The largest upstream ``FileStore`` file read (one namespace, read whole).
MAX_UPSTREAM_FILE_BYTES = 256 * 1024 * 1024
#: SQLite steps (virtual-machine instructions) one statement may take on a
#: source: a base, plus this many per byte of the file.  A table scan takes a few
#: dozen steps a row, and a row takes more than a few bytes, so an upstream file
#: stays far below; only a schema built to loop (or to blow up a query) reaches it.
_SQLITE_STEP_BASE = 50_000_000
_SQLITE_STEPS_PER_BYTE = 100
#: How many steps pass between two looks at the budget.
_SQLITE_PROGRESS_EVERY = 10_000

logger = logging.getLogger("firefly_orm")


_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _kind(mode: int) -> str:
    """What a non-regular directory entry is, for messages."""
    return next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")


@dataclass(frozen=True)
class UpstreamFileSource:
    """An upstream ``FileStore`` directory: ``<namespace>.json`` per namespace.

    Each file holds one JSON object mapping every ``entry_id`` to its entry.
    Only ``*.json`` entries directly inside ``base_dir`` are read (not the
    files of a firefly_orm ``FileStore`` opened on the same directory, named
    ``<prefix>-<32 hex digits>.json``), and only regular files: an entry named
    ``*.json`` that is a symbolic link (inside the directory or out of it,
    dangling or not), a FIFO, a socket or a device is never followed or
    opened; its namespace is reported as failed (so the import's result is
    not ok) and a warning logged.  Sub-directories are
    not namespaces and are left out.  A file larger than
    :data:`MAX_UPSTREAM_FILE_BYTES` or whose JSON is refused by the bounded
    reader (nesting, integer digits) fails its namespace the same way.

    Attributes:
        base_dir: The directory (upstream's default was ``.firefly_memory``).
    """

    base_dir: Path

    def __init__(self, base_dir: str | Path) -> None:
        object.__setattr__(self, "base_dir", Path(base_dir))

    def describe(self) -> str:
        """``"upstream FileStore directory <path>"``."""
        return f"upstream FileStore directory {self.base_dir}"

    def namespaces(self) -> list[str]:
        """The namespaces: the ``*.json`` entry names without ``.json``, sorted.

        Sub-directories are not namespaces (upstream never made one) and are
        left out, and so are firefly_orm's own ``FileStore`` files; any other
        entry that is not a regular file (a link, a FIFO, a socket, a device)
        is listed, and reading it reports it (:meth:`read`).
        """
        if not self.base_dir.is_dir():
            raise UpstreamSourceError(f"{self.describe()}: not a directory")
        try:
            with os.scandir(self.base_dir) as entries:
                names = [
                    entry.name[: -len(_FILE_SUFFIX)]
                    for entry in entries
                    if entry.name.endswith(_FILE_SUFFIX)
                    and not DATA_FILE.fullmatch(entry.name)  # firefly_orm's own FileStore file
                    and not entry.is_dir(follow_symlinks=False)
                ]
        except OSError as exc:
            raise UpstreamSourceError(f"{self.describe()}: cannot list it: {exc}") from exc
        return sorted(names)

    def read(self, namespace: str) -> list[UpstreamRecord]:
        """The entries of ``<namespace>.json``, in file order.

        Raises:
            UpstreamReadError: The file is not a regular file of the directory
                (a link, a FIFO...), is too large, or is not importable JSON.
        """
        path = self.base_dir / f"{namespace}{_FILE_SUFFIX}"
        where = f"file {path.name}"
        if path.parent != self.base_dir:  # upstream wrote "/" and "\\" as "_"
            raise UpstreamReadError(where, "is not a file of this directory")
        try:
            data = load_untrusted_json(_read_regular_file(path, where), allow_constants=True)
        except JSONInputError as exc:
            raise UpstreamReadError(where, str(exc)) from None
        if not isinstance(data, dict):
            raise UpstreamReadError(
                where, f"must hold a JSON object of entries, not {type(data).__name__}"
            )
        return [
            UpstreamRecord(_where(entry_id, entry_id), entry, entry_id=entry_id)
            for entry_id, entry in data.items()
        ]


def _refuse_entry(where: str, what: str) -> UpstreamReadError:
    logger.warning("upstream import: %s %s; not read", shown(where), shown(what))
    return UpstreamReadError(where, f"{what}; only regular files are read")


def _read_regular_file(path: Path, where: str) -> bytes:
    """The bytes of regular file ``path``: no link followed, no FIFO or device opened.

    The entry is looked at without following it, opened with ``O_NOFOLLOW``
    and ``O_NONBLOCK`` (opening a FIFO never blocks), and checked again once
    open (a file swapped in between is refused); at most
    :data:`MAX_UPSTREAM_FILE_BYTES` are read.
    """
    try:
        seen = os.lstat(path)
    except OSError as exc:
        raise UpstreamReadError(where, f"cannot be read: {exc.strerror or exc}") from exc
    if stat.S_ISLNK(seen.st_mode):
        notes = []
        with contextlib.suppress(OSError):
            notes.append(f"to {os.readlink(path)!r}")
        if not os.path.exists(path):
            notes.append("dangling")
        about = f" ({', '.join(notes)})" if notes else ""
        raise _refuse_entry(where, f"is a symbolic link{about}, not followed")
    if not stat.S_ISREG(seen.st_mode):
        raise _refuse_entry(where, f"is {_kind(seen.st_mode)}")
    try:
        data, _ = read_regular_file(
            path, seen, MAX_UPSTREAM_FILE_BYTES, lambda reason: UpstreamReadError(where, reason)
        )
    except OSError as exc:
        raise UpstreamReadError(where, f"cannot be read: {exc.strerror or exc}") from exc
    return data


class _StepBudget:
    """A SQLite progress handler: stops a statement after ``limit`` steps."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def __call__(self) -> int:
        self.used += _SQLITE_PROGRESS_EVERY
        return 1 if self.used > self.limit else 0


@dataclass(frozen=True)
class UpstreamSQLiteSource:
    """An upstream ``SQLiteStore`` database, opened read-only.

    Its table (``firefly_memory`` unless ``table`` says otherwise) has the
    columns ``entry_id``, ``namespace`` and ``content`` (the entry as JSON).
    The file may also hold firefly_orm's own table (a store opened on the same
    path): that one is not read.

    The file is untrusted: it is opened read-only (``mode=ro``, with
    ``trusted_schema`` and ``query_only`` on), the table must be a plain table
    (a view, a virtual table, or one of the three columns computed by an
    expression is refused before any row is read), every statement is stopped
    after a budget of SQLite steps that grows with the file's size (a hostile
    schema cannot make a read run for ever), and each ``content`` is read by
    the bounded JSON reader (a value refused there is reported for its entry).

    Attributes:
        path: The database file.
        table: The upstream table (an SQL identifier).
    """

    path: Path
    table: str = DEFAULT_SQLITE_TABLE

    def __init__(self, path: str | Path, *, table: str = DEFAULT_SQLITE_TABLE) -> None:
        if not isinstance(table, str) or not _IDENTIFIER.fullmatch(table):
            raise EntryValidationError("table", f"must be an SQL identifier, got {table!r}")
        object.__setattr__(self, "path", Path(path))
        object.__setattr__(self, "table", table)

    def describe(self) -> str:
        """``"upstream SQLite database <path> (table firefly_memory)"``."""
        return f"upstream SQLite database {self.path} (table {self.table})"

    def _connect(self) -> tuple[sqlite3.Connection, _StepBudget]:
        """A read-only connection with a step budget, its table checked (:meth:`_check_table`)."""
        if not self.path.is_file():
            raise UpstreamSourceError(f"{self.describe()}: no such file")
        try:
            size = self.path.stat().st_size
        except OSError as exc:
            raise UpstreamSourceError(f"{self.describe()}: cannot open it: {exc}") from exc
        budget = _StepBudget(_SQLITE_STEP_BASE + _SQLITE_STEPS_PER_BYTE * size)
        uri = self.path.resolve().as_uri() + "?mode=ro"
        try:
            conn = sqlite3.connect(uri, uri=True)
        except sqlite3.Error as exc:
            raise UpstreamSourceError(f"{self.describe()}: cannot open it: {exc}") from exc
        try:
            conn.set_progress_handler(budget, _SQLITE_PROGRESS_EVERY)
            conn.execute("PRAGMA trusted_schema = OFF")
            conn.execute("PRAGMA query_only = ON")
            self._check_table(conn, budget)
        except sqlite3.Error as exc:
            conn.close()
            raise UpstreamSourceError(
                f"{self.describe()}: cannot read it: {self._reason(exc, budget)}"
            ) from None
        except BaseException:
            conn.close()
            raise
        return conn, budget

    def _reason(self, exc: sqlite3.Error, budget: _StepBudget) -> str:
        if budget.used > budget.limit:
            return (
                f"a statement was stopped after {budget.limit} SQLite steps, far more than "
                "reading a file of this size takes (a view or schema built to loop?)"
            )
        return str(exc)

    def _run(self, conn: sqlite3.Connection, budget: _StepBudget, sql: str, *args: Any) -> Any:
        """``sql``'s rows, the statement given a budget of its own."""
        budget.used = 0
        return conn.execute(sql, args).fetchall()

    def _check_table(self, conn: sqlite3.Connection, budget: _StepBudget) -> None:
        """The table is a plain table with the three columns, none of them computed."""
        found = self._run(
            conn,
            budget,
            "SELECT type, sql FROM sqlite_master WHERE lower(name) = lower(?)",
            self.table,
        )
        kinds = {str(kind) for kind, _ in found}
        if "view" in kinds:
            raise UpstreamSourceError(
                f"{self.describe()}: {self.table} is a view, not a table; an upstream "
                "SQLiteStore file holds a table, and a view is not read"
            )
        if any(str(sql or "").lstrip().upper().startswith("CREATE VIRTUAL") for _, sql in found):
            raise UpstreamSourceError(
                f"{self.describe()}: {self.table} is a virtual table; an upstream "
                "SQLiteStore file holds a plain table, and a virtual one is not read"
            )
        columns = {
            str(row[1]): int(row[6])
            for row in self._run(conn, budget, f'PRAGMA table_xinfo("{self.table}")')
        }
        if "table" not in kinds or not set(columns) >= _SQLITE_COLUMNS:
            raise UpstreamSourceError(
                f"{self.describe()}: no table {self.table} with the columns "
                f"{', '.join(sorted(_SQLITE_COLUMNS))} (is it an upstream SQLiteStore file?)"
            )
        computed = sorted(name for name in _SQLITE_COLUMNS if columns[name] != 0)
        if computed:
            raise UpstreamSourceError(
                f"{self.describe()}: column(s) {', '.join(computed)} of {self.table} are "
                "computed (generated or hidden), not stored; an upstream SQLiteStore "
                "file stores them, and such a table is not read"
            )

    def namespaces(self) -> list[str]:
        """The distinct namespaces of the table, sorted."""
        conn, budget = self._connect()
        try:
            rows = self._run(
                conn,
                budget,
                f'SELECT DISTINCT namespace FROM "{self.table}" '
                "WHERE typeof(namespace) = 'text' ORDER BY namespace",
            )
        except sqlite3.Error as exc:
            raise UpstreamSourceError(
                f"{self.describe()}: cannot read it: {self._reason(exc, budget)}"
            ) from None
        finally:
            conn.close()
        return [str(row[0]) for row in rows]

    def read(self, namespace: str) -> list[UpstreamRecord]:
        """The rows of ``namespace`` in insertion order, each ``content`` decoded."""
        try:
            conn, budget = self._connect()
        except UpstreamSourceError as exc:
            raise UpstreamReadError(f"table {self.table}", str(exc)) from None
        try:
            rows = self._run(
                conn,
                budget,
                f'SELECT entry_id, content FROM "{self.table}" WHERE namespace = ? ORDER BY rowid',
                namespace,
            )
        except sqlite3.Error as exc:
            raise UpstreamReadError(
                f"table {self.table}", f"cannot be read: {self._reason(exc, budget)}"
            ) from None
        finally:
            conn.close()
        return [_sqlite_record(entry_id, content) for entry_id, content in rows]


def _where(entry_id: Any, fallback: Any) -> str:
    """How a record is named in reports: by its entry id when it has one."""
    if isinstance(entry_id, str) and entry_id:
        return f"entry {entry_id!r}"
    return f"record {fallback}"


def _sqlite_record(entry_id: Any, content: Any) -> UpstreamRecord:
    where = _where(entry_id, f"entry_id={entry_id!r}")
    hint = entry_id if isinstance(entry_id, str) else None
    if not isinstance(content, str):
        return UpstreamRecord(
            where, None, hint, f"content is {type(content).__name__}, not JSON text"
        )
    try:
        return UpstreamRecord(where, load_untrusted_json(content, allow_constants=True), hint)
    except JSONInputError as exc:
        return UpstreamRecord(where, None, hint, f"content {exc}")


@dataclass(frozen=True)
class UpstreamMongoSource:
    """An upstream ``MongoDBStore`` collection (needs the ``mongo`` extra).

    Documents carry a ``namespace`` field and ISO-8601 strings for their
    date-times.  Each call opens its own client and closes it (nothing to clean
    up).  Import into ANOTHER collection or database than this one: upstream's
    indexes and firefly_orm's cannot share a collection.

    Attributes:
        url: The server's URL (its password never appears in messages).
        database: Upstream's database (default ``firefly_memory``).
        collection: Upstream's collection (default ``entries``).
        timeout: Seconds to wait for the server.
    """

    url: str
    database: str = DEFAULT_MONGO_DATABASE
    collection: str = DEFAULT_MONGO_COLLECTION
    timeout: float = 10.0

    def __init__(
        self,
        url: str,
        *,
        database: str = DEFAULT_MONGO_DATABASE,
        collection: str = DEFAULT_MONGO_COLLECTION,
        timeout: float = 10.0,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(_MONGO_SCHEMES):
            raise EntryValidationError("url", "must be a mongodb:// or mongodb+srv:// URL")
        for name, value in (("database", database), ("collection", collection)):
            if not isinstance(value, str) or not value or "\x00" in value or "$" in value:
                raise EntryValidationError(name, f"is not a MongoDB name: {value!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise EntryValidationError("timeout", "must be a positive number of seconds")
        object.__setattr__(self, "url", url)
        object.__setattr__(self, "database", database)
        object.__setattr__(self, "collection", collection)
        object.__setattr__(self, "timeout", float(timeout))

    def __repr__(self) -> str:
        return (
            f"UpstreamMongoSource({redact_url(self.url)!r}, database={self.database!r}, "
            f"collection={self.collection!r})"
        )

    def describe(self) -> str:
        """``"upstream MongoDB collection firefly_memory.entries at <url>"`` (no password)."""
        return (
            f"upstream MongoDB collection {self.database}.{self.collection} "
            f"at {redact_url(self.url)}"
        )

    def _call(self, fn: Callable[[Any], Any], *, namespace_read: bool) -> Any:
        """``fn(collection)`` with a client of its own; driver errors mapped.

        A failed query is an :class:`UpstreamReadError` (that namespace is
        reported) when ``namespace_read``, else a :class:`StoreError`; an
        unreachable server is always a :class:`DatabaseConnectionError`.
        """
        try:
            import pymongo
            from pymongo.errors import ConnectionFailure, PyMongoError
        except ImportError as exc:  # pragma: no cover - depends on the installed extras
            raise MissingExtraError("reading upstream MongoDB data", "mongo", exc.name) from exc
        secrets = url_secrets(self.url)
        try:
            client: Any = pymongo.MongoClient(
                self.url, tz_aware=True, serverSelectionTimeoutMS=int(self.timeout * 1000)
            )
        except (PyMongoError, ValueError, TypeError) as exc:
            raise UpstreamSourceError(
                f"{self.describe()}: {scrub_secret(str(exc), secrets)}"
            ) from None
        try:
            return fn(client[self.database][self.collection])
        except ConnectionFailure as exc:
            raise DatabaseConnectionError(
                f"Failed to connect to the {self.describe()}: {scrub_secret(str(exc), secrets)}"
            ) from None
        except PyMongoError as exc:
            message = scrub_secret(str(exc), secrets)
            if namespace_read:
                raise UpstreamReadError(f"collection {self.collection}", message) from None
            raise StoreError(f"{self.describe()}: {message}") from None
        finally:
            client.close()

    def namespaces(self) -> list[str]:
        """The distinct ``namespace`` values (strings) of the collection, sorted."""

        def distinct(collection: Any) -> list[str]:
            return sorted(collection.distinct("namespace", {"namespace": {"$type": "string"}}))

        names: list[str] = self._call(distinct, namespace_read=False)
        return names

    def read(self, namespace: str) -> list[UpstreamRecord]:
        """The documents of ``namespace`` in insertion order (``_id``)."""

        def find(collection: Any) -> list[dict[str, Any]]:
            return list(collection.find({"namespace": namespace}).sort("_id", 1))

        documents: list[dict[str, Any]] = self._call(find, namespace_read=True)
        return [
            UpstreamRecord(_where(doc.get("entry_id"), doc.get("_id")), doc) for doc in documents
        ]


def upstream_source(
    location: str | Path,
    *,
    database: str | None = None,
    collection: str | None = None,
    table: str | None = None,
) -> UpstreamSource:
    """The upstream source at ``location``: a directory, a SQLite file or a MongoDB URL.

    Args:
        location: An upstream ``FileStore`` directory, an upstream
            ``SQLiteStore`` database file, or a ``mongodb://`` /
            ``mongodb+srv://`` URL.
        database: MongoDB only: the database (default ``firefly_memory``).
        collection: MongoDB only: the collection (default ``entries``).
        table: SQLite only (default ``firefly_memory``).

    Raises:
        UpstreamSourceError: Nothing usable is at ``location``.
        EntryValidationError: An option that does not apply to that kind of source.
    """
    text = str(location)
    if text.startswith(_MONGO_SCHEMES):
        if table is not None:
            raise EntryValidationError("table", "applies to SQLite sources only")
        return UpstreamMongoSource(
            text,
            database=database if database is not None else DEFAULT_MONGO_DATABASE,
            collection=collection if collection is not None else DEFAULT_MONGO_COLLECTION,
        )
    if database is not None or collection is not None:
        raise EntryValidationError(
            "database" if database is not None else "collection", "applies to MongoDB URLs only"
        )
    path = Path(location)
    if path.is_dir():
        if table is not None:
            raise EntryValidationError("table", "applies to SQLite sources only")
        return UpstreamFileSource(path)
    try:
        mode = path.stat().st_mode
    except OSError:
        raise UpstreamSourceError(f"{path}: no such directory or file") from None
    if not stat.S_ISREG(mode):  # never opened: a FIFO would block the import
        raise UpstreamSourceError(
            f"{path}: is {_kind(mode)}, neither an upstream FileStore directory "
            "nor a SQLite database"
        )
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        with os.fdopen(fd, "rb") as handle:
            header = handle.read(len(_SQLITE_HEADER))
    except OSError as exc:
        raise UpstreamSourceError(f"{path}: cannot be read: {exc}") from exc
    if header != _SQLITE_HEADER:
        raise UpstreamSourceError(
            f"{path}: neither an upstream FileStore directory nor a SQLite database"
        )
    return UpstreamSQLiteSource(path, table=table if table is not None else DEFAULT_SQLITE_TABLE)


def _is_sqlite_file(path: Path) -> bool:
    """Whether ``path`` is a regular file starting with SQLite's header (no FIFO opened)."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return False
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        with os.fdopen(fd, "rb") as handle:
            return handle.read(len(_SQLITE_HEADER)) == _SQLITE_HEADER
    except OSError:
        return False


def find_upstream_sqlite(
    path: str | Path, *, table: str = DEFAULT_SQLITE_TABLE
) -> UpstreamSQLiteSource | None:
    """The upstream data in SQLite file ``path``, or ``None`` when it holds none.

    Upstream data is a table ``table`` (upstream's ``firefly_memory``) holding
    at least one row with a namespace.  No file, a file that is not a SQLite
    database (the store opening it reports that), no such table or an empty
    one: ``None``.  The file is only read (read-only connection).

    Raises:
        UpstreamSourceError: A ``table`` is there but cannot be read as
            upstream's (a view, computed columns, a looping schema...).
    """
    source = UpstreamSQLiteSource(path, table=table)
    if not sqlite_has_table(source.path, table):
        return None
    return source if source.namespaces() else None


def sqlite_has_table(path: str | Path, name: str) -> bool:
    """Whether ``path`` is a SQLite database with a table or view ``name`` (read-only look).

    ``False`` for no file, a file that is not a SQLite database, or one that
    cannot be read (whoever opens it reports that).
    """
    path = Path(path)
    if not _is_sqlite_file(path):
        return False
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    except sqlite3.Error:
        return False
    try:
        found = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE lower(name) = lower(?)", (name,)
        ).fetchone()
    except sqlite3.Error:
        return False
    finally:
        conn.close()
    return found is not None


def find_upstream_files(base_dir: str | Path) -> UpstreamFileSource | None:
    """The upstream ``FileStore`` files in ``base_dir``, or ``None`` when there are none.

    Upstream data is at least one ``<namespace>.json`` entry that is not a
    firefly_orm ``FileStore`` file (see :meth:`UpstreamFileSource.namespaces`).
    No directory, or nothing of upstream's in it: ``None``.  Nothing is opened.
    """
    source = UpstreamFileSource(base_dir)
    if not source.base_dir.is_dir():
        return None
    return source if source.namespaces() else None
