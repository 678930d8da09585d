"""Rewinding a conversation, popping its newest turn, and purging what a rewind kept.

* :func:`rewind_conversation` drops every retained turn after ``to_turn`` in
  one unit of work: the dropped rows move to the archive namespace
  (``conversation-archive:<id>``, where ``keep_evicted`` puts evicted turns),
  each marked with :data:`~firefly_orm._layout.REWOUND_FIELD`, so they stay
  readable (:func:`read_rewound`) until :func:`purge_rewound_turns` deletes
  them; the head's totals are recomputed from the turns kept.  Turn ids are
  never reused: the next turn gets the id it would have had (so an archived
  turn and a later one never share a key).  A rewind never splits the
  summary: a ``to_turn`` before the last turn the summary covers is refused.
* :func:`pop_newest` removes the newest retained turn (or shortens it, as
  ``keep`` says) in one unit of work and returns it as it was: the one-unit
  form of "read the newest, then delete it" that a session's ``pop_item``
  needs (two units of work there let two pops return the same item).  A
  popped turn is deleted, not archived (a pop is an undo of the last append).

Each reads the head ``for_update`` and writes it back at the version read, as
every writer does, so an append racing a rewind or a pop is either before it
(and rewound or popped) or after it (and kept): retried on the lost race by
:func:`~firefly_orm.bridges._steps.retrying`, never lost nor doubled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

from firefly_orm._layout import REWOUND_FIELD
from firefly_orm.bridges._steps import Operation, Transaction, retrying
from firefly_orm.conversation._append import move_head, save_totals
from firefly_orm.conversation._branch import summary_within
from firefly_orm.conversation._codec import encode_raw_messages
from firefly_orm.conversation._edits import rewrite_turn
from firefly_orm.conversation._messages import Estimator
from firefly_orm.conversation._model import ConversationTurn
from firefly_orm.conversation._rows import (
    HEAD_KEY,
    TURN_KEY_PREFIX,
    archive_namespace,
    archived_turn_entry,
    conversation_namespace,
    copied_from,
    head_from_entry,
    turn_from_entry,
)
from firefly_orm.entry import utcnow
from firefly_orm.errors import ConversationNotFoundError, EntryValidationError
from firefly_orm.protocols import UnitOfWork

__all__ = [
    "KeepPart",
    "copied_from",
    "pop_newest",
    "pop_turn",
    "purge_rewound",
    "purge_rewound_turns",
    "read_rewound",
    "rewind",
    "rewind_conversation",
]

#: What a pop leaves of the newest turn: ``keep(turn)`` returns the
#: ``(user_prompt, assistant_response, raw_messages)`` it keeps, or ``None`` to
#: remove it whole.  Called inside the unit of work (maybe again on a retry):
#: a pure function of the turn.
KeepPart: TypeAlias = Callable[[ConversationTurn], tuple[str, str, Sequence[Any]] | None]


# =========================================================================== operations


def rewind(conversation_id: str, to_turn: int) -> Operation[list[int]]:
    """Rewind ``conversation_id`` to ``to_turn``; the ids of the turns dropped."""
    return (yield from retrying(Transaction.write(rewind_conversation, conversation_id, to_turn)))


def pop_turn(
    conversation_id: str, keep: KeepPart | None, estimator: Estimator, *, text_search: bool
) -> Operation[ConversationTurn | None]:
    """Pop the newest turn of ``conversation_id`` (see :func:`pop_newest`)."""
    return (
        yield from retrying(
            Transaction.write(pop_newest, conversation_id, keep, estimator, text_search=text_search)
        )
    )


def purge_rewound(conversation_id: str) -> Operation[int]:
    """Delete the turns rewinds of ``conversation_id`` kept; how many."""
    return (yield from Transaction.write(purge_rewound_turns, conversation_id))


# =========================================================================== transactions


def rewind_conversation(uow: UnitOfWork, conversation_id: str, to_turn: int) -> list[int]:
    """Transaction: move the retained turns after ``to_turn`` to the archive, marked as
    rewound, and recompute the head from the turns kept; return the dropped ids.

    Raises:
        ConversationNotFoundError: No such conversation.
        EntryValidationError: ``to_turn`` is before the last turn the summary covers.
    """
    namespace = conversation_namespace(conversation_id)
    stored_head = uow.entries.get_by_key(namespace, HEAD_KEY, for_update=True)
    if stored_head is None:
        raise ConversationNotFoundError(conversation_id)
    head = head_from_entry(stored_head)
    rows = uow.entries.list(namespace, key_prefix=TURN_KEY_PREFIX)
    turns = [(row, turn_from_entry(row, with_raw=False)) for row in rows]
    dropped = [(row, turn) for row, turn in turns if turn.turn_id > to_turn]
    if not dropped:
        return []
    if head.summary is not None and not summary_within(
        [turn.turn_id for _row, turn in turns], to_turn
    ):
        raise EntryValidationError(
            "to_turn",
            f"is before turns the summary of conversation {conversation_id!r} covers "
            "(a rewind does not split a summary; branch from an earlier turn instead)",
        )
    archive = archive_namespace(conversation_id)
    moment = utcnow().isoformat()
    for row, turn in dropped:
        archived = archived_turn_entry(archive, row, turn)
        archived.content = {**archived.content, REWOUND_FIELD: moment}
        uow.entries.save(archive, archived)
    uow.entries.delete(namespace, [row.entry_id for row, _turn in dropped])
    kept = [turn for _row, turn in turns if turn.turn_id <= to_turn]
    save_totals(
        uow,
        conversation_id,
        stored_head,
        head,
        total_tokens=sum(turn.token_estimate for turn in kept),
        turn_count=len(kept),
        total_messages=sum(turn.message_count for turn in kept),
    )
    return [turn.turn_id for _row, turn in dropped]


def pop_newest(
    uow: UnitOfWork,
    conversation_id: str,
    keep: KeepPart | None,
    estimator: Estimator,
    *,
    text_search: bool,
) -> ConversationTurn | None:
    """Transaction: remove the newest retained turn (or keep what ``keep`` says of it),
    moving the head's totals by the difference; return the turn as it was.

    A kept part is written with its ``search_text`` when ``text_search``.

    ``None`` (nothing written) when the conversation has no retained turn.
    """
    namespace = conversation_namespace(conversation_id)
    stored_head = uow.entries.get_by_key(namespace, HEAD_KEY, for_update=True)
    if stored_head is None:
        return None
    newest = uow.entries.list(namespace, key_prefix=TURN_KEY_PREFIX, limit=1, newest_first=True)
    if not newest:
        return None
    row = newest[0]
    turn = turn_from_entry(row)
    remainder = keep(turn) if keep is not None else None
    old = turn.model_copy(update={"raw_messages": []})
    if remainder is None:
        uow.entries.delete(namespace, row.entry_id)
        tokens, messages, turns = -old.token_estimate, -old.message_count, -1
    else:
        prompt, answer, raw = remainder
        encoded = encode_raw_messages(raw)
        new = rewrite_turn(
            uow, namespace, row, old, estimator, prompt, answer, encoded, text_search=text_search
        )
        tokens = new.token_estimate - old.token_estimate
        messages, turns = new.message_count - old.message_count, 0
    move_head(uow, conversation_id, stored_head, tokens=tokens, messages=messages, turns=turns)
    return turn


def read_rewound(uow: UnitOfWork, conversation_id: str) -> list[ConversationTurn]:
    """Transaction (read): the turns rewinds dropped and kept, oldest first."""
    rows = uow.entries.list(archive_namespace(conversation_id), key_prefix=TURN_KEY_PREFIX)
    return [turn_from_entry(row) for row in rows if _rewound(row.content)]


def purge_rewound_turns(uow: UnitOfWork, conversation_id: str) -> int:
    """Transaction: delete the archived turns rewinds kept (evicted turns stay); how many."""
    archive = archive_namespace(conversation_id)
    rows = uow.entries.list(archive, key_prefix=TURN_KEY_PREFIX)
    ids = [row.entry_id for row in rows if _rewound(row.content)]
    if ids:
        uow.entries.delete(archive, ids)
    return len(ids)


def _rewound(content: Any) -> bool:
    return isinstance(content, Mapping) and content.get(REWOUND_FIELD) is not None
