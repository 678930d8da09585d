"""A live workspace kept in a directory in Flyte's layout: :class:`DirectoryWorkspace`.

The directory is the workspace: every change is written to it at once (through
the redo journal of :mod:`~firefly_orm.artifacts._flyte._journal`, under its
inter-process lock), and Flyte, ``read_directory`` or another process reads it
as it is.  The rules (paths, compare-and-set, audit records, read-only
prefixes and the reviewer's right, versions, the transcript) are those of
:class:`~firefly_orm.artifacts.ArtifactWorkspace`, not a copy: each operation
runs the database workspace's own operation on an in-memory mirror of the
directory, lays the result out as an export does, and writes what changed.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar, Unpack
from urllib.parse import unquote

from firefly_orm.artifacts._errors import WorkspaceExistsError
from firefly_orm.artifacts._flyte import _journal as journal
from firefly_orm.artifacts._flyte import _remote as remote
from firefly_orm.artifacts._flyte._export import _layout_tree
from firefly_orm.artifacts._flyte._import import _Found, _scan, _snapshot_of_tree
from firefly_orm.artifacts._flyte._layout import LIVE_DIR, checked
from firefly_orm.artifacts._handle import ArtifactWorkspace
from firefly_orm.artifacts._registry import Artifacts
from firefly_orm.artifacts._results import WorkspaceSnapshot
from firefly_orm.artifacts._rules import WorkspaceOptions, check_bool, check_workspace_key
from firefly_orm.bridges._steps import (
    CallOut,
    MemoryLayer,
    Operation,
    async_method,
    run,
    sync_method,
)
from firefly_orm.bridges._threads import call_blocking
from firefly_orm.errors import EntryValidationError
from firefly_orm.store import InMemoryStore
from firefly_orm.uow import ClosesOnExit

__all__ = ["DirectoryWorkspace"]

logger = logging.getLogger("firefly_orm.artifacts._flyte")

P = ParamSpec("P")
T = TypeVar("T")

#: Seconds an operation waits for the directory's lock before giving up.
DEFAULT_LOCK_TIMEOUT = 30.0


def _mirrored(
    op: Callable[Concatenate[ArtifactWorkspace, P], Operation[T]], *, writes: bool
) -> Callable[Concatenate[DirectoryWorkspace, P], Operation[T]]:
    """``op`` of :class:`ArtifactWorkspace`, run on the directory's mirror under its lock."""

    def mirrored(self: DirectoryWorkspace, /, *args: P.args, **kwargs: P.kwargs) -> Operation[T]:
        def call(workspace: ArtifactWorkspace) -> T:
            return run(workspace.store, op(workspace, *args, **kwargs))

        return (yield from self._locked(call, writes))

    functools.update_wrapper(mirrored, op)
    return mirrored


class DirectoryWorkspace(ClosesOnExit, MemoryLayer):
    """An artifact workspace that lives in a directory laid out as Flyte's ``MemoryStore``.

    ``messages.json``, one file per path, ``meta/``, ``audit/log.jsonl`` and
    ``versions/`` (see :mod:`firefly_orm.artifacts._flyte`), kept up to date
    on every change, so Flyte reads it as it is and
    :func:`~firefly_orm.artifacts._flyte.import_directory` imports it.  It has
    the methods of :class:`~firefly_orm.artifacts.ArtifactWorkspace`, with
    the same rules (they run the same code), and ``file_exists(path)`` for its
    ``exists(path)``; ``exists`` asks object storage (below).

    **Across processes.**  Each operation holds the directory's lock
    (``meta/@live/lock``), reloads the directory if another process changed
    it, and writes a change through a redo journal with atomic renames: a
    process killed half way leaves either the state before or a journal that
    the next operation (of any process) finishes; no file is ever torn, and
    the audit log always matches the files.  Writers must go through this
    class (Flyte's own writer takes no lock).

    **Cost.**  The directory is mirrored in memory; a change lays the
    workspace out again (CPU in the number of files) and writes only the files
    that changed, the metadata file ``meta/@workspace.json`` and the
    appended audit lines; ``messages.json`` is one JSON list, rewritten when
    a message is appended.

    Args:
        root: The directory.  It is created if missing and what it holds is
            loaded (checked as an import checks it).  ``None``: a new
            temporary directory, removed by :meth:`close`.
        key: The workspace key (default: the one the directory records, else
            its name).
        messages: Messages appended to the transcript on opening.
        remote_base: The ``fsspec`` URL under which :meth:`remote_path_for_key`
            places workspaces (``s3://bucket/memory``).
        org: Flyte's organisation of :meth:`remote_path_for_key`.
        project: Flyte's project.
        domain: Flyte's domain.
        storage_options: Options of the ``fsspec`` file system of
            ``remote_base`` (credentials, ``client_kwargs``...).
        lock_timeout: Seconds an operation waits for the lock.
        **options: :class:`~firefly_orm.artifacts.WorkspaceOptions`.

    Raises:
        DirectoryLayoutError: ``root`` holds something the layout does not allow.

    Example:
        >>> with DirectoryWorkspace(read_only_prefixes=("memory/",)) as ws:
        ...     info = ws.write_text("user/notes.md", "hello")
        ...     (ws.root / "user" / "notes.md").read_text()
        'hello'
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        key: str | None = None,
        messages: Iterable[Any] | None = None,
        remote_base: str | None = None,
        org: str = "default",
        project: str = "default",
        domain: str = "development",
        storage_options: Mapping[str, Any] | None = None,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        **options: Unpack[WorkspaceOptions],
    ) -> None:
        self._key = None if key is None else check_workspace_key(key)
        self._org = check_workspace_key(org, "org")
        self._project = check_workspace_key(project, "project")
        self._domain = check_workspace_key(domain, "domain")
        self._remote_base = remote_base
        self._storage_options = dict(storage_options or {})
        self._lock_timeout = float(lock_timeout)
        # Checked by building one handle, before anything is created on disk.
        self._options = ArtifactWorkspace("options", **options).options()
        super().__init__(InMemoryStore())
        self._temporary = root is None
        if root is None:
            self._root = Path(tempfile.mkdtemp(prefix="firefly-workspace-"))
        else:
            self._root = Path(os.path.abspath(root))
            self._root.mkdir(parents=True, exist_ok=True)
        self._thread_lock = threading.Lock()
        self._mirror: ArtifactWorkspace | None = None
        self._tree: dict[str, journal.Content] = {}
        self._generation: str | None = None
        self._closed = False
        try:
            initial = None if messages is None else list(messages)
            self._under_lock(lambda ws: ws.extend(initial) if initial else 0, initial is not None)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ settings
    @property
    def root(self) -> Path:
        """The directory."""
        return self._root

    @property
    def temporary(self) -> bool:
        """Whether the directory is a temporary one, removed by :meth:`close`."""
        return self._temporary

    @property
    def key(self) -> str:
        """The workspace key."""
        return self._handle().key

    @property
    def read_only_prefixes(self) -> tuple[str, ...]:
        """Paths starting with one of these cannot be written or deleted directly."""
        return tuple(self._options.get("read_only_prefixes", ()))

    def options(self) -> WorkspaceOptions:
        """This workspace's options (to open another handle alike)."""
        return WorkspaceOptions(**self._options)

    def __repr__(self) -> str:
        return f"DirectoryWorkspace(root={str(self._root)!r}, temporary={self._temporary})"

    # ------------------------------------------------------------------ the directory
    def _handle(self) -> ArtifactWorkspace:
        if self._mirror is None:
            self._under_lock(lambda ws: None, False)
        assert self._mirror is not None
        return self._mirror

    def _load(self) -> None:
        """Read the directory into the mirror (the lock is held)."""
        scanned = {
            rel: found for rel, found in _scan(self._root).items() if not rel.startswith(LIVE_DIR)
        }
        snapshot = _snapshot_of_tree(scanned, self._key or self._root.name)
        if self._key is not None:
            snapshot.key = self._key
        snapshot.key = checked(str(self._root), check_workspace_key, snapshot.key)
        self._mirror = self._adopt(snapshot)
        self._tree = {rel: journal.Content(f.data, f.mtime) for rel, f in scanned.items()}
        self._key = snapshot.key
        self._generation = journal.generation(self._root)
        if not scanned:  # a new workspace: lay out its transcript and metadata at once
            self._commit()

    def _adopt(self, snapshot: WorkspaceSnapshot) -> ArtifactWorkspace:
        registry = Artifacts(store=self._store)
        return registry.import_snapshot(snapshot, replace=True, **self._options)

    def _commit(self) -> None:
        """Write what the mirror holds and the directory does not (the lock is held)."""
        assert self._mirror is not None
        try:
            laid_out = _layout_tree(self._mirror.export_snapshot())
            new = {rel: journal.Content(out.data, out.mtime) for rel, out in laid_out.items()}
            change = journal.diff(self._tree, new)
            if change.empty:
                return
            journal.commit(self._root, change)
        except BaseException:
            self._mirror = None  # reloaded from the directory by the next operation
            raise
        self._tree, self._generation = new, change.generation
        logger.debug("directory workspace %s: %d file(s) written", self._root, len(change.writes))

    def _under_lock(self, fn: Callable[[ArtifactWorkspace], T], writes: bool) -> T:
        """``fn(mirror)`` under the lock, the directory loaded; its changes saved if ``writes``."""
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        with self._thread_lock, journal.directory_lock(self._root, self._lock_timeout):
            if journal.recover(self._root):
                logger.warning("directory workspace %s: finished an interrupted write", self._root)
                self._mirror = None
            if self._mirror is None or journal.generation(self._root) != self._generation:
                self._load()
            assert self._mirror is not None
            result = fn(self._mirror)
            if writes:
                self._commit()
            return result

    def _locked(self, fn: Callable[[ArtifactWorkspace], T], writes: bool) -> Operation[T]:
        step: CallOut[T] = CallOut(self._under_lock, (fn, writes), what="the workspace directory")
        return (yield from step)

    def _replace_with(self, snapshot: WorkspaceSnapshot, replace: bool) -> None:
        def adopt(current: ArtifactWorkspace) -> None:
            held = current.export_snapshot()
            if not replace and (held.files or held.audit or held.versions or held.messages):
                raise WorkspaceExistsError(
                    f"{self._root} holds a workspace already (pass replace=True to overwrite)"
                )
            snapshot.key = current.key
            self._mirror = self._adopt(snapshot)

        self._under_lock(adopt, True)

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Stop using the directory; a temporary one is removed.  Idempotent."""
        self._closed = True
        self._mirror = None
        if self._temporary:
            shutil.rmtree(self._root, ignore_errors=True)

    async def async_close(self) -> None:
        """Async twin of :meth:`close` (the removal in a worker thread)."""
        await call_blocking(self.close)

    # ------------------------------------------------------------------ object storage
    def remote_path_for_key(
        self,
        key: str | None = None,
        *,
        org: str | None = None,
        project: str | None = None,
        domain: str | None = None,
    ) -> str:
        """``<remote_base>/<org>/<project>/<domain>/<key>``: where ``key`` (default: ours) lives.

        Each part is percent-encoded; ``org``, ``project`` and ``domain``
        default to the workspace's.

        Raises:
            EntryValidationError: No ``remote_base`` was given, or a part is empty.
        """
        if self._remote_base is None:
            raise EntryValidationError(
                "remote_base", "is not set: give DirectoryWorkspace(remote_base='s3://...')"
            )
        return remote.remote_path(
            self._remote_base,
            self._org if org is None else org,
            self._project if project is None else project,
            self._domain if domain is None else domain,
            self.key if key is None else key,
        )

    def _exists(
        self,
        key: str,
        org: str | None = None,
        project: str | None = None,
        domain: str | None = None,
    ) -> Operation[bool]:
        """Whether object storage holds workspace ``key`` (:meth:`remote_path_for_key`)."""
        url = self.remote_path_for_key(key, org=org, project=project, domain=domain)
        found = yield from CallOut(
            remote.holds_workspace, (url, self._storage_options), what="the object store"
        )
        return found

    def _save(
        self,
        remote_destination: str | None = None,
        *,
        overwrite: bool = False,
        storage_options: Mapping[str, Any] | None = None,
    ) -> Operation[str]:
        """Write the workspace under an ``fsspec`` URL; return the URL.

        Args:
            remote_destination: Where (``s3://bucket/ws``, ``gs://...``, a
                local path); default :meth:`remote_path_for_key` of this key.
            overwrite: Replace a workspace saved there before.
            storage_options: The file system's options (default: the
                workspace's ``storage_options``).

        Raises:
            DirectoryLayoutError: The destination holds objects that are not a
                workspace, or a workspace and ``overwrite`` is false; nothing
                is written.
        """
        url = self.remote_path_for_key() if remote_destination is None else remote_destination
        overwrite = check_bool("overwrite", overwrite)
        tree = yield from self._locked(lambda ws: dict(self._tree), False)
        options = self._storage_options if storage_options is None else storage_options
        files = {rel: content.data for rel, content in tree.items()}
        yield from CallOut(
            functools.partial(remote.upload, overwrite=overwrite, storage_options=options),
            (files, url),
            what="the object store",
        )
        logger.info("directory workspace %s saved to %s (%d files)", self._root, url, len(files))
        return url

    @classmethod
    def load(
        cls,
        remote_source: str,
        root: str | os.PathLike[str] | None = None,
        *,
        replace: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> DirectoryWorkspace:
        """A workspace read from an ``fsspec`` URL, in ``root`` (default: a temporary directory).

        Everything under the URL is read and checked whole before the
        directory is written.  ``kwargs`` are the constructor's (``key``,
        ``remote_base``, ``org``, options...).

        Raises:
            DirectoryLayoutError: The URL holds no workspace, or anything the
                layout does not allow; nothing is written.
            WorkspaceExistsError: ``root`` holds a workspace and ``replace`` is false.
        """
        replace = check_bool("replace", replace)
        objects = remote.download(remote_source, storage_options)
        found = {rel: _Found(data, at) for rel, (data, at) in objects.items()}
        # Without the extra file, the key is the URL's last part (remote_path_for_key quoted it).
        default_key = unquote(remote_source.rstrip("/").rpartition("/")[2]) or "workspace"
        snapshot = _snapshot_of_tree(found, default_key)
        if "storage_options" not in kwargs and storage_options is not None:
            kwargs["storage_options"] = storage_options
        kwargs.setdefault("key", checked(remote_source, check_workspace_key, snapshot.key))
        workspace = cls(root, **kwargs)
        try:
            workspace._replace_with(snapshot, replace)
        except BaseException:
            workspace.close()
            raise
        logger.info("directory workspace %s loaded from %s", workspace.root, remote_source)
        return workspace

    @classmethod
    async def async_load(
        cls, remote_source: str, root: str | os.PathLike[str] | None = None, **kwargs: Any
    ) -> DirectoryWorkspace:
        """Async twin of :meth:`load` (in a worker thread; the same keyword arguments)."""
        return await call_blocking(functools.partial(cls.load, **kwargs), remote_source, root)

    @classmethod
    async def async_open(
        cls, root: str | os.PathLike[str] | None = None, **kwargs: Any
    ) -> DirectoryWorkspace:
        """The constructor from async code (the directory is read in a worker thread)."""
        return await call_blocking(functools.partial(cls, root, **kwargs))

    # ------------------------------------------------------------------ the workspace's methods
    _write_text = _mirrored(ArtifactWorkspace._write_text, writes=True)
    _write_json = _mirrored(ArtifactWorkspace._write_json, writes=True)
    _write_bytes = _mirrored(ArtifactWorkspace._write_bytes, writes=True)
    _delete = _mirrored(ArtifactWorkspace._delete, writes=True)
    _promote = _mirrored(ArtifactWorkspace._promote, writes=True)
    _append = _mirrored(ArtifactWorkspace._append, writes=True)
    _extend = _mirrored(ArtifactWorkspace._extend, writes=True)
    _read = _mirrored(ArtifactWorkspace._read, writes=False)
    _read_text = _mirrored(ArtifactWorkspace._read_text, writes=False)
    _read_json = _mirrored(ArtifactWorkspace._read_json, writes=False)
    _read_bytes = _mirrored(ArtifactWorkspace._read_bytes, writes=False)
    _stat = _mirrored(ArtifactWorkspace._stat, writes=False)
    _current_sha = _mirrored(ArtifactWorkspace._current_sha, writes=False)
    _file_exists = _mirrored(ArtifactWorkspace._exists, writes=False)
    _list_paths = _mirrored(ArtifactWorkspace._list_paths, writes=False)
    _files = _mirrored(ArtifactWorkspace._files, writes=False)
    _audit_tail = _mirrored(ArtifactWorkspace._audit_tail, writes=False)
    _audit_log = _mirrored(ArtifactWorkspace._audit_log, writes=False)
    _history = _mirrored(ArtifactWorkspace._history, writes=False)
    _read_version = _mirrored(ArtifactWorkspace._read_version, writes=False)
    _messages = _mirrored(ArtifactWorkspace._messages, writes=False)
    _transcript = _mirrored(ArtifactWorkspace._transcript, writes=False)
    _export_snapshot = _mirrored(ArtifactWorkspace._export_snapshot, writes=False)

    write_text = sync_method(_write_text)
    write_json = sync_method(_write_json)
    write_bytes = sync_method(_write_bytes)
    delete = sync_method(_delete)
    promote = sync_method(_promote)
    append = sync_method(_append)
    extend = sync_method(_extend)
    read = sync_method(_read)
    read_text = sync_method(_read_text)
    read_json = sync_method(_read_json)
    read_bytes = sync_method(_read_bytes)
    stat = sync_method(_stat)
    current_sha = sync_method(_current_sha)
    file_exists = sync_method(_file_exists)
    list_paths = sync_method(_list_paths)
    files = sync_method(_files)
    audit_tail = sync_method(_audit_tail)
    audit_log = sync_method(_audit_log)
    history = sync_method(_history)
    read_version = sync_method(_read_version)
    messages = sync_method(_messages)
    transcript = sync_method(_transcript)
    export_snapshot = sync_method(_export_snapshot)
    exists = sync_method(_exists)
    save = sync_method(_save)

    async_write_text = async_method(_write_text)
    async_write_json = async_method(_write_json)
    async_write_bytes = async_method(_write_bytes)
    async_delete = async_method(_delete)
    async_promote = async_method(_promote)
    async_append = async_method(_append)
    async_extend = async_method(_extend)
    async_read = async_method(_read)
    async_read_text = async_method(_read_text)
    async_read_json = async_method(_read_json)
    async_read_bytes = async_method(_read_bytes)
    async_stat = async_method(_stat)
    async_current_sha = async_method(_current_sha)
    async_file_exists = async_method(_file_exists)
    async_list_paths = async_method(_list_paths)
    async_files = async_method(_files)
    async_audit_tail = async_method(_audit_tail)
    async_audit_log = async_method(_audit_log)
    async_history = async_method(_history)
    async_read_version = async_method(_read_version)
    async_messages = async_method(_messages)
    async_transcript = async_method(_transcript)
    async_export_snapshot = async_method(_export_snapshot)
    async_exists = async_method(_exists)
    async_save = async_method(_save)
