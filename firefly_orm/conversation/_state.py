"""Scoped conversation state: the key rules, the rows, and the transactions over them.

A conversation's state is a JSON object split by scope the way Google ADK
splits a session's state, by the prefix of each key:

* ``app:<key>``: shared by every conversation of the store (the app), owned by
  nobody: :data:`~firefly_orm._layout.APP_STATE_NAMESPACE`;
* ``user:<key>``: shared by every conversation of the conversation's owner,
  in the user's namespace (:func:`~firefly_orm._layout.user_state_namespace`),
  each row tagged with the user (so ``erase_user`` removes it);
* ``temp:<key>``: never stored; it lives in the view the call that gave it
  returns, and nowhere else;
* any other key: the conversation's own, a row in its namespace (so clearing
  the conversation removes it), tagged with its owner.

Each key is one row (key ``state:<key>``, content ``{"value": <JSON>}``), so
writers of different keys never touch the same row and a concurrent update
of another key is never lost, on every store, without a retry; writers of the
same key: the last commit wins.  A key is removed by deleting its row.

The transactions here run inside a unit of work that may also add turns:
:func:`state_first` runs :func:`write_state` at the start of every committing
unit of work of an operation (the turn's), so the state and the turn commit
together or not at all.  The state is written first so that on PostgreSQL the
one-statement append runs inside the transaction the state write began.  A
turn added with an idempotency key (never one statement) has its state
written after it instead (:func:`state_after`), and not at all when the
append finds the key's turn already stored: a retry does not apply its delta
a second time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from firefly_orm._layout import (
    APP_STATE_NAMESPACE,
    STATE_KEY_PREFIX,
    user_state_namespace,
)
from firefly_orm.bridges._steps import (
    HoldingTransaction,
    HoldingWork,
    Operation,
    Step,
    Transaction,
)
from firefly_orm.conversation._owner import claim, each_step, guarded, owner_row
from firefly_orm.conversation._rows import HEAD_KEY, INDEX_NAMESPACE, conversation_namespace
from firefly_orm.entry import (
    MemoryEntry,
    MemoryScope,
    derived_entry_id,
    validate_key,
    validate_user_id,
)
from firefly_orm.entry._json import validate_json_value
from firefly_orm.errors import EntryValidationError
from firefly_orm.protocols import UnitOfWork

__all__ = [
    "APP_PREFIX",
    "MAX_STATE_KEY_LENGTH",
    "TEMP_PREFIX",
    "USER_PREFIX",
    "StateDelta",
    "check_shared_state",
    "check_state_delta",
    "conversation_state",
    "fix_state_rows",
    "merged_view",
    "misfiled_state_rows",
    "read_shared_state",
    "read_state",
    "replace_conversation_state",
    "state_after",
    "state_first",
    "with_state",
    "write_shared_state",
    "write_state",
]

T = TypeVar("T")

#: Prefix of the keys shared by every conversation of the store (ADK's ``State.APP_PREFIX``).
APP_PREFIX = "app:"
#: Prefix of the keys shared by every conversation of a user (ADK's ``State.USER_PREFIX``).
USER_PREFIX = "user:"
#: Prefix of the keys never stored (ADK's ``State.TEMP_PREFIX``).
TEMP_PREFIX = "temp:"
#: Longest accepted state key, prefix excluded (its row key must fit an index).
MAX_STATE_KEY_LENGTH = 256
#: The field of a state row's content holding the value.
_VALUE = "value"


@dataclass(frozen=True)
class StateDelta:
    """A checked state change, split by scope (keys without their prefix).

    Attributes:
        app: New values of ``app:`` keys.
        user: New values of ``user:`` keys.
        own: New values of the conversation's own keys.
        temp: The ``temp:`` keys (never written).
        remove_app / remove_user / remove_own: Keys to delete, per scope.
    """

    app: dict[str, Any] = field(default_factory=dict)
    user: dict[str, Any] = field(default_factory=dict)
    own: dict[str, Any] = field(default_factory=dict)
    temp: dict[str, Any] = field(default_factory=dict)
    remove_app: tuple[str, ...] = ()
    remove_user: tuple[str, ...] = ()
    remove_own: tuple[str, ...] = ()

    @property
    def writes(self) -> bool:
        """Whether applying it writes anything (``temp:`` keys alone do not)."""
        return bool(
            self.app
            or self.user
            or self.own
            or self.remove_app
            or self.remove_user
            or self.remove_own
        )

    @property
    def needs_user(self) -> bool:
        """Whether it changes ``user:`` keys (the conversation must have an owner)."""
        return bool(self.user or self.remove_user)


def _split_key(name: str, key: Any) -> tuple[str, str]:
    """``(scope, bare key)`` of a state key (scope ``"app"``, ``"user"``, ``"temp"``, ``"own"``)."""
    if not isinstance(key, str):
        raise EntryValidationError(name, f"keys must be strings, got {type(key).__name__}")
    scope, bare = "own", key
    for prefix, which in ((APP_PREFIX, "app"), (USER_PREFIX, "user"), (TEMP_PREFIX, "temp")):
        if key.startswith(prefix):
            scope, bare = which, key.removeprefix(prefix)
            break
    if not bare:
        raise EntryValidationError(name, f"key {key!r} names no key after its prefix")
    return scope, _check_bare(name, key, bare)


def _check_bare(name: str, key: str, bare: str) -> str:
    """``bare`` (the stored part of ``key``) if it can be a state row's key."""
    if len(bare) > MAX_STATE_KEY_LENGTH:
        raise EntryValidationError(
            name, f"key {key[:40]!r}... is longer than {MAX_STATE_KEY_LENGTH} characters"
        )
    try:
        validate_key(bare)
    except EntryValidationError as exc:
        raise EntryValidationError(name, f"key {key!r}: {exc}") from None
    return bare


def _check_value(name: str, value: Any) -> Any:
    """A JSON copy of ``value``, or ``EntryValidationError`` naming ``name``."""
    try:
        validate_json_value(name, value)
    except RecursionError:
        raise EntryValidationError(name, "nested too deeply") from None
    return json.loads(json.dumps(value, allow_nan=False))


def check_state_delta(
    delta: Mapping[str, Any] | None, remove: Iterable[str] = (), *, name: str = "state_delta"
) -> StateDelta:
    """``delta`` (and the keys to ``remove``) checked and split by scope; nothing written.

    Values must be JSON values (the rules of an entry's content); each is
    stored as a JSON copy.  A key may not be both set and removed.

    Raises:
        EntryValidationError: Not a mapping, a key that is not a string, empty
            after its prefix, too long or unstorable, a value that is not JSON,
            or a key both set and removed.
    """
    if delta is None:
        delta = {}
    if not isinstance(delta, Mapping):
        raise EntryValidationError(name, f"must be a mapping, got {type(delta).__name__}")
    if isinstance(remove, str | bytes) or not isinstance(remove, Iterable):
        raise EntryValidationError("remove", "must be an iterable of keys")
    scopes: dict[str, dict[str, Any]] = {"app": {}, "user": {}, "own": {}, "temp": {}}
    for key, value in delta.items():
        scope, bare = _split_key(name, key)
        scopes[scope][bare] = _check_value(f"{name}[{key!r}]", value)
    removed: dict[str, list[str]] = {"app": [], "user": [], "own": [], "temp": []}
    for key in remove:
        scope, bare = _split_key("remove", key)
        if key in delta:
            raise EntryValidationError("remove", f"key {key!r} is both set and removed")
        if scope != "temp" and bare not in removed[scope]:
            removed[scope].append(bare)
    return StateDelta(
        app=scopes["app"],
        user=scopes["user"],
        own=scopes["own"],
        temp=scopes["temp"],
        remove_app=tuple(removed["app"]),
        remove_user=tuple(removed["user"]),
        remove_own=tuple(removed["own"]),
    )


# --------------------------------------------------------------------------- rows


def _state_row(namespace: str, key: str, value: Any, user_id: str | None) -> MemoryEntry:
    row_key = f"{STATE_KEY_PREFIX}{key}"
    return MemoryEntry(
        entry_id=derived_entry_id(namespace, row_key),
        namespace=namespace,
        key=row_key,
        content={_VALUE: value},
        user_id=user_id,
        scope=MemoryScope.CONVERSATION,
    )


def _apply(
    uow: UnitOfWork,
    namespace: str,
    values: Mapping[str, Any],
    removed: Iterable[str],
    user_id: str | None,
) -> None:
    """Upsert one row per key of ``values``, delete the rows of ``removed``."""
    for key, value in values.items():
        uow.entries.save(namespace, _state_row(namespace, key, value, user_id))
    ids = [derived_entry_id(namespace, f"{STATE_KEY_PREFIX}{key}") for key in removed]
    if ids:
        uow.entries.delete(namespace, ids)


def _read(uow: UnitOfWork, namespace: str) -> dict[str, Any]:
    """The state stored in ``namespace``: bare key -> value (unreadable rows left out)."""
    state: dict[str, Any] = {}
    for row in uow.entries.list(namespace, key_prefix=STATE_KEY_PREFIX):
        content = row.content
        if row.key is not None and isinstance(content, dict) and _VALUE in content:
            state[row.key.removeprefix(STATE_KEY_PREFIX)] = content[_VALUE]
    return state


def merged_view(
    app: Mapping[str, Any], user: Mapping[str, Any], own: Mapping[str, Any]
) -> dict[str, Any]:
    """One dict as ADK shows a session's state: own keys bare, ``app:`` and ``user:`` prefixed."""
    merged = dict(own)
    merged.update({APP_PREFIX + k: v for k, v in app.items()})
    merged.update({USER_PREFIX + k: v for k, v in user.items()})
    return merged


# --------------------------------------------------------------------------- transactions


def write_state(
    uow: UnitOfWork, conversation_id: str, delta: StateDelta, user_id: str | None
) -> str | None:
    """Transaction part: apply ``delta`` for ``conversation_id``; return the owner it used.

    The owner is the conversation's (a new conversation's: ``user_id``, the
    one the write acts for); ``user:`` keys go to that user's state.

    Raises:
        ConversationNotFoundError: The conversation is not ``user_id``'s.
        EntryValidationError: ``user:`` keys for a conversation owned by nobody.
    """
    namespace = conversation_namespace(conversation_id)
    # Own keys: the head locked where the store can, so a concurrent clear cannot
    # leave them behind in a namespace it emptied.
    row = uow.entries.get_by_key(
        namespace, HEAD_KEY, for_update=bool(delta.own or delta.remove_own)
    )
    if row is None:
        row = owner_row(uow, conversation_id)
    owner = claim(row, user_id, conversation_id)
    if delta.needs_user and owner is None:
        raise EntryValidationError(
            "user_id",
            f"user: state keys need a user, and conversation {conversation_id!r} has no "
            "owner (pass user_id=, or bind the memory to a user)",
        )
    _apply(uow, APP_STATE_NAMESPACE, delta.app, delta.remove_app, None)
    if owner is not None:
        _apply(uow, user_state_namespace(owner), delta.user, delta.remove_user, owner)
    _apply(uow, namespace, delta.own, delta.remove_own, owner)
    return owner


def read_state(
    uow: UnitOfWork, conversation_id: str, user_id: str | None
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Transaction: ``(app, user, own)`` state of ``conversation_id``, keys bare.

    The user state is the owner's (a missing conversation's: ``user_id``'s).

    Raises:
        ConversationNotFoundError: The conversation is not ``user_id``'s.
    """
    owner = claim(owner_row(uow, conversation_id), user_id, conversation_id)
    user = {} if owner is None else _read(uow, user_state_namespace(owner))
    own = _read(uow, conversation_namespace(conversation_id))
    return _read(uow, APP_STATE_NAMESPACE), user, own


def conversation_state(uow: UnitOfWork, conversation_id: str) -> dict[str, Any]:
    """Transaction part: the conversation's own state (what an export carries)."""
    return _read(uow, conversation_namespace(conversation_id))


def replace_conversation_state(
    uow: UnitOfWork, conversation_id: str, state: Mapping[str, Any], owner: str | None
) -> None:
    """Transaction part: the conversation's own state becomes ``state`` (an import)."""
    namespace = conversation_namespace(conversation_id)
    stale = [row.entry_id for row in uow.entries.list(namespace, key_prefix=STATE_KEY_PREFIX)]
    if stale:
        uow.entries.delete(namespace, stale)
    _apply(uow, namespace, state, (), owner)


def read_shared_state(uow: UnitOfWork) -> dict[str, Any]:
    """Transaction: the app's keys and those of every user owning a conversation, bare.

    ``{"app": {...}, "users": {user_id: {...}}}`` (users without keys left out):
    the ``state`` section of an export bundle.
    """
    owners = sorted({row.user_id for row in uow.entries.list(INDEX_NAMESPACE) if row.user_id})
    users = {user: _read(uow, user_state_namespace(user)) for user in owners}
    return {"app": _read(uow, APP_STATE_NAMESPACE), "users": {u: s for u, s in users.items() if s}}


def check_shared_state(section: Any) -> dict[str, Any]:
    """An export bundle's ``state`` section, checked (keys bare, values JSON); nothing written.

    Raises:
        EntryValidationError: Not ``{"app": {...}, "users": {user_id: {...}}}``
            (both optional), a bad user id, key or value.
    """
    if not isinstance(section, Mapping) or not set(section) <= {"app", "users"}:
        raise EntryValidationError("state", 'must be an object with "app" and "users"')
    users = section.get("users") or {}
    if not isinstance(users, Mapping):
        raise EntryValidationError("state.users", "must be an object of user id -> state")
    checked: dict[str, Any] = {"app": _bare_values("state.app", section.get("app") or {})}
    checked["users"] = {
        validate_user_id(user): _bare_values(f"state.users[{user!r}]", values)
        for user, values in users.items()
    }
    return checked


def _bare_values(name: str, values: Any) -> dict[str, Any]:
    if not isinstance(values, Mapping):
        raise EntryValidationError(name, f"must be an object, got {type(values).__name__}")
    checked: dict[str, Any] = {}
    for key, value in values.items():
        if not isinstance(key, str) or not key:
            raise EntryValidationError(name, f"keys must be non-empty strings, got {key!r}")
        checked[_check_bare(name, key, key)] = _check_value(f"{name}[{key!r}]", value)
    return checked


def write_shared_state(uow: UnitOfWork, section: Mapping[str, Any]) -> None:
    """Transaction part: set the app's and the users' keys of a checked ``state``
    section (:func:`check_shared_state`); keys it does not name are kept."""
    _apply(uow, APP_STATE_NAMESPACE, section["app"], (), None)
    for user, values in section["users"].items():
        _apply(uow, user_state_namespace(user), values, (), user)


def misfiled_state_rows(
    uow: UnitOfWork, conversation_id: str, owner: str | None
) -> list[MemoryEntry]:
    """Transaction part: the conversation's state rows not tagged with ``owner``, or
    unreadable (no ``{"value": ...}`` content): what verify reports and repair fixes."""
    rows = uow.entries.list(conversation_namespace(conversation_id), key_prefix=STATE_KEY_PREFIX)
    return [
        row
        for row in rows
        if row.user_id != owner or not (isinstance(row.content, dict) and _VALUE in row.content)
    ]


def fix_state_rows(uow: UnitOfWork, rows: Iterable[MemoryEntry], owner: str | None) -> None:
    """Transaction part: re-tag misfiled state rows with ``owner``; delete unreadable ones."""
    for row in rows:
        namespace = row.namespace
        if isinstance(row.content, dict) and _VALUE in row.content and row.key is not None:
            key = row.key.removeprefix(STATE_KEY_PREFIX)
            uow.entries.save(namespace, _state_row(namespace, key, row.content[_VALUE], owner))
        else:
            uow.entries.delete(namespace, row.entry_id)


# --------------------------------------------------------------------------- with a turn


def state_first(op: Operation[T] | Step[T], write: Callable[[UnitOfWork], object]) -> Operation[T]:
    """``op``, with ``write(uow)`` run first in each unit of work of it that commits.

    Every committing :class:`~firefly_orm.bridges._steps.Transaction` and every
    :class:`~firefly_orm.bridges._steps.HoldingTransaction` of ``op`` (each
    retry included) runs ``write`` before its own work, so what ``write``
    stores commits with that work or not at all (read-only steps pass unchanged).
    """
    return guarded(op, write, writes_only=True)


def state_after(
    op: Operation[T] | Step[T],
    write: Callable[[UnitOfWork], object],
    skip: Callable[[Any], bool],
) -> Operation[T]:
    """``op``, with ``write(uow)`` run after the work of each unit of work of it that
    commits, unless ``skip(result)`` says that work wrote nothing to follow.

    As :func:`state_first` (every committing step, each retry), but ``write``
    runs once the step's work has returned, in the same unit of work, and
    sees what it returned: an idempotent append decides there, under the
    head's lock, whether it is a replay, and the state follows that decision.
    """
    return each_step(op, lambda step: _then(step, write, skip))


def _then(
    step: Step[Any], write: Callable[[UnitOfWork], object], skip: Callable[[Any], bool]
) -> Step[Any]:
    """``step`` with ``write`` run after its work unless ``skip`` (other steps: unchanged)."""
    if isinstance(step, Transaction) and step.commit:
        inner = step.work

        def work(uow: UnitOfWork) -> Any:
            result = inner(uow)
            if not skip(result):
                write(uow)
            return result

        return Transaction(work, read_only=step.read_only, commit=step.commit)
    if isinstance(step, HoldingTransaction):
        holding = step.work

        def holding_work(uow: UnitOfWork) -> HoldingWork[Any]:
            result = yield from holding(uow)
            if not skip(result):
                write(uow)
            return result

        return HoldingTransaction(holding_work)
    return step


def with_state(
    op: Operation[T],
    conversation_id: str,
    delta: StateDelta,
    user_id: str | None,
    *,
    replayed: Callable[[T], bool] | None = None,
) -> Operation[T]:
    """``op`` (adding turns to ``conversation_id``) applying ``delta`` in its unit of work.

    Unchanged when ``delta`` writes nothing.  ``replayed``: for an append with
    an idempotency key, tells from the append's result that it was a retry
    that found its turn stored; the delta is then not applied again (it was
    with the turn, and a later write of the same keys must not be undone).
    Such an append never takes the store's one-statement path, so its state
    is written after it (:func:`state_after`), where the replay is known;
    otherwise first (:func:`state_first`).
    """
    if not delta.writes:
        return op

    def write(uow: UnitOfWork) -> object:
        return write_state(uow, conversation_id, delta, user_id)

    if replayed is None:
        return state_first(op, write)
    return state_after(op, write, replayed)
