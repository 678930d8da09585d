"""Check a conversation's head against its stored turns, and rebuild it from them.

A conversation's head row (:mod:`firefly_orm.conversation._rows`) caches what
its turns say: how many there are (``turn_count``), the sum of their token
estimates (``total_tokens``), of their messages (``total_messages``, absent
from heads written before it was kept) and the id the next turn gets
(``next_turn_id``, above every turn id stored or archived); it also holds the
conversation id and the summary, and the conversation has a row in the
conversation index.  Its branch links (:mod:`~firefly_orm.conversation._branch`)
are checked too: a parent that exists must have the row naming its branch, and
each such row must name a branch that names it back.  So are the rows of its own
scoped state (:mod:`~firefly_orm.conversation._state`): each must be readable
and tagged with the conversation's owner (``erase_user`` finds a user's rows by
that tag), and state rows left with no conversation at all (a write that raced
a ``clear`` on a store without row locks) are reported, and deleted by repair.
Rewound turns sit in the archive, so ``next_turn_id`` stays above them.
Every write keeps all of this in step within one unit of work.  A store whose
units of work are not atomic (MongoDB on a standalone server, a custom store
with only the five protocol methods) can be left with a stale head by a
crash, and a head written by hand can say anything; a stale ``next_turn_id``
is the dangerous one, since the next turn would overwrite a stored turn.

* :func:`verify_conversation` reports every difference as an :class:`Inconsistency`
  (none when the conversation is consistent).
* :func:`repair_conversation` recomputes the head from the stored turns in one unit of
  work, saved at the version it read (the precondition every writer uses,
  retried on a lost race), adds a missing index row (a rebuilt row belongs to
  the conversation's owner, ``user_id``, as its other rows do), and returns
  what it changed; a consistent conversation is not written at all.

Both read the head the way writers do (``for_update``: locked until the unit
of work ends on the SQL stores), so there a turn being added meanwhile is
never mistaken for an inconsistency; on the staged stores :func:`verify_conversation`
can see a write in progress, and :func:`repair_conversation`'s version
precondition then fails and the retry finds the conversation consistent.
On a store whose units of work are not atomic, run the repair while nobody
writes to the conversation (a turn written ahead of its head looks the same
as a crash's leftover).  What the turns cannot tell is kept: the
summary text (only a summary that is not a string, which readers already
treat as none, is reported and cleared) and a ``next_turn_id`` above the
stored ids (turn ids are never reused).  Turns are never changed: an
unreadable turn raises :class:`~firefly_orm.errors.StoreCorruptedError`.

Like :mod:`firefly_orm.conversation._ops`, this holds transactions (plain sync
functions over a unit of work) and the operations that run them
(:mod:`firefly_orm.bridges._steps`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from firefly_orm._layout import BRANCH_KEY_PREFIX
from firefly_orm.bridges._steps import Operation, Transaction, retrying
from firefly_orm.conversation._branch import LinkCheck, check_links, fix_links
from firefly_orm.conversation._rows import (
    HEAD_KEY,
    INDEX_NAMESPACE,
    TURN_KEY_PREFIX,
    archive_namespace,
    conversation_namespace,
    head_entry,
    index_entry,
    turn_message_count,
)
from firefly_orm.conversation._state import fix_state_rows, misfiled_state_rows
from firefly_orm.entry import MemoryEntry
from firefly_orm.errors import NotFoundError, StoreCorruptedError
from firefly_orm.protocols import UnitOfWork

__all__ = [
    "Examination",
    "Inconsistency",
    "examine",
    "repair_conversation",
    "repair_head",
    "verify_conversation",
]

logger = logging.getLogger("firefly_orm")

#: The head's cached counters, in the order they are checked (a head written
#: before message counts were kept has no ``total_messages``: not an issue).
_COUNTERS = ("turn_count", "total_tokens", "next_turn_id")
_ALL_COUNTERS = (*_COUNTERS, "total_messages")
#: The issues fixed without rewriting the head (its index row, its branch links).
_NOT_THE_HEAD = frozenset({"indexed", "branch_of", "branches", "state"})
_NO_LINK_ISSUES = LinkCheck(None, ())
#: An owner no row has (user ids are non-empty): every state row is listed.
_NOBODY = ""


@dataclass(frozen=True)
class Inconsistency:
    """One way a conversation's bookkeeping disagrees with its stored turns.

    Attributes:
        field: What disagrees: a field of the head (``"turn_count"``,
            ``"total_tokens"``, ``"next_turn_id"``, ``"total_messages"``,
            ``"summary"``, ``"conversation_id"``), ``"head"`` when there is no head row at all
            (``expected`` is then the content it should have), ``"indexed"``
            when the conversation has no row in the conversation index,
            ``"branch_of"`` when its parent (``expected``) has no row naming
            this branch, ``"branches"`` for a row naming a branch
            (``found``) that is gone or names another parent, or ``"state"``
            for a row of the conversation's state (``found``: its key) that is
            not tagged with the owner (``expected``) or is unreadable or left
            without a conversation (``expected`` ``None``: it is deleted).
        found: What is stored (``None`` when the value or the row is missing).
        expected: What the stored turns say it should be.
    """

    field: str
    found: Any
    expected: Any

    def __str__(self) -> str:
        return f"{self.field}: stored {self.found!r}, expected {self.expected!r}"


@dataclass(frozen=True)
class Examination:
    """What :func:`examine` found: the stored head row, the head it should be, the issues.

    ``owner`` is the ``user_id`` of the conversation's rows (for a rebuilt head
    or index row).
    """

    stored_head: MemoryEntry | None
    head: dict[str, Any]
    indexed: bool
    owner: str | None
    issues: tuple[Inconsistency, ...]
    links: LinkCheck = _NO_LINK_ISSUES
    #: State rows to re-tag with ``owner`` (or delete, when unreadable).
    state_rows: tuple[MemoryEntry, ...] = ()
    #: Only state rows are left (no head, turn or index row): they are deleted.
    orphaned: bool = False


# =========================================================================== transactions


def examine(uow: UnitOfWork, conversation_id: str) -> Examination:
    """Transaction: compare the head (and index row) of a conversation with its turns.

    Raises:
        NotFoundError: No such conversation (no head, turn or index row).
        StoreCorruptedError: A turn row is unreadable.
    """
    namespace = conversation_namespace(conversation_id)
    stored = uow.entries.get_by_key(namespace, HEAD_KEY, for_update=True)
    turns = uow.entries.list_contents(namespace, key_prefix=TURN_KEY_PREFIX)
    index_row = uow.entries.get_by_key(INDEX_NAMESPACE, conversation_id)
    if stored is None and not turns and index_row is None:
        return _orphaned_state(uow, conversation_id)
    ids, estimates = _turn_ids_and_estimates(namespace, turns)
    newest_archived = uow.entries.list_contents(
        archive_namespace(conversation_id), key_prefix=TURN_KEY_PREFIX, limit=1, newest_first=True
    )
    ids.extend(_turn_ids_and_estimates(archive_namespace(conversation_id), newest_archived)[0])
    lowest_next_id = max(ids) + 1 if ids else 0

    content: Mapping[str, Any] = {}
    if stored is not None and isinstance(stored.content, Mapping):
        content = stored.content
    stored_next = content.get("next_turn_id")
    summary = content.get("summary")
    head: dict[str, Any] = {
        "turn_count": len(turns),
        "total_tokens": sum(estimates),
        "next_turn_id": max(stored_next, lowest_next_id)
        if _is_int(stored_next)
        else lowest_next_id,
        "total_messages": sum(turn_message_count(turn) for turn in turns),
        "summary": summary if isinstance(summary, str) else None,
    }
    issues: list[Inconsistency] = []
    if stored is None:
        issues.append(Inconsistency("head", None, dict(head)))
    else:
        checked = _COUNTERS if content.get("total_messages") is None else _ALL_COUNTERS
        for name in checked:
            found = content.get(name)
            if not (_is_int(found) and found == head[name]):
                issues.append(Inconsistency(name, found, head[name]))
        if summary is not None and not isinstance(summary, str):
            issues.append(Inconsistency("summary", summary, None))
        if content.get("conversation_id") != conversation_id:
            issues.append(
                Inconsistency("conversation_id", content.get("conversation_id"), conversation_id)
            )
    if index_row is None:
        issues.append(Inconsistency("indexed", False, True))
    links = check_links(uow, conversation_id)
    if links.missing_back is not None:
        issues.append(Inconsistency("branch_of", None, links.missing_back.parent_id))
    issues.extend(
        Inconsistency("branches", row.key.removeprefix(BRANCH_KEY_PREFIX), None)
        for row in links.dangling
        if row.key is not None
    )
    owner = next((row.user_id for row in (stored, index_row) if row is not None), None)
    if owner is None and (stored is None or index_row is None) and turns:
        first = uow.entries.list(namespace, key_prefix=TURN_KEY_PREFIX, limit=1)
        owner = first[0].user_id if first else None
    state_rows = misfiled_state_rows(uow, conversation_id, owner)
    issues.extend(
        Inconsistency("state", row.key, owner if _readable(row) else None) for row in state_rows
    )
    return Examination(
        stored, head, index_row is not None, owner, tuple(issues), links, tuple(state_rows)
    )


def _readable(row: MemoryEntry) -> bool:
    return isinstance(row.content, dict) and "value" in row.content


def _orphaned_state(uow: UnitOfWork, conversation_id: str) -> Examination:
    """The examination of a conversation with no head, turn nor index row: only state
    rows (to delete) can be left.

    Raises:
        NotFoundError: Not even those.
    """
    rows = misfiled_state_rows(uow, conversation_id, owner=_NOBODY)
    if not rows:
        raise NotFoundError(f"no conversation {conversation_id!r} in this store")
    issues = tuple(Inconsistency("state", row.key, None) for row in rows)
    return Examination(None, {}, True, None, issues, state_rows=tuple(rows), orphaned=True)


def repair_head(uow: UnitOfWork, conversation_id: str) -> list[Inconsistency]:
    """Transaction: rewrite the head from the turns (and add the index row) when they differ.

    The head is saved at the version read (``expected_version``; 0 when there
    was none), so a concurrent writer makes this raise
    :class:`~firefly_orm.errors.ConcurrencyError` instead of being overwritten.
    Writes nothing when the conversation is consistent.

    Returns:
        What was changed (empty: nothing).
    """
    found = examine(uow, conversation_id)
    if found.orphaned:
        uow.entries.delete(
            conversation_namespace(conversation_id), [row.entry_id for row in found.state_rows]
        )
        return list(found.issues)
    if any(issue.field not in _NOT_THE_HEAD for issue in found.issues):
        new_head = head_entry(conversation_id, found.stored_head, **found.head, user_id=found.owner)
        expected_version = found.stored_head.version if found.stored_head is not None else 0
        uow.entries.save(
            conversation_namespace(conversation_id), new_head, expected_version=expected_version
        )
    if not found.indexed:
        uow.entries.save(INDEX_NAMESPACE, index_entry(conversation_id, found.owner))
    fix_links(uow, found.links, found.owner)
    fix_state_rows(uow, found.state_rows, found.owner)
    return list(found.issues)


# =========================================================================== operations


def verify_conversation(conversation_id: str) -> Operation[list[Inconsistency]]:
    """The inconsistencies of ``conversation_id`` (empty when it is consistent); writes nothing.

    Reads in a unit of work that is never committed, the head locked as a
    writer would lock it.
    """
    found = yield from Transaction(lambda uow: examine(uow, conversation_id))
    return list(found.issues)


def repair_conversation(conversation_id: str) -> Operation[list[Inconsistency]]:
    """Rebuild the head of ``conversation_id`` from its turns; return what changed.

    One unit of work, retried on a lost race; logs a WARNING naming every
    change when there was one.
    """
    fixed = yield from retrying(Transaction.write(repair_head, conversation_id))
    if fixed:
        logger.warning(
            "conversation %r was inconsistent and has been repaired from its stored turns: %s",
            conversation_id,
            "; ".join(str(issue) for issue in fixed),
        )
    return fixed


# =========================================================================== helpers


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _turn_ids_and_estimates(namespace: str, contents: list[Any]) -> tuple[list[int], list[int]]:
    """The turn ids and token estimates of stored turn contents (unreadable: an error)."""
    ids: list[int] = []
    estimates: list[int] = []
    for content in contents:
        try:
            turn_id, estimate = content["turn_id"], content["token_estimate"]
        except (KeyError, TypeError) as exc:
            raise StoreCorruptedError(f"unreadable turn in {namespace!r}: {exc!r}") from exc
        if not (_is_int(turn_id) and _is_int(estimate)):
            raise StoreCorruptedError(
                f"unreadable turn in {namespace!r}: turn_id {turn_id!r}, "
                f"token_estimate {estimate!r}"
            )
        ids.append(turn_id)
        estimates.append(estimate)
    return ids, estimates
