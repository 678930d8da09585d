"""Interchange with Flyte's directory layout: export a workspace to a directory, import one back.

Flyte's agent ``MemoryStore`` keeps a workspace as a directory (its keyed
stores live under a path ending in the store's key)::

    messages.json                         the transcript: a JSON list of messages
    <path>                                each file, its bytes as written
    meta/<quote(path)>.json               per-file metadata: path, sha256, updated_at,
                                          updated_by, reason, bytes
    audit/log.jsonl                       one JSON object per change: ts, op, path,
                                          old_sha, new_sha, actor, reason, version_file
    versions/<quote(path)>/<ts>_<sha>.txt every kept version (``:`` in ts written ``-``)

where ``quote`` is percent-encoding with no safe character (``user/a.md`` ->
``user%2Fa.md``).  :func:`export_directory` writes a workspace in that layout,
which Flyte reads as it is; :func:`import_directory` reads a directory Flyte
wrote (or one exported here) into a workspace, all or nothing.

**Lossless.**  What Flyte's layout has no place for (the workspace key and
creation time, each file's kind and version count, the metadata of each kept
version, each message's time and whether it is a pydantic-ai message) goes in
one more file, ``meta/@workspace.json`` (a name ``quote`` never produces, so
it never shadows a file's metadata, and Flyte never reads it).  Times are
written with their microseconds.  Exporting, importing into another store and
exporting again gives the same directory, byte for byte; only the audit rows'
entry ids are new.  What the extra file does not describe (a directory Flyte
wrote, or what Flyte wrote into an exported one: a changed or new file, a new
version, appended messages) is read as Flyte leaves it: files are text when
they are UTF-8 (else binary) and count the audited writes since their last
delete, a file without metadata is dated by its modification time and written
by ``agent``, a version is attributed by the audit line naming it, appended
messages are dated by the import (after the others), and without the extra
file the directory's name is the workspace key.

**Checked first, nothing written on refusal.**  An import reads and checks the
whole directory before it opens a unit of work: symbolic links, anything that
is not a regular file or a directory, paths the workspace refuses (``..``,
reserved names in any letter case, control characters...), unexpected files
under ``audit/``, ``meta/`` or ``versions/``, metadata describing no file,
JSON that does not parse (or repeats a key, is nested deeper than 256
levels or holds an integer of more than 4,300 digits: the bookkeeping files
are read by the bounded reader
:func:`~firefly_orm.entry._json.load_untrusted_json`, so a 100,000-deep
``messages.json`` is one line, not a ``RecursionError``), a folder that cannot
be listed or a file that cannot be read, a sha256 or size that does not match
the bytes, and oversized files raise :class:`DirectoryLayoutError` naming the
offending entry.

**Safe writes.**  An export builds the directory under a temporary name next
to the target and renames it into place, so the target is either as it was or
complete.  A target that exists must be an empty directory, or (with
``overwrite=True``) a directory holding a workspace (a ``messages.json`` or
``meta/@workspace.json`` at its top), which is then replaced; anything else is
refused.  The new directory is readable by its owner only (mode 0700).

Both functions have ``async_`` twins: the database part is the store's own
(async) unit of work and the file I/O runs in a worker thread
(:class:`~firefly_orm.bridges._steps.CallOut`).

**A live directory.**  :class:`DirectoryWorkspace` keeps a workspace *in*
such a directory, written on every change (under an inter-process lock,
through a redo journal in ``meta/@live/``, which readers skip), with the
rules of :class:`~firefly_orm.artifacts.ArtifactWorkspace`; it saves to and
loads from object storage through ``fsspec`` URLs.

The code: :mod:`~firefly_orm.artifacts._flyte._layout` (names, the error, shared
rules), :mod:`~firefly_orm.artifacts._flyte._sidecar` (the extra file),
:mod:`~firefly_orm.artifacts._flyte._export` and
:mod:`~firefly_orm.artifacts._flyte._import` (the two directions),
:mod:`~firefly_orm.artifacts._flyte._journal` (the lock and the redo journal),
:mod:`~firefly_orm.artifacts._flyte._live` (:class:`DirectoryWorkspace`) and
:mod:`~firefly_orm.artifacts._flyte._remote` (object storage).
"""

from __future__ import annotations

from firefly_orm.artifacts._flyte._export import (
    async_export_directory,
    export_directory,
    write_directory,
)
from firefly_orm.artifacts._flyte._import import (
    MAX_BOOKKEEPING_BYTES,
    async_import_directory,
    import_directory,
    read_directory,
)
from firefly_orm.artifacts._flyte._layout import AUDIT_LOG_PATH, SIDECAR_PATH, DirectoryLayoutError
from firefly_orm.artifacts._flyte._live import DirectoryWorkspace

__all__ = [
    "AUDIT_LOG_PATH",
    "MAX_BOOKKEEPING_BYTES",
    "SIDECAR_PATH",
    "DirectoryLayoutError",
    "DirectoryWorkspace",
    "async_export_directory",
    "async_import_directory",
    "export_directory",
    "import_directory",
    "read_directory",
    "write_directory",
]
