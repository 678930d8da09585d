"""How a conversation is laid out in a store: namespaces, keys and row codecs.

Every row is a :class:`~firefly_orm.entry.MemoryEntry` with scope
``CONVERSATION``:

* namespace ``conversation:<id>`` (:func:`conversation_namespace`)

  - the *head* (key ``"head"``, id ``derived_entry_id(ns, "head")``), content
    ``{"conversation_id", "next_turn_id", "total_tokens", "turn_count", "summary",
    "total_messages"}`` (heads written by earlier releases have no ``total_messages``).
    Its store-maintained ``version`` is the optimistic-concurrency token.
  - one row per turn (key ``"turn:<turn_id as 12 digits>"``, derived id), content
    = the turn's fields, ``token_estimate`` included (it is never recomputed on
    read) and ``raw_messages`` in portable JSON (:mod:`firefly_orm.conversation._codec`),
    and, when it has raw messages, ``message_tokens``: one estimate per
    message when a window may start inside the turn (a message after its first
    opens a history), else ``[]`` (the turn's estimate belongs to its first
    message: it is cut only at its start, and nothing is lost by not storing
    the split).  Rows written by earlier releases have no ``message_tokens``
    and are cut only at their start.  Unless its first message opens a history
    and it holds no tool call or result, a turn row also has ``window``
    (``opens``, ``calls``, ``results``: what a whole-turn window needs without
    decoding).  A turn's message count is ``len(raw messages)``, or 2 without them.

  A turn row of a live conversation has ``search_text`` (:func:`turn_search_text`:
  the prompt, a newline, the answer), so the store's full-text index finds it
  (:mod:`firefly_orm.conversation._search`); rows written by earlier releases,
  or by a memory with ``text_search=False``, have none and are found by
  meaning only.

* namespace ``conversation-archive:<id>``: evicted turns when ``keep_evicted=True``
  (no ``search_text``: evicted turns are not searched).
* namespace ``conversation-index``: one row per conversation (key = the id).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from firefly_orm._layout import (
    CONVERSATION_NAMESPACE_PREFIX,
    HEAD_CONVERSATION_ID,
    HEAD_KEY,
    HEAD_LAST_TURN_AT,
    HEAD_NEXT_TURN_ID,
    HEAD_SUMMARY,
    HEAD_TAGS,
    HEAD_TOTAL_MESSAGES,
    HEAD_TOTAL_TOKENS,
    HEAD_TURN_COUNT,
    HEAD_UPDATED_AT,
    INDEX_NAMESPACE,
    MAX_TURN_ID,
    TURN_COPY_OF,
    TURN_ID_DIGITS,
    TURN_ID_FIELD,
    TURN_KEY_PREFIX,
    archive_namespace,
    conversation_namespace,
    head_time,
    turn_key,
)
from firefly_orm.conversation._codec import decode_raw_messages
from firefly_orm.conversation._messages import encoded_message_count, inspect_encoded
from firefly_orm.conversation._model import ConversationTurn
from firefly_orm.conversation._plan import HeadState
from firefly_orm.entry import (
    MAX_SEARCH_TEXT_LENGTH,
    MemoryEntry,
    MemoryScope,
    utcnow,
)
from firefly_orm.entry._model import FIELD_NAMES, field_values, keyed_row
from firefly_orm.errors import StoreCorruptedError

__all__ = [
    "HEAD_KEY",
    "INDEX_NAMESPACE",
    "MAX_TURN_ID",
    "TURN_ID_DIGITS",
    "TURN_KEY_PREFIX",
    "archive_namespace",
    "archived_turn_entry",
    "conversation_namespace",
    "conversation_row",
    "copied_from",
    "empty_head_entry",
    "head_entry",
    "head_from_content",
    "head_from_entry",
    "index_entry",
    "stored_message_tokens",
    "stored_raw",
    "turn_entry",
    "turn_from_entry",
    "turn_key",
    "turn_message_count",
    "turn_search_text",
]

# The layout facts (namespaces, keys, digits, the head's field names) live in
# firefly_orm._layout, which the stores read too; they are re-exported here.

# --------------------------------------------------------------------------- head


def head_from_entry(entry: MemoryEntry | None) -> HeadState:
    """The head a stored head row says (no row: a fresh :class:`HeadState`)."""
    if entry is None:
        return HeadState()
    fields = field_values(entry)  # read on every write: not the mapped attributes
    return head_from_content(fields["content"], fields["version"], fields["namespace"])


def head_from_content(content: Any, version: int, namespace: str) -> HeadState:
    """The head a head row of ``namespace`` with this ``content`` and ``version`` says."""
    try:
        summary = content.get(HEAD_SUMMARY)
        messages = content.get(HEAD_TOTAL_MESSAGES)
        return HeadState(
            next_turn_id=int(content[HEAD_NEXT_TURN_ID]),
            total_tokens=int(content[HEAD_TOTAL_TOKENS]),
            turn_count=int(content[HEAD_TURN_COUNT]),
            summary=summary if isinstance(summary, str) else None,
            version=version,
            total_messages=None if messages is None else int(messages),
        )
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise StoreCorruptedError(f"unreadable conversation head in {namespace!r}: {exc}") from exc


def head_entry(
    conversation_id: str,
    previous: MemoryEntry | None,
    *,
    next_turn_id: int,
    total_tokens: int,
    turn_count: int,
    summary: str | None,
    total_messages: int | None = None,
    user_id: str | None = None,
) -> MemoryEntry:
    """The head row to store (a copy of ``previous`` with new content, when there is one).

    A copy keeps ``previous``'s owner; a new head belongs to ``user_id``.
    """
    namespace = conversation_namespace(conversation_id)
    # The listing fields (title, tags, archived, times: conversation/_listing.py)
    # go on with the head; every head write stamps updated_at, a new turn last_turn_at.
    kept = field_values(previous)["content"] if previous is not None else None
    content: dict[str, Any] = dict(kept) if isinstance(kept, Mapping) else {}
    if isinstance(content.get(HEAD_TAGS), list):
        content[HEAD_TAGS] = list(content[HEAD_TAGS])
    now = head_time(utcnow())
    content[HEAD_UPDATED_AT] = now
    if next_turn_id > _stored_next_turn_id(kept):
        content[HEAD_LAST_TURN_AT] = now
    content |= {
        HEAD_CONVERSATION_ID: conversation_id,
        HEAD_NEXT_TURN_ID: next_turn_id,
        HEAD_TOTAL_TOKENS: total_tokens,
        HEAD_TURN_COUNT: turn_count,
        HEAD_SUMMARY: summary,
    }
    if total_messages is not None:
        content[HEAD_TOTAL_MESSAGES] = total_messages
    else:
        content.pop(HEAD_TOTAL_MESSAGES, None)
    if previous is not None:
        return _with_content(previous, content)
    return conversation_row(
        namespace,
        HEAD_KEY,
        content,
        metadata={"conversation_id": conversation_id},
        user_id=user_id,
    )


def _stored_next_turn_id(content: Any) -> int:
    """A stored head content's ``next_turn_id`` (0 when there is none or it is unreadable)."""
    value = content.get(HEAD_NEXT_TURN_ID) if isinstance(content, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def empty_head_entry(conversation_id: str, user_id: str | None = None) -> MemoryEntry:
    """The head row of a new, empty conversation owned by ``user_id``."""
    return head_entry(
        conversation_id,
        None,
        next_turn_id=0,
        total_tokens=0,
        turn_count=0,
        summary=None,
        total_messages=0,
        user_id=user_id,
    )


# --------------------------------------------------------------------------- index and turns


def index_entry(conversation_id: str, user_id: str | None = None) -> MemoryEntry:
    """The index row of a conversation (tagged with its owner, if any)."""
    return conversation_row(
        INDEX_NAMESPACE, conversation_id, {"conversation_id": conversation_id}, user_id=user_id
    )


def turn_entry(
    namespace: str,
    turn: ConversationTurn,
    encoded_raw: dict[str, Any] | None,
    message_tokens: Sequence[int] | None = None,
    user_id: str | None = None,
    copy_of: str | None = None,
    *,
    text_search: bool,
) -> MemoryEntry:
    """The row of ``turn`` in ``namespace``, its raw messages already encoded.

    ``text_search``: give the row its ``search_text`` (:func:`turn_search_text`)
    when ``namespace`` is a live conversation's, so the store's full-text
    index holds it; ``False`` writes it without (the memory's
    ``text_search=False``: text search does not find the turn, and a store
    spends nothing on indexing it).

    ``copy_of``: the conversation the turn was copied from (a branch, a copy),
    kept in the row's metadata (:data:`~firefly_orm._layout.TURN_COPY_OF`) so
    that usage totals count the original turn only.

    ``message_tokens`` (one estimate per raw message, or ``[]``: not split) is
    stored only where a window may start inside the turn, else ``[]``;
    ``None`` writes a row as earlier releases did (an archived copy of such a
    row stays one).
    """
    content: dict[str, Any] = {
        TURN_ID_FIELD: turn.turn_id,
        "user_prompt": turn.user_prompt,
        "assistant_response": turn.assistant_response,
        "raw_messages": encoded_raw,
        "timestamp": turn.timestamp.isoformat(),
        "token_estimate": turn.token_estimate,
        "metadata": turn.metadata,
    }
    if turn.updated_at is not None:
        content["updated_at"] = turn.updated_at.isoformat()
    if message_tokens is not None:
        infos = inspect_encoded(encoded_raw, with_text=False)
        split = any(info.opens for info in infos[1:])
        content["message_tokens"] = list(message_tokens) if split else []
        calls = [c for info in infos for c in info.calls]
        results = [r for info in infos for r in info.results]
        if calls or results or not (infos and infos[0].opens):
            # What a whole-turn window needs, so history reads need not inspect
            # messages; left out in the common case (opens, no tool calls).
            content["window"] = {
                "opens": bool(infos and infos[0].opens),
                "calls": calls,
                "results": results,
            }
    searchable = text_search and namespace.startswith(CONVERSATION_NAMESPACE_PREFIX)
    return conversation_row(
        namespace,
        turn_key(turn.turn_id),
        content,
        metadata=None if copy_of is None else {TURN_COPY_OF: copy_of},
        user_id=user_id,
        search_text=(
            turn_search_text(turn.user_prompt, turn.assistant_response) if searchable else None
        ),
    )


def archived_turn_entry(namespace: str, stored: MemoryEntry, turn: ConversationTurn) -> MemoryEntry:
    """The row ``stored`` (its turn decoded as ``turn``) moved to ``namespace`` (an archive).

    Its raw messages and per-message estimates as stored, its owner, and the source
    of a copied turn (which stays counted once).
    """
    return turn_entry(
        namespace,
        turn,
        stored_raw(stored),
        stored_message_tokens(stored),
        user_id=stored.user_id,
        copy_of=copied_from(stored),
        text_search=False,  # an archive is never searched
    )


def turn_search_text(user_prompt: str, assistant_response: str) -> str | None:
    """What a turn is found by (full-text search and embedding): ``"{prompt}\\n{answer}"``.

    NUL characters become spaces (no store indexes them) and the text is cut to
    :data:`~firefly_orm.entry.MAX_SEARCH_TEXT_LENGTH`; ``None`` for a turn
    without text.
    """
    text = f"{user_prompt}\n{assistant_response}".replace("\x00", " ")
    text = text[:MAX_SEARCH_TEXT_LENGTH].encode("utf-8", "replace").decode("utf-8")
    return text if text.strip() else None


def turn_message_count(content: Mapping[str, Any]) -> int:
    """How many model messages a stored turn's content stands for."""
    count = content.get("message_count")
    if isinstance(count, int) and not isinstance(count, bool) and count > 0:
        return count
    return encoded_message_count(content.get("raw_messages"))


def stored_message_tokens(entry: MemoryEntry) -> list[int] | None:
    """A turn row's stored ``message_tokens`` (``[]``: not split; ``None``: an earlier
    release's row, which has none)."""
    content = entry.content
    tokens = content.get("message_tokens") if isinstance(content, Mapping) else None
    return list(tokens) if isinstance(tokens, list) else None


def turn_from_entry(entry: MemoryEntry, *, with_raw: bool = True) -> ConversationTurn:
    """The turn a row holds (``with_raw=False``: without decoding its raw messages)."""
    content = entry.content
    try:
        return ConversationTurn(
            turn_id=content[TURN_ID_FIELD],
            user_prompt=content["user_prompt"],
            assistant_response=content["assistant_response"],
            raw_messages=decode_raw_messages(content.get("raw_messages")) if with_raw else [],
            timestamp=datetime.fromisoformat(content["timestamp"]),
            token_estimate=content["token_estimate"],
            metadata=content.get("metadata") or {},
            message_count=turn_message_count(content),
            updated_at=_optional_time(content.get("updated_at")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreCorruptedError(
            f"unreadable conversation turn {entry.key!r} in {entry.namespace!r}: {exc}"
        ) from exc


def _optional_time(value: Any) -> datetime | None:
    """A stored ISO time, or ``None`` when the row has none."""
    return None if value is None else datetime.fromisoformat(value)


def stored_raw(entry: MemoryEntry) -> Any:
    """A turn row's raw messages in their stored (encoded) form."""
    content = entry.content
    return content.get("raw_messages") if isinstance(content, Mapping) else None


def copied_from(entry: MemoryEntry) -> str | None:
    """The conversation a turn row was copied from (a branch's, a copy's), kept when the
    row is rewritten or archived (a rewind, a pop, an eviction) so usage totals go on
    counting the original only."""
    metadata = field_values(entry)["metadata_"]
    source = metadata.get(TURN_COPY_OF) if isinstance(metadata, Mapping) else None
    return source if isinstance(source, str) else None


def _with_content(entry: MemoryEntry, content: dict[str, Any]) -> MemoryEntry:
    """A copy of ``entry`` holding ``content`` (and a copy of its metadata).

    ``entry.copy_entry(content=...)`` would first deep-copy the content it
    replaces (a JSON round trip) and read every field through its mapped
    attribute, on every head write.  The other fields are immutable values, and
    the entry's own, so the fast constructor takes them as they are.
    """
    fields = field_values(entry)
    values = {name: fields[name] for name in FIELD_NAMES}
    values["content"] = content
    values["metadata_"] = copy.deepcopy(values["metadata_"])
    return MemoryEntry._from_values(values)


def conversation_row(
    namespace: str,
    key: str,
    content: Any,
    *,
    metadata: dict[str, Any] | None = None,
    user_id: str | None = None,
    search_text: str | None = None,
) -> MemoryEntry:
    """A conversation row: scope ``CONVERSATION``, id derived from namespace and key."""
    return keyed_row(
        namespace,
        MemoryScope.CONVERSATION,
        key,
        content,
        metadata=metadata if metadata is not None else {},
        user_id=user_id,
        search_text=search_text,
    )
