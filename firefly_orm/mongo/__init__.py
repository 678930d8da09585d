"""MongoDB backend: :class:`MemoryDocument` (a Beanie 2 document) and :class:`MongoDBStore`.

* :mod:`firefly_orm.mongo._document`: the stored shape of an entry (the Beanie
  document, its indexes, database and collection name rules, the
  entry <-> document codec and the query filters over that shape);
* :mod:`firefly_orm.mongo._store`: :class:`MongoDBStore`, whose I/O runs on the
  shared loop thread of :mod:`firefly_orm.bridges._loop_thread` and whose units
  of work read (:mod:`firefly_orm.mongo._reads`) by id, by key, by key-prefix
  range with a limit, and by full-text search;
* :mod:`firefly_orm.mongo._queries`: those reads as queries of live entries,
  and full-text search as one aggregation on the ``(namespace, search_words)``
  multikey index (words stored with each entry; MongoDB's ``$text`` is not
  used, see there why);
* :mod:`firefly_orm.mongo._commit`: how a unit of work's staged changes are
  committed (preconditions, conditional writes, one ordered bulk write), in a
  transaction or, without transactions, through
* :mod:`firefly_orm.mongo._journal`: namespace locks and a commit journal that
  make a commit all or nothing once recovered (whoever next touches its
  namespaces, or ``initialize()``, completes or undoes it), with
  :mod:`firefly_orm.mongo._owner` telling a running writer from a dead one and
  :mod:`firefly_orm.mongo._reads` the reads of a unit of work.

Requires the ``mongo`` extra (``pip install 'firefly-orm[mongo]'``).
"""

from __future__ import annotations

from firefly_orm.mongo._document import (
    JSON_WRAPPER_KEY,
    MemoryDocument,
    MemoryDocumentFields,
    document_to_entry,
    entry_to_document,
    memory_indexes,
    validate_collection_name,
    validate_database_name,
)
from firefly_orm.mongo._store import MongoDBStore

__all__ = [
    "JSON_WRAPPER_KEY",
    "MemoryDocument",
    "MemoryDocumentFields",
    "MongoDBStore",
    "document_to_entry",
    "entry_to_document",
    "memory_indexes",
    "validate_collection_name",
    "validate_database_name",
]
