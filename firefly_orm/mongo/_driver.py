"""The MongoDB driver (pymongo, bson) and Beanie, imported once for the package (internal).

Every module of :mod:`firefly_orm.mongo` takes the driver's names from here, so
a missing ``mongo`` extra is reported in one place, as a
:class:`~firefly_orm.errors.MissingExtraError` naming it.
"""

from __future__ import annotations

from typing import Any

from firefly_orm.errors import MissingExtraError

try:
    import bson
    from beanie import Document, init_beanie
    from bson.errors import InvalidDocument
    from pymongo import (
        AsyncMongoClient,
        DeleteMany,
        DeleteOne,
        IndexModel,
        ReturnDocument,
        UpdateMany,
        UpdateOne,
    )
    from pymongo.asynchronous.client_session import AsyncClientSession
    from pymongo.asynchronous.collection import AsyncCollection
    from pymongo.errors import (
        BulkWriteError,
        ConnectionFailure,
        DuplicateKeyError,
        OperationFailure,
        PyMongoError,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("MongoDBStore", "mongo", exc.name) from exc

__all__ = [
    "AsyncClientSession",
    "AsyncCollection",
    "AsyncMongoClient",
    "BulkWriteError",
    "Collection",
    "ConnectionFailure",
    "DeleteMany",
    "DeleteOne",
    "Document",
    "DuplicateKeyError",
    "IndexModel",
    "InvalidDocument",
    "OperationFailure",
    "PyMongoError",
    "ReturnDocument",
    "UpdateMany",
    "UpdateOne",
    "bson",
    "init_beanie",
]

#: The pymongo collection of a store's entries.
Collection = AsyncCollection[dict[str, Any]]
