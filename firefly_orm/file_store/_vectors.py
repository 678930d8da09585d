"""Vectors of a :class:`~firefly_orm.file_store.FileStore`: a file per namespace, searched exactly.

File
    Beside a namespace's snapshot ``<name>.json``, ``<name>.vectors.jsonl`` holds
    its vectors as JSON lines, appended and fsynced under the namespace's lock:
    ``{"spec": [model, dimensions]}`` first, then ``{"put": {entry_id: vector}}``
    records, a vector being the base64 of its 32-bit little-endian floats.  A
    torn last line (a writer killed while appending) is ignored and cut off by
    the next writer.  Deleting vectors rewrites the file whole without them (a
    temporary file, fsynced, renamed into place), so no deleted vector stays
    on disk; so does a file holding more than twice as many records as
    vectors.  Each process keeps the vectors it has read in memory and reads
    only what was appended since.

Commits
    A unit of work's vectors follow its entries: under the same locks, the
    vectors of the entries it deletes (deleted, erased, cleared, expired) and
    of the namespaces whose vectors it drops are removed *before* the entries
    are written, and the new vectors are stored *after*, for the entries that
    exist then.  A crash in between leaves an entry without a vector (found
    again by ``unembedded``), never a vector of a deleted entry.

Search
    Exact: every vector of the asked spec is compared with the query
    (:mod:`firefly_orm.vector._exact`), the filters applied before the cut.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import sys
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Unpack

from firefly_orm._search import SearchHit
from firefly_orm.errors import StoreCorruptedError, StoreError
from firefly_orm.file_store._commit import load_state
from firefly_orm.file_store._files import fsync_dir, remove_file
from firefly_orm.protocols import StagedChanges
from firefly_orm.uow import check_preconditions
from firefly_orm.vector._exact import check_vector_changes, exact_hits, stored_vector
from firefly_orm.vector._spec import EmbeddingSpec, VectorRequest, VectorSearchOptions

__all__ = ["FileVectors", "forget", "remove_vectors", "vector_file", "vector_namespaces"]

_SUFFIX = ".vectors.jsonl"


def vector_file(path: Path) -> Path:
    """The vectors file beside the namespace snapshot ``path``."""
    return path.with_name(path.name.removesuffix(".json") + _SUFFIX)


def vector_namespaces(changes: StagedChanges) -> set[str]:
    """The namespaces whose vectors ``changes`` write or drop (locked like written ones)."""
    return changes.dropped_vectors | {namespace for namespace, _ in changes.vectors}


def _encode(vector: Iterable[float]) -> str:
    values = stored_vector(vector)
    if sys.byteorder != "little":  # pragma: no cover - every platform we run on is little-endian
        values.byteswap()
    return base64.b64encode(values.tobytes()).decode("ascii")


def _decode(text: str) -> array[float]:
    values = array("f")
    values.frombytes(base64.b64decode(text, validate=True))
    if sys.byteorder != "little":  # pragma: no cover
        values.byteswap()
    return values


@dataclass
class _Vectors:
    """A vectors file as read: its spec, its vectors, where its valid records end."""

    spec: EmbeddingSpec | None = None
    vectors: dict[str, array[float]] = field(default_factory=dict)
    records: int = 0
    end: int = 0  # bytes of whole lines
    inode: int = -1


#: What this process has read of each vectors file (used under the namespace's lock).
_cache: dict[str, _Vectors] = {}


def _apply(state: _Vectors, record: Mapping[str, Any]) -> None:
    if "spec" in record:
        model, dimensions = record["spec"]
        state.spec, state.vectors = EmbeddingSpec(model, dimensions), {}
    else:
        state.vectors.update((i, _decode(v)) for i, v in record["put"].items())
    state.records += 1


def _read(path: Path) -> _Vectors:
    """The vectors file ``path`` as it is now (what was appended since the last read parsed).

    Raises:
        StoreCorruptedError: A record other than a torn last line cannot be read.
    """
    try:
        with open(path, "rb") as file:
            inode = os.fstat(file.fileno()).st_ino
            state = _cache.get(str(path))
            if state is None or state.inode != inode:
                state = _Vectors(inode=inode)
            file.seek(state.end)
            tail = file.read()
    except FileNotFoundError:
        _cache.pop(str(path), None)
        return _Vectors()
    except OSError as exc:
        raise StoreError(f"cannot read the vectors file {path}: {exc}") from exc
    lines = tail.split(b"\n")
    for line in lines[:-1]:  # the part after the last newline is a torn line, or nothing
        try:
            _apply(state, json.loads(line))
        except (ValueError, KeyError, TypeError) as exc:
            _cache.pop(str(path), None)
            raise StoreCorruptedError(f"the vectors file {path} is corrupt: {exc}") from None
        state.end += len(line) + 1
    _cache[str(path)] = state
    return state


def _write(path: Path, records: Sequence[Mapping[str, Any]]) -> None:
    """Append ``records`` (fsynced), or rewrite the file whole when it grew too long."""
    state = _read(path)
    for record in records:
        _apply(state, record)
    lines = b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in records)
    try:
        if state.records > 2 * len(state.vectors) + 8 or state.spec is None:
            _rewrite(path, state)
            return
        with open(path, "r+b" if path.exists() else "wb") as file:
            file.truncate(state.end)  # a torn last line goes
            file.seek(state.end)
            file.write(lines)
            file.flush()
            os.fsync(file.fileno())
            state.end += len(lines)
            state.inode = os.fstat(file.fileno()).st_ino
        fsync_dir(path.parent)
    except OSError as exc:
        _cache.pop(str(path), None)
        raise StoreError(f"cannot write the vectors file {path}: {exc}") from exc


def _rewrite(path: Path, state: _Vectors) -> None:
    if state.spec is None or not state.vectors:
        remove_vectors(path)
        return
    spec = {"spec": [state.spec.model, state.spec.dimensions]}
    put = {"put": {i: _encode(v) for i, v in state.vectors.items()}}
    data = b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in (spec, put))
    temporary = path.with_name(f".{path.name}.{os.getpid()}.vec.tmp")
    with open(temporary, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    fsync_dir(path.parent)
    _cache.pop(str(path), None)


def remove_vectors(path: Path) -> None:
    """Delete the vectors file ``path`` (no error when there is none)."""
    _cache.pop(str(path), None)
    remove_file(path, "the vectors file")


def forget(path: Path, ids: Iterable[str]) -> None:
    """Delete the vectors of ``ids`` from the vectors file ``path`` (those it holds).

    The file is rewritten without them: no earlier record keeps their values.
    """
    held = _read(path)
    gone = {i for i in ids if i in held.vectors}
    if gone:
        for entry_id in gone:
            del held.vectors[entry_id]
        try:
            _rewrite(path, held)
        except OSError as exc:
            _cache.pop(str(path), None)
            raise StoreError(f"cannot write the vectors file {path}: {exc}") from exc


class _Store(Protocol):
    """The :class:`~firefly_orm.file_store.FileStore` methods :class:`FileVectors` uses."""

    def path_for(self, namespace: str) -> Path: ...

    def _locked(self, paths: Iterable[Path]) -> contextlib.AbstractContextManager[None]: ...

    def _may_exist(self, path: Path) -> bool: ...


class FileVectors:
    """The vectors of a :class:`~firefly_orm.file_store.FileStore` (a mixin): the
    :class:`~firefly_orm.protocols.VectorBackend` reads and the commit hooks."""

    # ------------------------------------------------------------------ reads
    def read_vector_search(
        self: _Store,
        namespace: str,
        vector: Sequence[float],
        spec: EmbeddingSpec,
        **options: Unpack[VectorSearchOptions],
    ) -> list[SearchHit]:
        """The committed live entries nearest ``vector``, best first (exact cosine).

        Raises:
            EntryValidationError: A bad argument (nothing is read).
            StoreCorruptedError: A file of the namespace is corrupt.
        """
        request = VectorRequest.build(namespace, vector, spec, **options)
        path = self.path_for(namespace)
        if request.finds_nothing or not self._may_exist(path):
            return []
        with self._locked([path]):
            held = _read(vector_file(path))
            state = load_state(path, namespace)
            if held.spec != spec or state is None:
                return []
            pairs = ((state.index.get(i), v) for i, v in held.vectors.items())
            return exact_hits(request, [(e, v) for e, v in pairs if e is not None])

    def read_embedding_spec(self: _Store, namespace: str) -> EmbeddingSpec | None:
        """The spec of ``namespace``'s committed vectors (``None``: it holds none)."""
        path = self.path_for(namespace)
        if not self._may_exist(path):
            return None
        with self._locked([path]):
            return _read(vector_file(path)).spec

    def read_vector_ids(self: _Store, namespace: str) -> set[str]:
        """The ids of the entries of ``namespace`` with a committed vector."""
        path = self.path_for(namespace)
        if not self._may_exist(path):
            return set()
        with self._locked([path]):
            return set(_read(vector_file(path)).vectors)

    # ------------------------------------------------------------------ commit hooks
    # Called with the locks of every file they name held.
    @staticmethod
    def _forget_vectors(changes: StagedChanges, paths: dict[str, Path], every: list[Path]) -> None:
        """Before the entries are written: check, then remove the vectors that go.

        Raises:
            ConcurrencyError: A version precondition failed (nothing is written).
            EmbeddingMismatchError: A namespace would hold two models' vectors.
        """
        touched = {vector_file(paths[ns]) for ns, _ in changes.writes}
        removes = changes.erased_users or any(path.exists() for path in touched)
        if not (changes.vectors or changes.dropped_vectors or changes.cleared or removes):
            return  # nothing of it removes a vector or adds one

        def current(namespace: str, entry_id: str) -> Any:
            state = load_state(paths[namespace], namespace)
            return None if state is None else state.index.get(entry_id)

        check_preconditions(changes, current)
        gone = changes.dropped_vectors | changes.cleared
        check_vector_changes(changes.vectors, gone, lambda ns: _read(vector_file(paths[ns])).spec)
        for namespace in gone:
            remove_vectors(vector_file(paths[namespace]))
        deleted: dict[str, list[str]] = {}
        for (namespace, entry_id), entry in changes.writes.items():
            # deleted, or its text changed (the vector no longer says it)
            if entry is None or (
                vector_file(paths[namespace]).exists()
                and (stored := current(namespace, entry_id)) is not None
                and stored.search_text != entry.search_text
            ):
                deleted.setdefault(namespace, []).append(entry_id)
        for namespace, ids in deleted.items():
            forget(vector_file(paths[namespace]), ids)
        if changes.erased_users:
            for path in every:
                if vector_file(path).exists():
                    state = load_state(path, None)
                    if state is not None:
                        forget(vector_file(path), state.index.ids_of_users(changes.erased_users))

    @staticmethod
    def _store_vectors(changes: StagedChanges, paths: dict[str, Path]) -> None:
        """After the entries are written: store the new vectors of the entries that exist."""
        by_namespace: dict[str, dict[str, tuple[float, ...]]] = {}
        specs: dict[str, EmbeddingSpec] = {}
        for (namespace, entry_id), (spec, vector) in changes.vectors.items():
            by_namespace.setdefault(namespace, {})[entry_id] = vector
            specs[namespace] = spec
        for namespace, vectors in by_namespace.items():
            path = paths[namespace]
            state = load_state(path, namespace)
            live = set() if state is None else set(state.index.ids())
            puts = {i: _encode(v) for i, v in vectors.items() if i in live}
            if not puts:
                continue
            target, spec = vector_file(path), specs[namespace]
            header = [] if _read(target).spec == spec else [{"spec": [spec.model, spec.dimensions]}]
            _write(target, [*header, {"put": puts}])
        for path in paths.values():  # a namespace whose last entry went
            if not path.exists() and vector_file(path).exists():
                remove_vectors(vector_file(path))
