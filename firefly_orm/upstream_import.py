"""Import what the Firefly framework's memory module stored into any firefly_orm store.

The module firefly_orm is modelled on (``fireflyframework_agentic.memory``,
"upstream") keeps its entries in layouts firefly_orm's stores do not read, so
a migrating app would find none of its data.  :func:`import_upstream` (and its
async twin :func:`async_import_upstream`) copies them into any store, keeping
every ``entry_id``:

* :class:`UpstreamFileSource` -- a ``FileStore`` directory: one
  ``<namespace>.json`` file per namespace (``/`` and ``\\`` in a namespace were
  written as ``_``, which cannot be undone), each a JSON object
  ``{entry_id: entry}``;
* :class:`UpstreamSQLiteSource` -- a ``SQLiteStore`` database: table
  ``firefly_memory(entry_id, namespace, content)``, ``content`` holding the
  whole entry as JSON;
* :class:`UpstreamMongoSource` -- a ``MongoDBStore`` collection (default
  ``firefly_memory.entries``): one document per entry with a ``namespace``
  field and ISO-8601 *strings* for ``created_at`` / ``expires_at``.

:func:`upstream_source` picks the source from a location (a directory, a SQLite
file or a ``mongodb://`` URL).  An upstream entry has the fields ``entry_id``,
``scope``, ``key``, ``content``, ``metadata``, ``created_at``, ``expires_at`` and
``importance``; other fields (``_id``, ``namespace``) are ignored, as upstream did.

How an import goes:

* one **unit of work per namespace**: a namespace is written completely or not
  at all.  A namespace whose file cannot be read, or holding a record that is
  not a valid entry (corrupt JSON, importance outside 0.0-1.0, a naive
  date-time...), is reported and nothing of it is written (pass
  ``skip_invalid=True`` to import its valid entries and report the others);
* **idempotent**: entries keep their ids and an entry already in the target
  namespace is left alone (counted as ``already_present``; pass
  ``replace_existing=True`` to overwrite it with the source's copy), so an
  import can be rerun, or resumed after a failure, without duplicates;
* entries already **expired** are skipped and counted;
* ``on_progress`` is called after each namespace with an :class:`ImportProgress`;
  the result is an :class:`ImportSummary`.

**A source is untrusted input**, read within bounds (a file someone handed
you must not crash, hang or trick the import):

* JSON (a FileStore file, a SQLite ``content`` value) is read by a bounded
  reader: nesting deeper than 256 levels, an integer of more than 4,300
  digits, a file over :data:`MAX_UPSTREAM_FILE_BYTES`, text that is not JSON
  and non-UTF-8 bytes are each one line naming the file (FileStore) or the
  entry (SQLite), that namespace is not written, the others are imported;
* in a FileStore directory only regular files are read: a ``*.json`` entry
  that is a **symbolic link** (into the directory or out of it, dangling or
  not), a FIFO, a socket or a device is never followed or opened; its
  namespace is reported as failed (the summary is not ``ok``; the command
  exits with status 2) and a warning is logged.  Sub-directories are ignored;
* a SQLite file is opened read-only; its table must be a plain table (a
  **view** -- a recursive one would run for ever --, a virtual table, or
  computed ``entry_id`` / ``namespace`` / ``content`` columns are refused
  before any row is read), and every statement is stopped after a budget of
  SQLite steps that grows with the file's size;
* names from the source (namespaces, file names) are shown with their
  control characters escaped in reports and logs.

Reading the source never blocks an event loop: :func:`async_import_upstream`
reads it in a worker thread and writes through the store's async forms.
Failures of the source as a whole (a missing directory or table, an
unreachable server) raise before anything is written; a failure of the target
store stops the import (namespaces already committed stay imported, and a
rerun completes the rest).

**At once, and once.**  :func:`import_upstream_once` (and its async twin)
writes every namespace in ONE unit of work together with a mark (an entry in
namespace :data:`IMPORT_MARK_NAMESPACE`) that says the store holds that kind of
upstream data; a store already marked is left alone, and an invalid record
raises :class:`UpstreamImportError` with nothing written.  The
``firefly-orm import-upstream`` command writes the mark after an import that
went through completely.  The stores of :mod:`firefly_orm.compat.firefly`
look for upstream data where they open (:func:`find_upstream_sqlite`,
:func:`find_upstream_files`) and refuse unmarked data with
:class:`UpstreamDataFoundError`, which names the command to run, unless they
are opened with ``import_upstream=True``.

The code lives in :mod:`firefly_orm._interop` (``_upstream_plan``: errors, results,
records and planning; ``_upstream_sources``: the three sources;
``_upstream_run``: the import; ``_upstream_once``: at once, the mark); this
module is its import path.

Example::

    from firefly_orm import SQLiteStore
    from firefly_orm.upstream_import import import_upstream, upstream_source

    store = SQLiteStore("data/memory.sqlite3")
    summary = import_upstream(upstream_source(".firefly_memory"), store,
                              on_progress=lambda p: print(p.describe()))
    print(summary.describe())
"""

from __future__ import annotations

from firefly_orm._interop._upstream_once import (
    IMPORT_MARK_NAMESPACE,
    UpstreamDataFoundError,
    UpstreamImportError,
    async_import_upstream_once,
    import_upstream_once,
)
from firefly_orm._interop._upstream_plan import (
    ImportIssue,
    ImportOptions,
    ImportProgress,
    ImportSummary,
    NamespacePlan,
    NamespaceResult,
    UpstreamReadError,
    UpstreamRecord,
    UpstreamSource,
    UpstreamSourceError,
    entry_from_upstream,
    plan_namespace,
)
from firefly_orm._interop._upstream_run import (
    ProgressCallback,
    async_import_upstream,
    import_upstream,
)
from firefly_orm._interop._upstream_sources import (
    DEFAULT_MONGO_COLLECTION,
    DEFAULT_MONGO_DATABASE,
    DEFAULT_SQLITE_TABLE,
    MAX_UPSTREAM_FILE_BYTES,
    UpstreamFileSource,
    UpstreamMongoSource,
    UpstreamSQLiteSource,
    find_upstream_files,
    find_upstream_sqlite,
    upstream_source,
)

__all__ = [
    "DEFAULT_MONGO_COLLECTION",
    "DEFAULT_MONGO_DATABASE",
    "DEFAULT_SQLITE_TABLE",
    "IMPORT_MARK_NAMESPACE",
    "MAX_UPSTREAM_FILE_BYTES",
    "ImportIssue",
    "ImportOptions",
    "ImportProgress",
    "ImportSummary",
    "NamespacePlan",
    "NamespaceResult",
    "ProgressCallback",
    "UpstreamFileSource",
    "UpstreamDataFoundError",
    "UpstreamImportError",
    "UpstreamMongoSource",
    "UpstreamReadError",
    "UpstreamRecord",
    "UpstreamSQLiteSource",
    "UpstreamSource",
    "UpstreamSourceError",
    "async_import_upstream",
    "async_import_upstream_once",
    "entry_from_upstream",
    "find_upstream_files",
    "find_upstream_sqlite",
    "import_upstream",
    "import_upstream_once",
    "plan_namespace",
    "upstream_source",
]
