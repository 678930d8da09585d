"""Branching a conversation at a turn, and the tree of branches.

:func:`branch_conversation` makes a NEW conversation holding the source's
retained turns up to and including ``at_turn``, in one unit of work:

* the turns are **copied** (same ids, texts, raw messages, metadata, times,
  stored token and message counts), not shared.  Sharing rows between two
  namespaces is not something every store can do (a row belongs to one
  namespace on every backend, and the file and Redis stores keep a namespace
  together), so a copy keeps every store alike, and keeps a branch
  independent: an edit, eviction, rewind or erase of either side never reaches
  the other.  The cost is the copied rows, written once when the branch is
  made;
* the branch has its own head: its totals are recomputed from the copied
  turns, its next turn id is ``at_turn + 1``, and it keeps the source's
  summary only when that summary covers no turn after ``at_turn``
  (:func:`summary_within`); else it has none;
* it belongs to the source's owner;
* two link rows record the tree (:data:`~firefly_orm._layout.BRANCH_PARENT_KEY`
  in the branch's namespace, :func:`~firefly_orm._layout.branch_key` in the
  source's), so :func:`read_parent` and :func:`read_branches` are one keyed
  read each.  They live in the conversations' own namespaces and carry the
  owner's ``user_id``, so clearing a conversation and erasing a user remove
  them with the rest (:func:`unlink` removes the other side's row on clear).

Safe against concurrent appends: the source's head is read ``for_update``
(locked on PostgreSQL) and written back unchanged at the version read, the
precondition every writer of the conversation uses, so a turn appended,
evicted or rewound while the branch was read makes one of the two writers
retry (:func:`~firefly_orm.bridges._steps.retrying`) instead of a branch built
from a half-changed conversation.

Editing an earlier user message (a chat UI's "edit and resend") is
``branch(cid, turn_id - 1)`` then ``add_turn`` on the branch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from firefly_orm._layout import BRANCH_KEY_PREFIX, BRANCH_PARENT_KEY, branch_key
from firefly_orm.bridges._steps import Operation, Transaction, retrying
from firefly_orm.conversation._append import save_head
from firefly_orm.conversation._owner import owner_row
from firefly_orm.conversation._plan import HeadState
from firefly_orm.conversation._rows import (
    HEAD_KEY,
    TURN_KEY_PREFIX,
    conversation_namespace,
    conversation_row,
    head_from_entry,
    stored_message_tokens,
    stored_raw,
    turn_entry,
    turn_from_entry,
)
from firefly_orm.entry import MemoryEntry, derived_entry_id, utcnow
from firefly_orm.errors import (
    ConversationNotFoundError,
    EntryValidationError,
    NotFoundError,
    StoreCorruptedError,
)
from firefly_orm.protocols import UnitOfWork

__all__ = [
    "BranchLink",
    "branch",
    "branch_conversation",
    "LinkCheck",
    "check_links",
    "detach",
    "fix_links",
    "link_rows",
    "parent_link_entry",
    "read_branches",
    "read_parent",
    "summary_within",
    "touch_head",
    "unlink",
]


@dataclass(frozen=True)
class BranchLink:
    """One edge of the branch tree: ``conversation_id`` was branched from ``parent_id``.

    Attributes:
        conversation_id: The branch.
        parent_id: The conversation it was branched from (it may have been
            cleared since: :meth:`~firefly_orm.ConversationMemory.exists` tells).
        at_turn: The source's turn the branch ends with (its turns are the
            source's up to and including this one, then its own).
        created_at: When the branch was made (UTC).
    """

    conversation_id: str
    parent_id: str
    at_turn: int
    created_at: datetime


# =========================================================================== operations


def branch(source: str, target: str, at_turn: int, *, text_search: bool) -> Operation[BranchLink]:
    """Branch ``source`` at ``at_turn`` into the new conversation ``target`` (one unit of
    work, retried on a lost race); the copied rows carry ``search_text`` when ``text_search``."""
    return (
        yield from retrying(
            Transaction.write(branch_conversation, source, target, at_turn, text_search=text_search)
        )
    )


# =========================================================================== transactions


def branch_conversation(
    uow: UnitOfWork, source: str, target: str, at_turn: int, *, text_search: bool
) -> BranchLink:
    """Transaction: make ``target`` a branch of ``source`` at ``at_turn`` (see the module).

    Raises:
        ConversationNotFoundError: ``source`` does not exist.
        NotFoundError: ``at_turn`` is not a retained turn of ``source``.
        EntryValidationError: ``target`` names an existing conversation.
        ConcurrencyError: ``source`` changed meanwhile (retried by :func:`branch`).
    """
    namespace = conversation_namespace(source)
    stored_head = uow.entries.get_by_key(namespace, HEAD_KEY, for_update=True)
    if stored_head is None:
        raise ConversationNotFoundError(source)
    if owner_row(uow, target) is not None:
        raise EntryValidationError("new_conversation_id", "names an existing conversation")
    head = head_from_entry(stored_head)
    rows = uow.entries.list(namespace, key_prefix=TURN_KEY_PREFIX)
    turns = [(row, turn_from_entry(row, with_raw=False)) for row in rows]
    ids = [turn.turn_id for _row, turn in turns]
    if at_turn not in ids:
        raise NotFoundError(f"conversation {source!r} has no retained turn {at_turn}")
    kept = [(row, turn) for row, turn in turns if turn.turn_id <= at_turn]
    owner = stored_head.user_id
    target_namespace = conversation_namespace(target)
    for row, turn in kept:
        uow.entries.save(
            target_namespace,
            turn_entry(
                target_namespace,
                turn,
                stored_raw(row),
                stored_message_tokens(row),
                owner,
                copy_of=source,
                text_search=text_search,
            ),
        )
    save_head(
        uow,
        target,
        None,
        HeadState(),
        next_turn_id=at_turn + 1,
        total_tokens=sum(turn.token_estimate for _row, turn in kept),
        turn_count=len(kept),
        summary=head.summary if summary_within(ids, at_turn) else None,
        total_messages=sum(turn.message_count for _row, turn in kept),
        user_id=owner,
    )
    link = BranchLink(target, source, at_turn, utcnow())
    for row in link_rows(link, owner):
        uow.entries.save(row.namespace, row)
    touch_head(uow, stored_head, head)
    return link


def read_parent(uow: UnitOfWork, conversation_id: str) -> BranchLink | None:
    """Transaction (read): the link of ``conversation_id`` to its parent, or ``None``."""
    row = uow.entries.get_by_key(conversation_namespace(conversation_id), BRANCH_PARENT_KEY)
    return None if row is None else _link(row, conversation_id, None)


def read_branches(uow: UnitOfWork, conversation_id: str) -> list[BranchLink]:
    """Transaction (read): the branches made from ``conversation_id``, oldest first."""
    rows = uow.entries.list(conversation_namespace(conversation_id), key_prefix=BRANCH_KEY_PREFIX)
    links = [_link(row, None, conversation_id) for row in rows]
    return sorted(links, key=lambda link: (link.created_at, link.conversation_id))


def unlink(uow: UnitOfWork, conversation_id: str) -> None:
    """Remove the parent's row naming ``conversation_id`` (called before it is cleared).

    Its own rows (the parent link, the rows naming its branches) go with its
    namespace; its branches keep their parent link (a branch outlives its
    parent, and still says where it came from).
    """
    parent = read_parent(uow, conversation_id)
    if parent is not None:
        parent_namespace = conversation_namespace(parent.parent_id)
        uow.entries.delete(
            parent_namespace, derived_entry_id(parent_namespace, branch_key(conversation_id))
        )


@dataclass(frozen=True)
class LinkCheck:
    """What :func:`check_links` found wrong with a conversation's branch links.

    Attributes:
        missing_back: The conversation's own parent link, when its parent
            exists but has no row naming it (a crash between the two writes
            of a store whose units of work are not atomic).
        dangling: The rows of the conversation naming branches that are gone
            or that do not name it as their parent.
    """

    missing_back: BranchLink | None
    dangling: tuple[MemoryEntry, ...]


def check_links(uow: UnitOfWork, conversation_id: str) -> LinkCheck:
    """Transaction (read): the branch links of ``conversation_id`` that disagree."""
    missing_back = None
    parent = read_parent(uow, conversation_id)
    if parent is not None:
        parent_namespace = conversation_namespace(parent.parent_id)
        if uow.entries.get_by_key(parent_namespace, HEAD_KEY) is not None and (
            uow.entries.get_by_key(parent_namespace, branch_key(conversation_id)) is None
        ):
            missing_back = parent
    rows = uow.entries.list(conversation_namespace(conversation_id), key_prefix=BRANCH_KEY_PREFIX)
    dangling = []
    for row in rows:
        child = _link(row, None, conversation_id).conversation_id
        back = read_parent(uow, child)
        if back is None or back.parent_id != conversation_id:
            dangling.append(row)
    return LinkCheck(missing_back, tuple(dangling))


def fix_links(uow: UnitOfWork, found: LinkCheck, owner: str | None) -> None:
    """Transaction: add the missing row in the parent, delete the dangling ones."""
    if found.missing_back is not None:
        uow.entries.save(*_namespaced(link_rows(found.missing_back, owner)[1]))
    for row in found.dangling:
        uow.entries.delete(row.namespace, row.entry_id)


def _namespaced(row: MemoryEntry) -> tuple[str, MemoryEntry]:
    return row.namespace, row


def detach(uow: UnitOfWork, conversation_id: str) -> None:
    """Make ``conversation_id`` a branch of nothing (its turns are being replaced, by an
    import or a copy into it): its parent link and its parent's row naming it go."""
    unlink(uow, conversation_id)
    namespace = conversation_namespace(conversation_id)
    uow.entries.delete(namespace, derived_entry_id(namespace, BRANCH_PARENT_KEY))


# =========================================================================== rows and rules


def link_rows(link: BranchLink, owner: str | None) -> tuple[MemoryEntry, MemoryEntry]:
    """The two rows of ``link``: the branch's parent link, and the parent's row naming it."""
    parent_namespace = conversation_namespace(link.parent_id)
    return (
        parent_link_entry(link, owner),
        conversation_row(
            parent_namespace,
            branch_key(link.conversation_id),
            {
                "conversation_id": link.conversation_id,
                "at_turn": link.at_turn,
                "created_at": link.created_at.isoformat(),
            },
            user_id=owner,
        ),
    )


def parent_link_entry(link: BranchLink, owner: str | None) -> MemoryEntry:
    """The row, in the branch's namespace, naming its parent."""
    return conversation_row(
        conversation_namespace(link.conversation_id),
        BRANCH_PARENT_KEY,
        {
            "parent_id": link.parent_id,
            "at_turn": link.at_turn,
            "created_at": link.created_at.isoformat(),
        },
        user_id=owner,
    )


def summary_within(retained_ids: Sequence[int], turn_id: int) -> bool:
    """Whether a conversation's summary covers no turn after ``turn_id``.

    A summary covers evicted turns, and evicted turns are the gap before the
    oldest retained unpinned turn, so the first gap in the (sorted) retained
    ids is what it may cover: the summary is within ``turn_id`` when that gap
    ends at or before it (or there is no gap: a summary given by an import,
    older than turn 0).  When in doubt (a gap left by a deleted or rewound turn
    comes first) the answer is ``False``: a branch then has no summary rather
    than one telling of turns it does not hold.
    """
    for position, stored_id in enumerate(sorted(retained_ids)):
        if stored_id != position:
            return stored_id - 1 <= turn_id
    return True


def touch_head(uow: UnitOfWork, stored_head: MemoryEntry, head: HeadState) -> None:
    """Write ``stored_head`` back unchanged at the version read: the optimistic
    concurrency check of a unit of work that read the conversation without changing
    its head (a writer that changed it meanwhile makes this raise
    :class:`~firefly_orm.errors.ConcurrencyError`)."""
    uow.entries.save(stored_head.namespace, stored_head.copy_entry(), expected_version=head.version)


def _link(row: MemoryEntry, child: str | None, parent: str | None) -> BranchLink:
    """The link a row says: the branch's own row (``child`` given) or its parent's."""
    content: Any = row.content
    try:
        if not isinstance(content, Mapping):
            raise TypeError("content is not an object")
        at_turn = content["at_turn"]
        if not isinstance(at_turn, int) or isinstance(at_turn, bool):
            raise TypeError(f"at_turn {at_turn!r}")
        conversation_id = child if child is not None else content["conversation_id"]
        parent_id = parent if parent is not None else content["parent_id"]
        if not (isinstance(conversation_id, str) and isinstance(parent_id, str)):
            raise TypeError("conversation ids must be strings")
        created = datetime.fromisoformat(content["created_at"])
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreCorruptedError(
            f"unreadable branch link {row.key!r} in {row.namespace!r}: {exc}"
        ) from exc
    return BranchLink(conversation_id, parent_id, at_turn, created)
