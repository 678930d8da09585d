"""Exactly-once appends: ``add_turn(..., idempotency_key=)`` (no I/O here but row reads).

A writer whose connection drops after it sent COMMIT cannot know whether its
turn was stored; retrying blindly could store it twice.  With an idempotency
key, :func:`~firefly_orm.conversation._ops.append_turn` writes a *marker* row
beside the turn, in the same unit of work: key ``idempotency:<key>`` in the
conversation's namespace (its id derived from the namespace and that key, so
two writers of one key collide on the primary key), holding the turn's id, its
fields and a fingerprint of what was added.  A retry with the same key finds
the marker and returns the stored turn instead of adding one; the same key with
a different prompt, answer or raw messages is refused.

Markers expire :data:`IDEMPOTENCY_WINDOW` after the write (reads never return
expired rows, ``cleanup_expired`` removes them); they go with the conversation
(``clear``) and with its owner (``erase_user``).
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any

from firefly_orm.conversation._model import ConversationTurn
from firefly_orm.conversation._rows import turn_from_entry, turn_key
from firefly_orm.entry import (
    MemoryEntry,
    MemoryScope,
    derived_entry_id,
    utcnow,
    validate_key,
)
from firefly_orm.errors import EntryValidationError
from firefly_orm.protocols import UnitOfWork

__all__ = [
    "IDEMPOTENCY_KEY_PREFIX",
    "IDEMPOTENCY_WINDOW",
    "MAX_IDEMPOTENCY_KEY_LENGTH",
    "check_idempotency_key",
    "fingerprint",
    "marker_entry",
    "replayed_turn",
]

#: The key prefix of marker rows (never a turn's ``turn:`` nor the ``head``).
IDEMPOTENCY_KEY_PREFIX = "idempotency:"
#: How long a retry with the same key returns the stored turn.
IDEMPOTENCY_WINDOW = timedelta(days=1)
#: The longest idempotency key accepted, in characters.
MAX_IDEMPOTENCY_KEY_LENGTH = 200


def check_idempotency_key(key: Any) -> str | None:
    """``key`` if it is ``None`` or a usable idempotency key (a non-empty string)."""
    if key is None:
        return None
    if not isinstance(key, str) or not key:
        raise EntryValidationError("idempotency_key", "must be a non-empty string or None")
    if len(key) > MAX_IDEMPOTENCY_KEY_LENGTH:
        raise EntryValidationError(
            "idempotency_key", f"must be at most {MAX_IDEMPOTENCY_KEY_LENGTH} characters"
        )
    try:
        validate_key(key)
    except EntryValidationError as exc:
        message = str(exc).removeprefix(f"{exc.field}: ")
        raise EntryValidationError("idempotency_key", message) from None
    return key


def fingerprint(prompt: str, response: str, encoded_raw: dict[str, Any] | None) -> str:
    """What identifies the turn a key was used for: sha256 of prompt, answer and raw messages."""
    payload = json.dumps([prompt, response, encoded_raw], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


def _marker_id(namespace: str, key: str) -> str:
    return derived_entry_id(namespace, f"{IDEMPOTENCY_KEY_PREFIX}{key}")


def marker_entry(
    namespace: str, key: str, turn: ConversationTurn, print_: str, user_id: str | None
) -> MemoryEntry:
    """The marker row of ``turn``, added under ``key`` (expires after the window)."""
    now = utcnow()
    return MemoryEntry.from_dict(
        dict(
            entry_id=_marker_id(namespace, key),
            namespace=namespace,
            scope=MemoryScope.CONVERSATION,
            key=f"{IDEMPOTENCY_KEY_PREFIX}{key}",
            content={
                "turn_id": turn.turn_id,
                "fingerprint": print_,
                "user_prompt": turn.user_prompt,
                "assistant_response": turn.assistant_response,
                "timestamp": turn.timestamp.isoformat(),
                "token_estimate": turn.token_estimate,
                "metadata": turn.metadata,
                "message_count": turn.message_count,
            },
            created_at=now,
            expires_at=now + IDEMPOTENCY_WINDOW,
            user_id=user_id,
        )
    )


def replayed_turn(
    uow: UnitOfWork, namespace: str, key: str, print_: str
) -> ConversationTurn | None:
    """The turn already added under ``key``, or ``None`` (then it is added now).

    The stored turn when it is still retained, else the marker's copy of it
    (without raw messages: the turn was evicted since).

    Raises:
        EntryValidationError: ``key`` was used for a different turn.
    """
    marker = uow.entries.get(namespace, _marker_id(namespace, key))
    if marker is None or not isinstance(marker.content, dict):
        return None
    content = marker.content
    if content.get("fingerprint") != print_:
        raise EntryValidationError(
            "idempotency_key", f"{key!r} was already used for a different turn"
        )
    stored = uow.entries.get_by_key(namespace, turn_key(int(content["turn_id"])))
    if stored is not None:
        return turn_from_entry(stored)
    return ConversationTurn(
        turn_id=content["turn_id"],
        user_prompt=content["user_prompt"],
        assistant_response=content["assistant_response"],
        timestamp=content["timestamp"],
        token_estimate=content["token_estimate"],
        metadata=content.get("metadata") or {},
        message_count=content.get("message_count") or 0,
    )
