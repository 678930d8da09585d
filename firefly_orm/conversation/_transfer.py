"""Export and import of a conversation as a JSON-ready dict.

Shape: ``{"conversation_id", "turns": [{"turn_id", "user_prompt",
"assistant_response", "token_estimate", "metadata", "timestamp"
[, "raw_messages"]}, ...], "summary", "total_tokens"[, "branch_of"]
[, "title"][, "tags"][, "archived"][, "state"]}``;
``raw_messages`` holds the portable JSON form of
:mod:`firefly_orm.conversation._codec`.  A branch's export names its parent
(``"branch_of": {"conversation_id", "at_turn", "created_at"}``); an import
makes a standalone conversation (the parent's id means nothing in another
store), so the link is not restored.  ``title``, ``tags`` and ``archived``
(the head's listing fields) are written only when set (a title, a tag, archived),
so an export of a conversation without them reads as before; an import restores
those it carries and keeps the conversation's own for those it lacks (as it does
the summary).  ``state`` is the conversation's own scoped state
(:mod:`~firefly_orm.conversation._state`; its ``app:`` and ``user:`` keys
belong to the store and the user, not to one conversation), written only
when it has keys; an import that carries it replaces the conversation's own
state with it, one that does not keeps it.  Like the archive of evicted turns, the
turns a rewind dropped are not exported, and an import replaces them too.

An import that writes at least :data:`ANALYZE_AFTER_ROWS` turns asks the
store to refresh its planner statistics once the import is committed
(:func:`refresh_statistics`, for stores with the optional
:class:`~firefly_orm.protocols.StoreMaintenance` capability: the SQL stores).
"""

from __future__ import annotations

import itertools
import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeAlias

from firefly_orm._layout import TURN_COPY_OF
from firefly_orm._maintenance import ANALYZE_AFTER_ROWS, refresh_statistics
from firefly_orm.bridges._steps import Operation, Transaction, retrying
from firefly_orm.conversation._append import save_head
from firefly_orm.conversation._branch import read_parent
from firefly_orm.conversation._codec import check_encoded, encode_raw_messages
from firefly_orm.conversation._listing import (
    MetadataChange,
    change_metadata,
    check_tags,
    check_title,
    read_info,
)
from firefly_orm.conversation._model import (
    ConversationTurn,
    check_conversation_id,
    check_metadata,
    check_text,
)
from firefly_orm.conversation._ops import EncodedTurn, replace_conversation
from firefly_orm.conversation._owner import claim, owner_row
from firefly_orm.conversation._rows import (
    HEAD_KEY,
    MAX_TURN_ID,
    TURN_KEY_PREFIX,
    archive_namespace,
    conversation_namespace,
    head_from_entry,
    stored_raw,
    turn_entry,
    turn_from_entry,
)
from firefly_orm.conversation._state import (
    check_state_delta,
    conversation_state,
    replace_conversation_state,
)
from firefly_orm.entry import utcnow
from firefly_orm.errors import ConcurrencyError, ConversationNotFoundError, EntryValidationError
from firefly_orm.protocols import UnitOfWork

__all__ = [
    "ANALYZE_AFTER_ROWS",
    "IMPORT_BATCH_TURNS",
    "ParsedImport",
    "append_imported",
    "copy_conversation",
    "import_conversations",
    "import_in_batches",
    "imported_batches",
    "parse_import",
    "parse_imports",
    "read_export",
    "refresh_statistics",
    "replace_conversations",
]

logger = logging.getLogger("firefly_orm")

#: The most turns one unit of work of an import writes: a single conversation
#: with more is imported batch by batch (:func:`import_in_batches`).
IMPORT_BATCH_TURNS = 500

#: One validated conversation to import: its id, its turns, its summary, its
#: listing fields (title, tags, archived; ``None``: the import carries none) and
#: its own state (``None``: the import carries none).
ParsedImport: TypeAlias = tuple[
    str, list[EncodedTurn], str | None, MetadataChange | None, dict[str, Any] | None
]


def read_export(uow: UnitOfWork, conversation_id: str) -> dict[str, Any]:
    """Transaction: the export dict of ``conversation_id`` (no turns when it is unknown)."""
    namespace = conversation_namespace(conversation_id)
    head = head_from_entry(uow.entries.get_by_key(namespace, HEAD_KEY))
    rows = uow.entries.list(namespace, key_prefix=TURN_KEY_PREFIX)
    turns: list[dict[str, Any]] = []
    for row in rows:
        turn = turn_from_entry(row, with_raw=False)
        item: dict[str, Any] = {
            "turn_id": turn.turn_id,
            "user_prompt": turn.user_prompt,
            "assistant_response": turn.assistant_response,
            "token_estimate": turn.token_estimate,
            "metadata": turn.metadata,
            "timestamp": turn.timestamp.isoformat(),
        }
        if turn.updated_at is not None:
            item["updated_at"] = turn.updated_at.isoformat()
        raw = stored_raw(row)
        if raw:
            item["raw_messages"] = json.loads(json.dumps(raw))
        turns.append(item)
    exported: dict[str, Any] = {
        "conversation_id": conversation_id,
        "turns": turns,
        "summary": head.summary,
        "total_tokens": sum(t["token_estimate"] for t in turns),
    }
    parent = read_parent(uow, conversation_id)
    if parent is not None:  # what it was branched from (an import does not restore the link)
        exported["branch_of"] = {
            "conversation_id": parent.parent_id,
            "at_turn": parent.at_turn,
            "created_at": parent.created_at.isoformat(),
        }
    info = read_info(uow, conversation_id)
    if info is not None:  # listing fields, only when set (older readers know none)
        if info.title is not None:
            exported["title"] = info.title
        if info.tags:
            exported["tags"] = list(info.tags)
        if info.archived:
            exported["archived"] = True
    state = conversation_state(uow, conversation_id)
    if state:  # its own state keys, only when it has some
        exported["state"] = state
    return exported


def parse_import(
    data: Any, conversation_id: Any, estimate: Callable[[str, str], int]
) -> ParsedImport:
    """Validate an export dict: the conversation id, its turns, its summary and listing fields.

    The id is ``conversation_id`` if given, else ``data["conversation_id"]``,
    else a new one.  Missing turn fields default; ``turn_id`` defaults to the
    position, and ids that are not strictly increasing non-negative integers
    are renumbered 0, 1, ... (a warning is logged).  A ``token_estimate <= 0``
    is re-estimated with ``estimate(user_prompt, assistant_response)``.
    ``title`` (a string or ``None``), ``tags`` (a list of strings) and
    ``archived`` (a bool), each optional, are checked as ``update_conversation``
    checks them; ``state`` (optional, an object of the conversation's own keys,
    no ``app:``/``user:``/``temp:`` prefix) as ``update_state`` checks a delta.
    """
    if not isinstance(data, Mapping):
        raise EntryValidationError("data", f"must be a dict, got {type(data).__name__}")
    cid = check_conversation_id(conversation_id or data.get("conversation_id") or uuid.uuid4().hex)
    summary = data.get("summary")
    if summary is not None and not isinstance(summary, str):
        raise EntryValidationError("summary", "must be a str or None")
    raw_turns = data.get("turns") or []
    if not isinstance(raw_turns, list | tuple):
        raise EntryValidationError("turns", "must be a list")
    turns = [_parse_turn(position, item, estimate) for position, item in enumerate(raw_turns)]
    ids = [t.turn.turn_id for t in turns]
    valid = all(0 <= i <= MAX_TURN_ID for i in ids) and all(
        a < b for a, b in itertools.pairwise(ids)
    )
    if not valid:
        logger.warning(
            "import of conversation %r: turn ids %s are not strictly increasing "
            "non-negative integers; renumbering them 0..%d",
            cid,
            ids[:10],
            len(ids) - 1,
        )
        turns = [
            EncodedTurn(t.turn.model_copy(update={"turn_id": n}), t.encoded_raw)
            for n, t in enumerate(turns)
        ]
    return cid, turns, summary, _parse_listing(data), _parse_state(data.get("state"))


def _parse_state(state: Any) -> dict[str, Any] | None:
    """The conversation's own state an export carries (``None``: none), checked."""
    if state is None:
        return None
    delta = check_state_delta(state, name="state")
    if delta.app or delta.user or delta.temp:
        raise EntryValidationError(
            "state", "holds the conversation's own keys only (no app:, user: or temp: key)"
        )
    return delta.own


def _parse_listing(data: Mapping[str, Any]) -> MetadataChange | None:
    """The title, tags and archived flag an export carries (``None``: none of them)."""
    title = data.get("title")
    tags = data.get("tags")
    archived = data.get("archived")
    if archived is not None and not isinstance(archived, bool):
        raise EntryValidationError("archived", "must be a bool")
    if title is None and tags is None and archived is None:
        return None
    return MetadataChange(
        title=None if title is None else check_title(title),
        tags=None if tags is None else check_tags(tags),
        archived=archived,
    )


def _restore_listing(uow: UnitOfWork, conversation_id: str, listing: MetadataChange | None) -> None:
    """Transaction: set the listing fields an import carries on the head just written."""
    if listing is not None:
        change_metadata(uow, conversation_id, listing)


def parse_imports(
    items: Sequence[Any], conversation_id: Any, estimate: Callable[[str, str], int]
) -> list[ParsedImport]:
    """Validate several export dicts with :func:`parse_import`, all before any is written.

    ``conversation_id`` (the id to import under) applies only when there is
    exactly one item.  Two items with the same id are refused (the second would
    silently replace the first).

    Raises:
        EntryValidationError: The first invalid item, named by its position and
            id (``"conversations[1]: conversation 'x': turns: must be a list"``);
            structures nested too deeply for Python count as invalid.
    """
    if conversation_id and len(items) != 1:
        raise EntryValidationError(
            "conversation_id",
            f"an id to import under needs exactly one conversation, got {len(items)}",
        )
    parsed: list[ParsedImport] = []
    seen: dict[str, int] = {}
    for position, item in enumerate(items):
        label = conversation_id or (
            item.get("conversation_id") if isinstance(item, Mapping) else None
        )
        where = f"conversations[{position}]"
        what = f"conversation {label!r}" if isinstance(label, str) else "conversation"
        try:
            parsed_item = parse_import(item, conversation_id, estimate)
        except RecursionError:
            raise EntryValidationError(where, f"{what}: nested too deeply") from None
        except (EntryValidationError, TypeError, ValueError) as exc:
            raise EntryValidationError(where, f"{what}: {exc}") from None
        cid = parsed_item[0]
        if cid in seen:
            raise EntryValidationError(
                where, f"{what}: same conversation id as conversations[{seen[cid]}]"
            )
        seen[cid] = position
        parsed.append(parsed_item)
    return parsed


def import_conversations(
    conversations: Sequence[ParsedImport],
    owner: str | None = None,
    *,
    batched: bool = False,
    text_search: bool,
) -> Operation[list[str]]:
    """Replace every conversation of ``conversations`` in ONE unit of work; return their ids.

    All or nothing: when any write fails, no conversation is changed.  Once it
    is committed, a large import refreshes the store's planner statistics
    (:func:`refresh_statistics`).

    With ``batched`` (``import_conversation``), a single conversation of more
    than :data:`IMPORT_BATCH_TURNS` turns is written in batches instead
    (:func:`import_in_batches`), each its own short unit of work, so no
    transaction outlives a server's limit (MongoDB aborts transactions older
    than 60 seconds).

    ``text_search``: the turn rows carry their ``search_text``
    (:func:`~firefly_orm.conversation._rows.turn_entry`).
    """
    if batched and len(conversations) == 1 and len(conversations[0][1]) > IMPORT_BATCH_TURNS:
        yield from import_in_batches(conversations[0], owner, text_search=text_search)
    else:
        yield from retrying(
            Transaction.write(replace_conversations, conversations, owner, text_search=text_search)
        )
    yield from refresh_statistics(sum(len(parsed[1]) for parsed in conversations))
    return [parsed[0] for parsed in conversations]


def import_in_batches(
    conversation: ParsedImport, owner: str | None = None, *, text_search: bool
) -> Operation[None]:
    """Replace one conversation's turns in units of work of :data:`IMPORT_BATCH_TURNS` turns.

    The first unit of work replaces the conversation with the first batch
    (:func:`~firefly_orm.conversation._ops.replace_conversation`: old turns and
    archive deleted, owner checked); each next one appends a batch and moves
    the head on (:func:`append_imported`).  Every commit leaves a consistent
    conversation, a prefix of the import, so a reader sees either the old
    conversation or a growing prefix of the new one.  Each batch is retried
    on a write conflict.  Should one still fail, the conversation holds the
    batches committed so far; the same import run again resumes after them
    (:func:`imported_batches`: the stored turns are exactly those batches,
    compared row by row), else starts over.  Either way it completes without
    duplicates (turn rows have derived ids).
    """
    cid, turns, summary, _listing, _state = conversation
    size = IMPORT_BATCH_TURNS
    done = yield from Transaction.read(imported_batches, cid, turns, summary, owner)
    if done == 0:
        first = (cid, turns[:size], *conversation[2:])
        yield from retrying(Transaction.write(_replace_one, first, owner, text_search))
        done = 1
    else:
        logger.info("resuming the import of conversation %r after %d turns", cid, done * size)
    for start in range(done * size, len(turns), size):
        expected_next = turns[start - 1].turn.turn_id + 1
        batch = turns[start : start + size]
        yield from retrying(
            Transaction.write(
                append_imported, cid, batch, expected_next, owner, text_search=text_search
            )
        )
    logger.info(
        "imported conversation %r: %d turns in %d units of work",
        cid,
        len(turns),
        -(-len(turns) // size),
    )


def imported_batches(
    uow: UnitOfWork,
    conversation_id: str,
    turns: Sequence[EncodedTurn],
    summary: str | None,
    owner: str | None = None,
) -> int:
    """Transaction (read): how many leading batches of this import are stored already.

    Non-zero only when the conversation holds exactly the first ``k`` batches
    (``k`` at least 1, fewer than all): the head counts them and carries the
    import's summary, and every stored turn row equals the row the import
    writes for it; the archive is empty.  Anything else (another
    conversation, another import, turns added since) gives 0: start over.
    """
    size = IMPORT_BATCH_TURNS
    namespace = conversation_namespace(conversation_id)
    stored_head = uow.entries.get_by_key(namespace, HEAD_KEY)
    if stored_head is None or (owner is not None and stored_head.user_id != owner):
        return 0
    head = head_from_entry(stored_head)
    done, partial = divmod(head.turn_count, size)
    if partial or not 0 < done * size < len(turns) or (summary and head.summary != summary):
        return 0
    if head.next_turn_id != turns[done * size - 1].turn.turn_id + 1:
        return 0
    if uow.entries.list(archive_namespace(conversation_id), limit=1):
        return 0
    rows = uow.entries.list(namespace, key_prefix=TURN_KEY_PREFIX)
    if len(rows) != done * size:
        return 0
    user_id = stored_head.user_id
    for row, item in zip(rows, turns, strict=False):
        expected = turn_entry(  # the content is compared, which text_search does not change
            namespace, item.turn, item.encoded_raw, item.message_tokens, user_id, text_search=True
        )
        if (row.key, row.content) != (expected.key, _as_stored(expected.content)):
            return 0
    return done


def _as_stored(value: Any) -> Any:
    """``value`` as a store gives it back (through JSON)."""
    return json.loads(json.dumps(value))


def append_imported(
    uow: UnitOfWork,
    conversation_id: str,
    batch: Sequence[EncodedTurn],
    expected_next: int,
    owner: str | None = None,
    *,
    text_search: bool,
) -> None:
    """Transaction: append the next batch of an import (:func:`import_in_batches`).

    The head must still be where the previous batch left it
    (``next_turn_id == expected_next``); a head already past this batch (its
    commit landed, then reported failed) is left as it is.

    Raises:
        ConversationNotFoundError: The conversation is gone, or not ``owner``'s.
        ConcurrencyError: Another writer changed the conversation meanwhile.
    """
    namespace = conversation_namespace(conversation_id)
    stored_head = uow.entries.get_by_key(namespace, HEAD_KEY, for_update=True)
    if stored_head is None:
        raise ConversationNotFoundError(conversation_id)
    claim(stored_head, owner, conversation_id)
    head = head_from_entry(stored_head)
    last = batch[-1].turn.turn_id
    if head.next_turn_id == last + 1 and head.turn_count >= len(batch):
        return  # this batch is in already
    if head.next_turn_id != expected_next:
        raise ConcurrencyError(
            f"conversation {conversation_id!r} changed while it was imported "
            f"(next turn {head.next_turn_id}, expected {expected_next}); import it again"
        )
    user_id = stored_head.user_id
    for item in batch:
        uow.entries.save(
            namespace,
            turn_entry(
                namespace,
                item.turn,
                item.encoded_raw,
                item.message_tokens,
                user_id,
                text_search=text_search,
            ),
        )
    save_head(
        uow,
        conversation_id,
        stored_head,
        head,
        next_turn_id=last + 1,
        total_tokens=head.total_tokens + sum(t.turn.token_estimate for t in batch),
        turn_count=head.turn_count + len(batch),
        summary=head.summary,
        total_messages=(head.total_messages or 0) + sum(t.turn.message_count for t in batch),
        user_id=user_id,
    )


def replace_conversations(
    uow: UnitOfWork,
    conversations: Sequence[ParsedImport],
    owner: str | None = None,
    *,
    text_search: bool,
) -> None:
    """Transaction: :func:`~firefly_orm.conversation._ops.replace_conversation` for each
    one (new ones belong to ``owner``; with an ``owner``, existing ones must be theirs)."""
    for parsed in conversations:
        _replace_one(uow, parsed, owner, text_search)


def _replace_one(
    uow: UnitOfWork, parsed: ParsedImport, owner: str | None, text_search: bool
) -> None:
    """Transaction: replace one conversation with an import, listing fields and state included."""
    cid, turns, summary, listing, state = parsed
    replace_conversation(uow, cid, turns, summary, owner, text_search=text_search)
    _restore_listing(uow, cid, listing)
    if state is not None:  # the rows carry the owner the conversation was left with
        row = owner_row(uow, cid)
        replace_conversation_state(uow, cid, state, None if row is None else row.user_id)


def copy_conversation(
    uow: UnitOfWork,
    source: str,
    target: str,
    estimate: Callable[[str, str], int],
    *,
    text_search: bool,
) -> None:
    """Transaction: ``target`` becomes a copy of ``source`` (its retained turns with
    their ids, raw messages, metadata and times, its summary and its own state),
    owned by ``source``'s owner.  The archive is not copied.

    Raises:
        ConversationNotFoundError: ``source`` does not exist.
    """
    row = owner_row(uow, source)
    if row is None:
        raise ConversationNotFoundError(source)
    _cid, turns, summary, _listing, state = parse_import(read_export(uow, source), target, estimate)
    replace_conversation(uow, target, turns, summary, row.user_id, text_search=text_search)
    replace_conversation_state(uow, target, state or {}, row.user_id)
    # The copied turns say so (usage totals count the original turns only).
    namespace = conversation_namespace(target)
    for copied in uow.entries.list(namespace, key_prefix=TURN_KEY_PREFIX):
        uow.entries.save(namespace, copied.copy_entry(metadata={TURN_COPY_OF: source}))


def _parse_turn(position: int, item: Any, estimate: Callable[[str, str], int]) -> EncodedTurn:
    if not isinstance(item, Mapping):
        raise EntryValidationError("turns", f"turn {position} must be a dict")
    prompt = check_text("user_prompt", item.get("user_prompt") or "")
    response = check_text("assistant_response", item.get("assistant_response") or "")
    turn_id = item.get("turn_id", position)
    token_estimate = item.get("token_estimate") or 0
    if isinstance(token_estimate, bool) or not isinstance(token_estimate, int):
        raise EntryValidationError("token_estimate", "must be an integer")
    if token_estimate <= 0:
        token_estimate = estimate(prompt, response)
    raw = item.get("raw_messages")
    try:
        encoded = check_encoded(raw) if isinstance(raw, Mapping) else encode_raw_messages(raw)
    except TypeError as exc:
        raise EntryValidationError("raw_messages", str(exc)) from None
    turn = ConversationTurn(
        turn_id=turn_id if isinstance(turn_id, int) and not isinstance(turn_id, bool) else -1,
        user_prompt=prompt,
        assistant_response=response,
        raw_messages=[],
        timestamp=_parse_timestamp(item.get("timestamp")),
        token_estimate=token_estimate,
        metadata=check_metadata(item.get("metadata")),
        updated_at=None if item.get("updated_at") is None else _parse_timestamp(item["updated_at"]),
    )
    return EncodedTurn(turn, encoded)


def _parse_timestamp(timestamp: Any) -> datetime:
    try:
        when = (
            datetime.fromisoformat(timestamp)
            if isinstance(timestamp, str)
            else timestamp
            if isinstance(timestamp, datetime)
            else utcnow()
        )
    except ValueError:
        raise EntryValidationError("timestamp", f"bad timestamp {timestamp!r}") from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise EntryValidationError("timestamp", "must be timezone-aware")
    return when
