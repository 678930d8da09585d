"""Where upstream data is read from (internal; public path: :mod:`firefly_orm.upstream_import`).

Upstream's FileStore directory, SQLiteStore file and MongoDB collection, and
:func:`upstream_source`, which picks one from a location.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from firefly_orm._interop._upstream_plan import (
    UpstreamReadError,
    UpstreamRecord,
    UpstreamSource,
    UpstreamSourceError,
)
from firefly_orm.errors import (
    DatabaseConnectionError,
    EntryValidationError,
    MissingExtraError,
    StoreError,
    redact_url,
    scrub_secret,
    url_secrets,
)

__all__ = [
    "DEFAULT_MONGO_COLLECTION",
    "DEFAULT_MONGO_DATABASE",
    "DEFAULT_SQLITE_TABLE",
    "UpstreamFileSource",
    "UpstreamMongoSource",
    "UpstreamSQLiteSource",
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


@dataclass(frozen=True)
class UpstreamFileSource:
    """An upstream ``FileStore`` directory: ``<namespace>.json`` per namespace.

    Each file holds one JSON object mapping every ``entry_id`` to its entry.
    Only ``*.json`` files directly inside ``base_dir`` are read.

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
        """The namespaces: the file names without ``.json``, sorted."""
        if not self.base_dir.is_dir():
            raise UpstreamSourceError(f"{self.describe()}: not a directory")
        try:
            names = [
                path.name[: -len(_FILE_SUFFIX)]
                for path in self.base_dir.iterdir()
                if path.name.endswith(_FILE_SUFFIX) and path.is_file()
            ]
        except OSError as exc:
            raise UpstreamSourceError(f"{self.describe()}: cannot list it: {exc}") from exc
        return sorted(names)

    def read(self, namespace: str) -> list[UpstreamRecord]:
        """The entries of ``<namespace>.json``, in file order."""
        path = self.base_dir / f"{namespace}{_FILE_SUFFIX}"
        where = f"file {path.name}"
        if path.parent != self.base_dir:  # upstream wrote "/" and "\\" as "_"
            raise UpstreamReadError(where, "is not a file of this directory")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise UpstreamReadError(where, f"cannot be read: {exc}") from exc
        except json.JSONDecodeError as exc:
            raise UpstreamReadError(where, f"is not JSON ({exc})") from exc
        if not isinstance(data, dict):
            raise UpstreamReadError(
                where, f"must hold a JSON object of entries, not {type(data).__name__}"
            )
        return [
            UpstreamRecord(_where(entry_id, entry_id), entry, entry_id=entry_id)
            for entry_id, entry in data.items()
        ]


@dataclass(frozen=True)
class UpstreamSQLiteSource:
    """An upstream ``SQLiteStore`` database, opened read-only.

    Its table (``firefly_memory`` unless ``table`` says otherwise) has the
    columns ``entry_id``, ``namespace`` and ``content`` (the entry as JSON).
    The file may also hold firefly_orm's own table (a store opened on the same
    path): that one is not read.

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

    def _connect(self) -> sqlite3.Connection:
        if not self.path.is_file():
            raise UpstreamSourceError(f"{self.describe()}: no such file")
        uri = self.path.resolve().as_uri() + "?mode=ro"
        try:
            return sqlite3.connect(uri, uri=True)
        except sqlite3.Error as exc:
            raise UpstreamSourceError(f"{self.describe()}: cannot open it: {exc}") from exc

    def namespaces(self) -> list[str]:
        """The distinct namespaces of the table, sorted."""
        conn = self._connect()
        try:
            columns = {row[1] for row in conn.execute(f'PRAGMA table_info("{self.table}")')}
            if not columns >= _SQLITE_COLUMNS:
                raise UpstreamSourceError(
                    f"{self.describe()}: no table {self.table} with the columns "
                    f"{', '.join(sorted(_SQLITE_COLUMNS))} (is it an upstream SQLiteStore file?)"
                )
            rows = conn.execute(
                f'SELECT DISTINCT namespace FROM "{self.table}" '
                "WHERE typeof(namespace) = 'text' ORDER BY namespace"
            ).fetchall()
        except sqlite3.Error as exc:
            raise UpstreamSourceError(f"{self.describe()}: cannot read it: {exc}") from exc
        finally:
            conn.close()
        return [str(row[0]) for row in rows]

    def read(self, namespace: str) -> list[UpstreamRecord]:
        """The rows of ``namespace`` in insertion order, each ``content`` decoded."""
        conn = self._connect()
        try:
            rows = conn.execute(
                f'SELECT entry_id, content FROM "{self.table}" WHERE namespace = ? ORDER BY rowid',
                (namespace,),
            ).fetchall()
        except sqlite3.Error as exc:
            raise UpstreamReadError(f"table {self.table}", f"cannot be read: {exc}") from exc
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
        return UpstreamRecord(where, json.loads(content), hint)
    except json.JSONDecodeError as exc:
        return UpstreamRecord(where, None, hint, f"content is not JSON ({exc})")


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
    if not path.is_file():
        raise UpstreamSourceError(f"{path}: no such directory or file")
    try:
        with path.open("rb") as handle:
            header = handle.read(len(_SQLITE_HEADER))
    except OSError as exc:
        raise UpstreamSourceError(f"{path}: cannot be read: {exc}") from exc
    if header != _SQLITE_HEADER:
        raise UpstreamSourceError(
            f"{path}: neither an upstream FileStore directory nor a SQLite database"
        )
    return UpstreamSQLiteSource(path, table=table if table is not None else DEFAULT_SQLITE_TABLE)
