"""Keyed artifact workspaces: :class:`Artifacts` (create, open, delete, list, import).

Each public method is defined once, as an operation method ``_<name>``
(:mod:`firefly_orm.bridges._steps`); ``<name>`` and ``async_<name>`` are
derived from it.  A handle it returns is an
:class:`~firefly_orm.artifacts.ArtifactWorkspace`.
"""

from __future__ import annotations

import builtins
import logging
from typing import Any, Unpack

from firefly_orm.artifacts import _ops as ops
from firefly_orm.artifacts._handle import ArtifactWorkspace
from firefly_orm.artifacts._layout import Layout
from firefly_orm.artifacts._results import WorkspaceInfo, WorkspaceSnapshot, check_snapshot
from firefly_orm.artifacts._rules import (
    WorkspaceOptions,
    check_bool,
    check_workspace_key,
)
from firefly_orm.bridges._steps import (
    MemoryLayer,
    Operation,
    Transaction,
    async_method,
    sync_method,
)
from firefly_orm.conversation._model import check_int
from firefly_orm.conversation._transfer import refresh_statistics
from firefly_orm.entry import validate_user_id
from firefly_orm.entry._rules import check_bound_user
from firefly_orm.errors import EntryValidationError
from firefly_orm.store import InMemoryStore, MemoryStore

__all__ = ["Artifacts"]

#: The logger the workspace classes have always used (logging configurations name it).
logger = logging.getLogger("firefly_orm.artifacts._workspace")


class Artifacts(MemoryLayer):
    """Keyed artifact workspaces of one owner (or the shared ones) in a store.

    Args:
        store: Where the workspaces live; a new
            :class:`~firefly_orm.store.InMemoryStore` when ``None``.
        user_id: The owner of the workspaces this registry creates and finds
            (``None``: the shared workspaces).  Two users' workspaces with the
            same key are two workspaces.

    **Ownership.**  A registry bound to a user (``Artifacts(user_id="ann")``)
    reaches that user's workspaces only, on every read, write, edit, delete,
    export and import: each workspace's rows live in namespaces of its own,
    named after its owner and key, and every row carries the owner's
    ``user_id``.  Another user's key is the same as a missing one (``open``
    raises the same :class:`~firefly_orm.errors.NotFoundError`, ``exists`` is
    false, ``get_or_create`` makes the caller's own workspace), so keys cannot
    be probed; what it creates or imports is its user's.  Hand request
    handlers a bound registry.  An unbound registry (``user_id=None``) works on
    the shared workspaces, and is the admin's: :meth:`for_user` gives it any
    user's registry, and ``list_workspaces(all_users=True)`` lists every
    owner's workspaces.

    Every method's ``**options`` are :class:`~firefly_orm.artifacts.WorkspaceOptions`
    for the handle it returns.

    Example:
        >>> artifacts = Artifacts()
        >>> ws = artifacts.create("session-42", keep_versions=True)
        >>> artifacts.exists("session-42")
        True
    """

    def __init__(self, *, store: MemoryStore | None = None, user_id: str | None = None) -> None:
        self._user_id = None if user_id is None else validate_user_id(user_id)
        super().__init__(store if store is not None else InMemoryStore())

    @property
    def user_id(self) -> str | None:
        """The owner of this registry's workspaces (``None``: shared)."""
        return self._user_id

    def __repr__(self) -> str:
        return f"Artifacts(user_id={self._user_id!r}, store={type(self._store).__name__})"

    def for_user(self, user_id: str) -> Artifacts:
        """The registry of ``user_id``'s workspaces on the same store (no I/O).

        An unbound (admin) registry gives any user's; a bound one only its own.

        Raises:
            EntryValidationError: A bad ``user_id``, or this registry is bound
                to another user.
        """
        user_id = check_bound_user(user_id, self._user_id, "registry")
        return Artifacts(store=self._store, user_id=user_id)

    def workspace(self, key: str, **options: Unpack[WorkspaceOptions]) -> ArtifactWorkspace:
        """A handle on workspace ``key`` (no I/O; its writes need the workspace to exist)."""
        return ArtifactWorkspace(key, store=self._store, user_id=self._user_id, **options)

    def _layout(self, key: Any) -> Layout:
        return Layout.of(check_workspace_key(key), self._user_id)

    # ------------------------------------------------------------------ operations
    def _create(
        self, key: str, **options: Unpack[WorkspaceOptions]
    ) -> Operation[ArtifactWorkspace]:
        """Create workspace ``key``; return a handle on it.

        Raises:
            WorkspaceExistsError: It exists already (nothing is changed).
            EntryValidationError: A bad key or option.
        """
        handle = self.workspace(key, **options)
        yield from ops.retry_races(Transaction.write(ops.create_workspace, handle.layout))
        logger.info("artifact workspace %r (user %r) created", handle.key, self._user_id)
        return handle

    def _get_or_create(
        self, key: str, **options: Unpack[WorkspaceOptions]
    ) -> Operation[ArtifactWorkspace]:
        """A handle on workspace ``key``, created first if it does not exist."""
        handle = self.workspace(key, **options)
        _, created = yield from ops.retry_races(
            Transaction.write(ops.ensure_workspace, handle.layout)
        )
        if created:
            logger.info("artifact workspace %r (user %r) created", handle.key, self._user_id)
        return handle

    def _open(self, key: str, **options: Unpack[WorkspaceOptions]) -> Operation[ArtifactWorkspace]:
        """A handle on the existing workspace ``key``.

        Raises:
            NotFoundError: It does not exist.
        """
        handle = self.workspace(key, **options)
        yield from Transaction.read(ops.require_workspace, handle.layout)
        return handle

    def _exists(self, key: str) -> Operation[bool]:
        """Whether workspace ``key`` exists."""
        info = yield from self._info(key)
        return info is not None

    def _info(self, key: str) -> Operation[WorkspaceInfo | None]:
        """Workspace ``key`` as the registry knows it (key, owner, creation time), or ``None``."""
        return (yield from Transaction.read(ops.read_workspace, self._layout(key)))

    def _delete_workspace(self, key: str) -> Operation[bool]:
        """Delete workspace ``key`` with every file, audit row, version and message, atomically.

        Returns whether it existed.  Handles on it fail to write afterwards
        (:class:`~firefly_orm.errors.NotFoundError`).
        """
        layout = self._layout(key)
        existed = yield from ops.retry_races(Transaction.write(ops.delete_workspace, layout))
        if existed:
            logger.info("artifact workspace %r (user %r) deleted", layout.key, self._user_id)
        return existed

    def _list_workspaces(
        self, *, prefix: str = "", limit: int | None = None, all_users: bool = False
    ) -> Operation[builtins.list[WorkspaceInfo]]:
        """This registry's workspaces whose key starts with ``prefix``, sorted by key.

        ``all_users=True`` (an unbound registry only): every owner's workspaces
        and the shared ones, sorted by key (each :class:`WorkspaceInfo` names
        its ``user_id``).

        Raises:
            EntryValidationError: A bad argument, or ``all_users`` on a
                registry bound to a user.
        """
        if not isinstance(prefix, str) or "\x00" in prefix:
            raise EntryValidationError("prefix", "must be a string without NUL")
        limit = None if limit is None else check_int("limit", limit, 0)
        if check_bool("all_users", all_users) and self._user_id is not None:
            raise EntryValidationError(
                "all_users", f"this registry serves user {self._user_id!r} only"
            )
        return (
            yield from Transaction.read(
                ops.list_workspaces, self._user_id, prefix, limit, all_users=all_users
            )
        )

    def _import_snapshot(
        self,
        snapshot: WorkspaceSnapshot,
        *,
        key: str | None = None,
        replace: bool = False,
        **options: Unpack[WorkspaceOptions],
    ) -> Operation[ArtifactWorkspace]:
        """Write ``snapshot`` as a workspace of this registry, all or nothing; return a handle.

        The workspace is ``key`` (default: the snapshot's) of this registry's
        owner (the snapshot's ``user_id`` is not used).  Files keep their
        metadata, version and time; audit records, versions and messages their
        times.  Every part is checked first (paths, shas against the bytes,
        sizes against ``max_bytes``, messages); a bad one raises
        :class:`~firefly_orm.errors.EntryValidationError` naming it
        (``files[3].sha256``) and nothing is written.

        Raises:
            WorkspaceExistsError: The workspace exists and ``replace`` is false.
        """
        if not isinstance(snapshot, WorkspaceSnapshot):
            raise EntryValidationError(
                "snapshot", f"must be a WorkspaceSnapshot, got {type(snapshot).__name__}"
            )
        handle = self.workspace(snapshot.key if key is None else key, **options)
        replace = check_bool("replace", replace)
        bodies, version_bodies, encoded = check_snapshot(snapshot, handle.max_bytes)
        rows = yield from ops.retry_races(
            Transaction.write(
                ops.import_snapshot,
                handle.layout,
                snapshot,
                bodies,
                version_bodies,
                encoded,
                replace,
            )
        )
        logger.info(
            "artifact workspace %r (user %r) imported: %d file(s), %d row(s)",
            handle.key,
            self._user_id,
            len(bodies),
            rows,
        )
        yield from refresh_statistics(rows)
        return handle

    # ------------------------------------------------------------------ public forms
    create = sync_method(_create)
    get_or_create = sync_method(_get_or_create)
    open = sync_method(_open)
    exists = sync_method(_exists)
    info = sync_method(_info)
    delete_workspace = sync_method(_delete_workspace)
    list_workspaces = sync_method(_list_workspaces)
    import_snapshot = sync_method(_import_snapshot)

    async_create = async_method(_create)
    async_get_or_create = async_method(_get_or_create)
    async_open = async_method(_open)
    async_exists = async_method(_exists)
    async_info = async_method(_info)
    async_delete_workspace = async_method(_delete_workspace)
    async_list_workspaces = async_method(_list_workspaces)
    async_import_snapshot = async_method(_import_snapshot)
