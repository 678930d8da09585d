"""Editing and deleting one turn, keeping the head's totals exact.

Each edit is one unit of work that re-reads the head (``for_update``) and
writes it back at the version read, like :func:`~firefly_orm.conversation._ops.append_turn`,
so an edit and a concurrent ``add_turn`` never lose each other's change: the
loser of the race is retried (:func:`~firefly_orm.bridges._steps.retrying`).
A turn found in the archive (``keep_evicted``) is edited or deleted there; the
head's totals count only retained turns, so they do not change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from firefly_orm.bridges._steps import Operation, Transaction, retrying
from firefly_orm.conversation._append import move_head
from firefly_orm.conversation._codec import decode_raw_messages
from firefly_orm.conversation._messages import Estimator, estimate_turn
from firefly_orm.conversation._model import ConversationTurn
from firefly_orm.conversation._rows import (
    HEAD_KEY,
    archive_namespace,
    conversation_namespace,
    copied_from,
    stored_raw,
    turn_entry,
    turn_from_entry,
    turn_key,
    turn_message_count,
    turn_search_text,
)
from firefly_orm.conversation._search import save_turn_vector
from firefly_orm.entry import MemoryEntry, utcnow
from firefly_orm.errors import NotFoundError
from firefly_orm.protocols import UnitOfWork
from firefly_orm.vector._spec import ModelVector

__all__ = ["KEEP", "TurnEdit", "delete_turn", "erase_user_entries", "update_turn"]

#: ``TurnEdit.raw`` when the raw messages are left as they are.
KEEP = object()


@dataclass(frozen=True)
class TurnEdit:
    """What :func:`update_turn` changes (``None`` / :data:`KEEP`: left as it is).

    ``raw`` is the new raw messages already in portable form (``None``: none).
    ``vector``: the vector of the edited turn's text ``vector_text``, made before
    the unit of work (stored when the turn is live and its text is that one).
    ``text_search``: the rewritten row carries its ``search_text`` (the editing
    memory's ``text_search``).
    """

    user_prompt: str | None = None
    assistant_response: str | None = None
    raw: Any = KEEP
    metadata: dict[str, Any] | None = None
    vector_text: str | None = None
    vector: ModelVector | None = None
    text_search: bool = field(kw_only=True)


def update_turn(
    conversation_id: str, turn_id: int, edit: TurnEdit, estimator: Estimator
) -> Operation[ConversationTurn]:
    """Change a turn's text, raw messages or metadata; its token estimate is redone."""
    return (
        yield from retrying(Transaction.write(edit_turn, conversation_id, turn_id, edit, estimator))
    )


def delete_turn(conversation_id: str, turn_id: int) -> Operation[bool]:
    """Delete a turn (retained or archived); ``False`` when there is no such turn."""
    return (yield from retrying(Transaction.write(remove_turn, conversation_id, turn_id)))


# --------------------------------------------------------------------------- transactions


def _find(uow: UnitOfWork, conversation_id: str, turn_id: int) -> tuple[str, MemoryEntry] | None:
    """The namespace and row of a turn: retained first, then archived."""
    for namespace in (conversation_namespace(conversation_id), archive_namespace(conversation_id)):
        row = uow.entries.get_by_key(namespace, turn_key(turn_id))
        if row is not None:
            return namespace, row
    return None


def edit_turn(
    uow: UnitOfWork, conversation_id: str, turn_id: int, edit: TurnEdit, estimator: Estimator
) -> ConversationTurn:
    """Rewrite one turn's row and move the head's totals by the difference."""
    live = conversation_namespace(conversation_id)
    stored_head = uow.entries.get_by_key(live, HEAD_KEY, for_update=True)
    found = _find(uow, conversation_id, turn_id)
    if found is None:
        raise NotFoundError(f"conversation {conversation_id!r} has no turn {turn_id}")
    namespace, row = found
    old = turn_from_entry(row, with_raw=False)
    encoded = stored_raw(row) if edit.raw is KEEP else edit.raw
    prompt = old.user_prompt if edit.user_prompt is None else edit.user_prompt
    answer = old.assistant_response if edit.assistant_response is None else edit.assistant_response
    new = rewrite_turn(
        uow,
        namespace,
        row,
        old,
        estimator,
        prompt,
        answer,
        encoded,
        metadata=edit.metadata,
        text_search=edit.text_search,
    )
    text = turn_search_text(new.user_prompt, new.assistant_response)
    if edit.vector is not None and namespace == live and text == edit.vector_text:
        save_turn_vector(uow, conversation_id, turn_id, edit.vector)
    if namespace == live and stored_head is not None:
        move_head(
            uow,
            conversation_id,
            stored_head,
            tokens=new.token_estimate - old.token_estimate,
            messages=new.message_count - old.message_count,
            turns=0,
        )
    return new.model_copy(update={"raw_messages": decode_raw_messages(encoded)})


def rewrite_turn(
    uow: UnitOfWork,
    namespace: str,
    row: MemoryEntry,
    old: ConversationTurn,
    estimator: Estimator,
    prompt: str,
    answer: str,
    encoded: Any,
    *,
    metadata: dict[str, Any] | None = None,
    text_search: bool,
) -> ConversationTurn:
    """Save ``row``'s turn ``old`` again with this text and these raw messages (portable
    form; ``metadata=None`` keeps the turn's), its token estimate redone: the new turn
    (without raw messages).  An edited copy stays counted in its source only; the row
    has ``search_text`` when ``text_search`` (and the turn is live).
    """
    tokens, per_message = estimate_turn(estimator, prompt, answer, encoded)
    new = old.model_copy(
        update={
            "user_prompt": prompt,
            "assistant_response": answer,
            "metadata": old.metadata if metadata is None else metadata,
            "token_estimate": tokens,
            "message_count": turn_message_count({"raw_messages": encoded}),
            "updated_at": utcnow(),
        }
    )
    saved = turn_entry(
        namespace,
        new,
        encoded,
        per_message,
        user_id=row.user_id,
        copy_of=copied_from(row),
        text_search=text_search,
    )
    uow.entries.save(namespace, saved)
    return new


def remove_turn(uow: UnitOfWork, conversation_id: str, turn_id: int) -> bool:
    """Delete one turn's row; a retained turn leaves the head's totals."""
    live = conversation_namespace(conversation_id)
    stored_head = uow.entries.get_by_key(live, HEAD_KEY, for_update=True)
    found = _find(uow, conversation_id, turn_id)
    if found is None:
        return False
    namespace, row = found
    old = turn_from_entry(row, with_raw=False)
    uow.entries.delete(namespace, row.entry_id)
    if namespace == live and stored_head is not None:
        move_head(
            uow,
            conversation_id,
            stored_head,
            tokens=-old.token_estimate,
            messages=-old.message_count,
            turns=-1,
        )
    return True


def erase_user_entries(uow: UnitOfWork, user_id: str) -> None:
    """Remove every row of ``user_id``, in every namespace."""
    uow.entries.erase_user(user_id)
