"""Token-budgeted conversation memory persisted through any :class:`MemoryStore`.

How a conversation is stored (every row is a :class:`~firefly_orm.entry.MemoryEntry`
with scope ``CONVERSATION``):

* namespace ``conversation:<id>``

  - the *head* (key ``"head"``, id ``derived_entry_id(ns, "head")``), content
    ``{"conversation_id", "next_turn_id", "total_tokens", "turn_count", "summary"}``.
    Its store-maintained ``version`` is the optimistic-concurrency token: every
    write of a conversation re-reads the head (``for_update``) and saves it back
    with ``expected_version=<version read>``.
  - one row per turn (key ``"turn:<turn_id as 12 digits>"``, derived id), content
    = the turn's fields, ``token_estimate`` included (it is never recomputed on
    read) and ``raw_messages`` in portable JSON.

* namespace ``conversation-archive:<id>``: evicted turns when ``keep_evicted=True``.
* namespace ``conversation-index``: one row per conversation (key = the id), so
  :attr:`ConversationMemory.conversation_ids` works on any store.

A new :class:`ConversationMemory` over the same store resumes every conversation.

Adding a turn is one unit of work: insert the turn, evict the oldest turns, update
the summary and the head, all or nothing.  Its cost does not grow with the length
of the conversation: only the head is read, plus the oldest turns in small batches
when some must be evicted.  The eviction decision is the pure function
:func:`plan_append`.

The summarizer never runs inside a unit of work (on SQLite a write transaction
blocks every other writer): when a plan needs a new summary the unit of work is
rolled back, the summarizer runs, and the unit of work is redone and applied only
if the head is still at the version the summary was planned on (otherwise the
turn is re-planned; contention is retried a bounded number of times, then
:class:`~firefly_orm.errors.ConcurrencyError` is raised).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

from pydantic import AwareDatetime, BaseModel, Field, field_validator

from firefly_orm.entry import MemoryEntry, MemoryScope, derived_entry_id, utcnow
from firefly_orm.errors import ConcurrencyError, EntryValidationError, StoreCorruptedError
from firefly_orm.store import InMemoryStore
from firefly_orm.tokens import TokenEstimator
from firefly_orm.uow import UnitOfWork, async_unit_of_work_for, unit_of_work_for

__all__ = [
    "AppendPlan",
    "AsyncSummarizer",
    "ConversationMemory",
    "ConversationTurn",
    "HeadState",
    "Summarizer",
    "SUMMARY_TURN_ID",
    "SUMMARY_TURN_PROMPT",
    "history_suffix",
    "plan_append",
    "summary_input",
]

logger = logging.getLogger("firefly_orm")
T = TypeVar("T")

#: Namespace holding one index row per conversation.
INDEX_NAMESPACE = "conversation-index"
#: Key of a conversation's head row.
HEAD_KEY = "head"
#: Key prefix of turn rows (followed by the turn id as 12 digits).
TURN_KEY_PREFIX = "turn:"
#: Largest turn id (the key holds 12 digits).
MAX_TURN_ID = 10**12 - 1

#: ``turn_id`` of the synthetic turn that carries the previous summary.
SUMMARY_TURN_ID = -1
#: ``user_prompt`` of the synthetic turn that carries the previous summary.
SUMMARY_TURN_PROMPT = "Summary of the earlier conversation"

_PYDANTIC_AI_FORMAT = "pydantic-ai"
_JSON_FORMAT = "json"
_MAX_ATTEMPTS = 25
_FIRST_BATCH = 8


def conversation_namespace(conversation_id: str) -> str:
    """Namespace of a conversation's head and turns."""
    return f"conversation:{conversation_id}"


def archive_namespace(conversation_id: str) -> str:
    """Namespace of a conversation's archived (evicted) turns."""
    return f"conversation-archive:{conversation_id}"


def turn_key(turn_id: int) -> str:
    """Key of the row of turn ``turn_id`` (zero-padded so keys sort by id)."""
    return f"{TURN_KEY_PREFIX}{turn_id:012d}"


# =========================================================================== the turn


class ConversationTurn(BaseModel):
    """One user/assistant exchange.

    Attributes:
        turn_id: Unique, increasing id within the conversation.
        user_prompt: What the user said.
        assistant_response: What the assistant answered.
        raw_messages: The model messages of the exchange (pydantic-ai
            ``ModelMessage`` objects, or JSON values); ``None`` becomes ``[]``.
        timestamp: Timezone-aware time the turn was added.
        token_estimate: Tokens counted for ``"{user_prompt}\\n{assistant_response}"``.
        metadata: A JSON object.
    """

    turn_id: int = 0
    user_prompt: str = ""
    assistant_response: str = ""
    raw_messages: list[Any] = Field(default_factory=list)
    timestamp: AwareDatetime = Field(default_factory=utcnow)
    token_estimate: int = 0
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("raw_messages", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value


# =========================================================================== pure planning


@dataclass(frozen=True)
class HeadState:
    """What a conversation's head says (``version == 0``: no head stored yet)."""

    next_turn_id: int = 0
    total_tokens: int = 0
    turn_count: int = 0
    summary: str | None = None
    version: int = 0


@dataclass(frozen=True)
class AppendPlan:
    """What adding one turn does (the result of :func:`plan_append`).

    Attributes:
        turn: The turn to insert, with its ``turn_id`` assigned.
        evicted_turn_ids: Ids of the stored turns to evict, oldest first.
        evicted_turns: Those turns.
        summarize: True when a summary must be made of the evicted turns.
        total_tokens: The conversation's token total after the plan.
        turn_count: Its number of turns after the plan.
        next_turn_id: The next turn id after the plan.
        expected_version: The head version the plan was made on.
    """

    turn: ConversationTurn
    evicted_turn_ids: tuple[int, ...]
    evicted_turns: tuple[ConversationTurn, ...]
    summarize: bool
    total_tokens: int
    turn_count: int
    next_turn_id: int
    expected_version: int


OldestTurns = Sequence[ConversationTurn] | Callable[[int], Sequence[ConversationTurn]]


def plan_append(
    head: HeadState,
    new_turn: ConversationTurn,
    oldest_turns: OldestTurns,
    max_tokens: int,
    summarize_threshold: int,
    *,
    has_summarizer: bool = False,
) -> AppendPlan:
    """Plan adding ``new_turn`` to a conversation (pure: no I/O of its own).

    The new turn gets ``turn_id = head.next_turn_id``.  After adding it, if the
    total exceeds ``summarize_threshold`` AND ``max_tokens``, the oldest stored
    turns are evicted (FIFO) while the total exceeds ``max_tokens`` and more than
    one turn remains; the new turn is never evicted.

    Args:
        head: The conversation's head before the turn.
        new_turn: The turn to add (its ``turn_id`` is replaced).
        oldest_turns: The stored turns oldest first, either as a sequence or as a
            callable ``n -> the n oldest turns (fewer if there are fewer)``; the
            callable is asked only when eviction is needed, for growing ``n``.
        max_tokens: The budget.
        summarize_threshold: Eviction happens only above this total.
        has_summarizer: Whether evicted turns are to be summarised.
    """
    turn = new_turn.model_copy(update={"turn_id": head.next_turn_id})
    total = head.total_tokens + turn.token_estimate
    count = head.turn_count + 1
    evicted: list[ConversationTurn] = []
    if total > summarize_threshold and total > max_tokens:
        fetch: Callable[[int], Sequence[ConversationTurn]]
        if callable(oldest_turns):
            fetch = oldest_turns
        else:
            stored = list(oldest_turns)

            def fetch(n: int) -> Sequence[ConversationTurn]:
                return stored[:n]

        wanted = _FIRST_BATCH
        batch = list(fetch(wanted))
        index = 0
        while total > max_tokens and count > 1:
            if index >= len(batch):
                if len(batch) < wanted:
                    break  # the store holds fewer turns than the head says
                wanted *= 4
                batch = list(fetch(wanted))
                if index >= len(batch):
                    break
            oldest = batch[index]
            index += 1
            evicted.append(oldest)
            total -= oldest.token_estimate
            count -= 1
    return AppendPlan(
        turn=turn,
        evicted_turn_ids=tuple(t.turn_id for t in evicted),
        evicted_turns=tuple(evicted),
        summarize=bool(evicted) and has_summarizer,
        total_tokens=max(total, 0),
        turn_count=count,
        next_turn_id=turn.turn_id + 1,
        expected_version=head.version,
    )


def summary_input(
    previous_summary: str | None, evicted: Iterable[ConversationTurn]
) -> list[ConversationTurn]:
    """The turns handed to the summarizer.

    When there is a previous summary it comes first, as a synthetic turn with
    ``turn_id=SUMMARY_TURN_ID`` (-1), ``user_prompt=SUMMARY_TURN_PROMPT`` and the
    previous summary as ``assistant_response``, so the new summary covers it too.
    """
    turns: list[ConversationTurn] = []
    if previous_summary:
        turns.append(
            ConversationTurn(
                turn_id=SUMMARY_TURN_ID,
                user_prompt=SUMMARY_TURN_PROMPT,
                assistant_response=previous_summary,
            )
        )
    turns.extend(evicted)
    return turns


def history_suffix(turns: Sequence[ConversationTurn], max_tokens: int) -> list[ConversationTurn]:
    """The newest contiguous run of ``turns`` (chronological) fitting ``max_tokens``.

    Walks from the newest turn back and stops at the first that does not fit, so
    an oversize newest turn gives ``[]`` (as the module this is modelled on does).
    """
    count, _ = _fitting_count([t.token_estimate for t in reversed(turns)], max_tokens)
    return list(turns[len(turns) - count :]) if count else []


def _fitting_count(estimates_newest_first: Sequence[int], max_tokens: int) -> tuple[int, bool]:
    """How many of the newest turns fit; and whether a turn did not fit."""
    running = 0
    for index, estimate in enumerate(estimates_newest_first):
        if running + estimate > max_tokens:
            return index, True
        running += estimate
    return len(estimates_newest_first), False


# =========================================================================== raw messages

_pydantic_ai_cache: list[Any] = []


def _pydantic_ai_messages() -> Any:
    """``pydantic_ai.messages`` or ``None`` when pydantic-ai is not installed."""
    if not _pydantic_ai_cache:
        try:
            import pydantic_ai.messages as messages
        except ImportError:
            _pydantic_ai_cache.append(None)
        else:
            _pydantic_ai_cache.append(messages)
    return _pydantic_ai_cache[0]


def encode_raw_messages(raw_messages: Any) -> dict[str, Any] | None:
    """Portable JSON form of a turn's raw messages (``None`` when there are none).

    pydantic-ai ``ModelMessage`` lists become
    ``{"format": "pydantic-ai", "messages": <ModelMessagesTypeAdapter JSON>}``;
    other JSON-serialisable lists become ``{"format": "json", "messages": [...]}``.

    Raises:
        TypeError: ``raw_messages`` is not a list/tuple, or holds values that are
            neither ModelMessage objects nor JSON-serialisable.
    """
    if raw_messages is None:
        return None
    if not isinstance(raw_messages, list | tuple):
        raise TypeError(f"raw_messages must be a list (or None), got {type(raw_messages).__name__}")
    if not raw_messages:
        return None
    messages_mod = _pydantic_ai_messages()
    if messages_mod is not None and all(
        isinstance(m, messages_mod.ModelRequest | messages_mod.ModelResponse) for m in raw_messages
    ):
        dumped = messages_mod.ModelMessagesTypeAdapter.dump_python(list(raw_messages), mode="json")
        return {"format": _PYDANTIC_AI_FORMAT, "messages": dumped}
    try:
        text = json.dumps(list(raw_messages), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            "raw_messages must be pydantic-ai ModelMessage objects or JSON-serialisable "
            f"values ({exc})"
        ) from None
    return {"format": _JSON_FORMAT, "messages": json.loads(text)}


def _check_encoded(value: Any) -> dict[str, Any] | None:
    """Accept an already-encoded raw-messages object (from an export), or raise."""
    if not value:
        return None
    if not isinstance(value, Mapping) or set(value) != {"format", "messages"}:
        raise EntryValidationError("raw_messages", "unknown raw_messages object")
    fmt, messages = value["format"], value["messages"]
    if fmt not in (_PYDANTIC_AI_FORMAT, _JSON_FORMAT) or not isinstance(messages, list):
        raise EntryValidationError("raw_messages", f"unknown raw_messages format {fmt!r}")
    try:
        text = json.dumps(messages, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise EntryValidationError("raw_messages", f"must be JSON ({exc})") from None
    messages_mod = _pydantic_ai_messages()
    if fmt == _PYDANTIC_AI_FORMAT and messages_mod is not None:
        try:
            messages_mod.ModelMessagesTypeAdapter.validate_python(messages)
        except ValueError as exc:
            raise EntryValidationError(
                "raw_messages", f"invalid pydantic-ai messages ({exc})"
            ) from None
    return {"format": fmt, "messages": json.loads(text)} if messages else None


def decode_raw_messages(stored: Any) -> list[Any]:
    """Inverse of :func:`encode_raw_messages`.

    pydantic-ai messages come back as ``ModelMessage`` objects; when pydantic-ai
    is not installed they come back as their JSON dicts (a warning is logged).
    """
    if not stored:
        return []
    if isinstance(stored, list):  # written by something else than this module
        return list(stored)
    if not isinstance(stored, Mapping):
        raise StoreCorruptedError(f"unreadable raw_messages object {stored!r:.80}")
    messages = stored.get("messages") or []
    if stored.get("format") == _PYDANTIC_AI_FORMAT:
        messages_mod = _pydantic_ai_messages()
        if messages_mod is None:
            logger.warning(
                "raw_messages were stored as pydantic-ai messages but pydantic-ai is not "
                "installed; returning them as JSON dicts"
            )
            return list(messages)
        return list(messages_mod.ModelMessagesTypeAdapter.validate_python(messages))
    return list(messages)


# =========================================================================== summarizers


@runtime_checkable
class AsyncSummarizer(Protocol):
    """An object with an async summarize method."""

    async def async_summarize(self, turns: list[ConversationTurn]) -> str: ...


#: A summarizer: ``turns -> str`` (sync), ``turns -> Awaitable[str]`` (async), or an
#: object with ``async_summarize``.
Summarizer = (
    Callable[[list[ConversationTurn]], str]
    | Callable[[list[ConversationTurn]], Awaitable[str]]
    | AsyncSummarizer
)


def _is_coroutine_callable(obj: Any) -> bool:
    if inspect.iscoroutinefunction(obj):
        return True
    call = getattr(type(obj), "__call__", None)  # noqa: B004
    return not inspect.isfunction(obj) and call is not None and inspect.iscoroutinefunction(call)


async def _await_it(awaitable: Awaitable[T]) -> T:
    return await awaitable


def _checked_summary(result: Any) -> str:
    if not isinstance(result, str):
        raise TypeError(f"the summarizer must return a str, got {type(result).__name__}")
    return result


# =========================================================================== steps


@dataclass(frozen=True)
class _Tx:
    """Run ``fn(uow, *args)`` in a unit of work; commit when it asks to."""

    fn: Callable[..., _TxResult]
    args: tuple[Any, ...] = ()
    read_only: bool = False


@dataclass(frozen=True)
class _TxResult:
    value: Any
    commit: bool = False


@dataclass(frozen=True)
class _Summarize:
    turns: list[ConversationTurn]


@dataclass(frozen=True)
class _Sleep:
    seconds: float


_Step = _Tx | _Summarize | _Sleep
_Op = Generator[_Step, Any, T]


@dataclass(frozen=True)
class _AppendRequest:
    conversation_id: str
    turn: ConversationTurn  # turn_id assigned by the plan
    encoded_raw: dict[str, Any] | None


@dataclass(frozen=True)
class _NeedsSummary:
    head_version: int
    evicted_turn_ids: tuple[int, ...]
    turns: list[ConversationTurn]


@dataclass(frozen=True)
class _PreparedSummary:
    head_version: int
    evicted_turn_ids: tuple[int, ...]
    summary: str


@dataclass(frozen=True)
class _ImportedTurn:
    turn: ConversationTurn
    encoded_raw: dict[str, Any] | None


@dataclass
class _OldestTurnsReader:
    """Reads the oldest turns of a conversation through a unit of work."""

    uow: UnitOfWork
    namespace: str
    entries: dict[int, MemoryEntry] = field(default_factory=dict)

    def __call__(self, n: int) -> list[ConversationTurn]:
        rows = self.uow.entries.list(self.namespace, key_prefix=TURN_KEY_PREFIX, limit=n)
        turns = [_turn_from_entry(e) for e in rows]
        for entry, turn in zip(rows, turns, strict=True):
            self.entries[turn.turn_id] = entry
        return turns


def _backoff(attempt: int) -> float:
    return random.uniform(0.0, min(0.05, 0.001 * 2**attempt))


# =========================================================================== row helpers


def _head_from_entry(entry: MemoryEntry | None) -> HeadState:
    if entry is None:
        return HeadState()
    content = entry.content
    try:
        summary = content.get("summary")
        return HeadState(
            next_turn_id=int(content["next_turn_id"]),
            total_tokens=int(content["total_tokens"]),
            turn_count=int(content["turn_count"]),
            summary=summary if isinstance(summary, str) else None,
            version=entry.version,
        )
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise StoreCorruptedError(
            f"unreadable conversation head in {entry.namespace!r}: {exc}"
        ) from exc


def _head_entry(
    conversation_id: str,
    previous: MemoryEntry | None,
    *,
    next_turn_id: int,
    total_tokens: int,
    turn_count: int,
    summary: str | None,
) -> MemoryEntry:
    namespace = conversation_namespace(conversation_id)
    content = {
        "conversation_id": conversation_id,
        "next_turn_id": next_turn_id,
        "total_tokens": total_tokens,
        "turn_count": turn_count,
        "summary": summary,
    }
    if previous is not None:
        return previous.copy_entry(content=content)
    return MemoryEntry.from_dict(
        dict(
            entry_id=derived_entry_id(namespace, HEAD_KEY),
            namespace=namespace,
            scope=MemoryScope.CONVERSATION,
            key=HEAD_KEY,
            content=content,
            metadata={"conversation_id": conversation_id},
        )
    )


def _index_entry(conversation_id: str) -> MemoryEntry:
    return MemoryEntry.from_dict(
        dict(
            entry_id=derived_entry_id(INDEX_NAMESPACE, conversation_id),
            namespace=INDEX_NAMESPACE,
            scope=MemoryScope.CONVERSATION,
            key=conversation_id,
            content={"conversation_id": conversation_id},
        )
    )


def _turn_entry(
    namespace: str, turn: ConversationTurn, encoded_raw: dict[str, Any] | None
) -> MemoryEntry:
    key = turn_key(turn.turn_id)
    return MemoryEntry.from_dict(
        dict(
            entry_id=derived_entry_id(namespace, key),
            namespace=namespace,
            scope=MemoryScope.CONVERSATION,
            key=key,
            content={
                "turn_id": turn.turn_id,
                "user_prompt": turn.user_prompt,
                "assistant_response": turn.assistant_response,
                "raw_messages": encoded_raw,
                "timestamp": turn.timestamp.isoformat(),
                "token_estimate": turn.token_estimate,
                "metadata": turn.metadata,
            },
        )
    )


def _turn_from_entry(entry: MemoryEntry, *, with_raw: bool = True) -> ConversationTurn:
    content = entry.content
    try:
        return ConversationTurn(
            turn_id=content["turn_id"],
            user_prompt=content["user_prompt"],
            assistant_response=content["assistant_response"],
            raw_messages=decode_raw_messages(content.get("raw_messages")) if with_raw else [],
            timestamp=datetime.fromisoformat(content["timestamp"]),
            token_estimate=content["token_estimate"],
            metadata=content.get("metadata") or {},
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreCorruptedError(
            f"unreadable conversation turn {entry.key!r} in {entry.namespace!r}: {exc}"
        ) from exc


def _stored_raw(entry: MemoryEntry) -> Any:
    content = entry.content
    return content.get("raw_messages") if isinstance(content, Mapping) else None


# =========================================================================== validation


def _check_conversation_id(conversation_id: Any) -> str:
    if not isinstance(conversation_id, str) or not conversation_id:
        raise EntryValidationError("conversation_id", "must be a non-empty string")
    if "\x00" in conversation_id:
        raise EntryValidationError("conversation_id", "must not contain NUL characters")
    return conversation_id


def _check_text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise EntryValidationError(name, f"must be a str, got {type(value).__name__}")
    return value


def _check_metadata(metadata: Any) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping) or not all(isinstance(k, str) for k in metadata):
        raise EntryValidationError("metadata", "must be a dict with string keys")
    try:
        return cast(dict[str, Any], json.loads(json.dumps(dict(metadata), allow_nan=False)))
    except (TypeError, ValueError) as exc:
        raise EntryValidationError("metadata", f"must be JSON-serialisable ({exc})") from None


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise EntryValidationError(name, f"must be an integer >= {minimum}, got {value!r}")
    return value


# =========================================================================== the memory


class ConversationMemory:
    """Token-budgeted conversations, persisted through a store.

    Args:
        max_tokens: Token budget of a conversation (history and retained turns).
        summarize_threshold: Eviction happens only when the total exceeds both this
            and ``max_tokens``; it then trims down to ``max_tokens``.  (So a
            threshold below ``max_tokens`` changes nothing; a higher one lets the
            stored conversation grow to the threshold before trimming.)
        estimator: Counts the tokens of ``"{user_prompt}\\n{assistant_response}"``;
            default :class:`TokenEstimator`.
        summarizer: Called with the evicted turns (oldest first, preceded by the
            previous summary as a synthetic turn, see :func:`summary_input`);
            what it returns becomes :meth:`get_summary`.  Sync callable, async
            callable, or an object with ``async_summarize``.  Without one, evicted
            turns are dropped and the summary is left unchanged.
        store: Where conversations live; default a new :class:`InMemoryStore`.
        keep_evicted: Move evicted turns to ``conversation-archive:<id>`` (see
            :meth:`get_archived_turns`) instead of deleting them.

    Turn ids are unique and increasing within a conversation, also across
    evictions; :meth:`clear` forgets the conversation, so ids restart at 0.
    If the summarizer raises, :meth:`add_turn` raises that error and nothing is
    written (the turn is not added).
    """

    def __init__(
        self,
        *,
        max_tokens: int = 4096,
        summarize_threshold: int = 3072,
        estimator: TokenEstimator | None = None,
        summarizer: Summarizer | None = None,
        store: Any = None,
        keep_evicted: bool = False,
    ) -> None:
        self._max_tokens = _check_int("max_tokens", max_tokens, 1)
        self._summarize_threshold = _check_int("summarize_threshold", summarize_threshold, 0)
        if estimator is not None and not callable(getattr(estimator, "estimate", None)):
            raise TypeError("estimator must have an estimate(text) -> int method")
        if summarizer is not None and not (
            callable(summarizer) or callable(getattr(summarizer, "async_summarize", None))
        ):
            raise TypeError("summarizer must be callable or have an async_summarize method")
        self._estimator = estimator if estimator is not None else TokenEstimator()
        self._summarizer = summarizer
        self._store = store if store is not None else InMemoryStore()
        self._keep_evicted = bool(keep_evicted)

    # ------------------------------------------------------------------ properties
    @property
    def max_tokens(self) -> int:
        """Token budget of a conversation."""
        return self._max_tokens

    @property
    def summarize_threshold(self) -> int:
        """Eviction only happens above this total (and above ``max_tokens``)."""
        return self._summarize_threshold

    @property
    def store(self) -> Any:
        """The store conversations are persisted in."""
        return self._store

    @property
    def estimator(self) -> TokenEstimator:
        """The token estimator."""
        return self._estimator

    @property
    def keep_evicted(self) -> bool:
        """Whether evicted turns are archived instead of deleted."""
        return self._keep_evicted

    @property
    def conversation_ids(self) -> list[str]:
        """Ids of the stored conversations, in creation order (reads the store)."""
        return self._drive(self._read(self._ids_tx))

    def __repr__(self) -> str:
        return (
            f"ConversationMemory(max_tokens={self._max_tokens}, "
            f"summarize_threshold={self._summarize_threshold}, "
            f"summarizer={'set' if self._summarizer is not None else None}, "
            f"keep_evicted={self._keep_evicted}, store={self._store!r})"
        )

    # ------------------------------------------------------------------ sync API
    def new_conversation(self) -> str:
        """Create an empty conversation and return its id (32 hex characters)."""
        return self._drive(self._new_op())

    def add_turn(
        self,
        conversation_id: str,
        user_prompt: str,
        assistant_response: str,
        raw_messages: Sequence[Any] | None = None,
        *,
        metadata: Mapping[str, Any] | None = None,
    ) -> ConversationTurn:
        """Add a turn (creating the conversation if needed), evicting as needed.

        Returns:
            The stored turn, with its ``turn_id`` and ``token_estimate``.

        Raises:
            EntryValidationError: A bad id, prompt, response or metadata.
            TypeError: ``raw_messages`` cannot be stored (nothing is written).
            ConcurrencyError: Too much contention on this conversation.
        """
        return self._drive(
            self._append_op(
                self._append_request(
                    conversation_id, user_prompt, assistant_response, raw_messages, metadata
                )
            )
        )

    def get_message_history(self, conversation_id: str) -> list[Any]:
        """The raw messages of the newest contiguous turns fitting ``max_tokens``.

        Walks from the newest turn back and stops at the first turn that does not
        fit, then flattens the kept turns' ``raw_messages`` in chronological
        order.  Unknown id -> ``[]``.  A newest turn larger than the budget gives
        ``[]`` (kept from the module this is modelled on).  The summary is not
        injected; read it with :meth:`get_summary`.
        """
        return self._drive(self._read(self._history_tx, _check_conversation_id(conversation_id)))

    def get_turns(self, conversation_id: str) -> list[ConversationTurn]:
        """Every retained turn, oldest first (unknown id -> ``[]``)."""
        cid = _check_conversation_id(conversation_id)
        return self._drive(self._read(self._turns_tx, conversation_namespace(cid)))

    def get_archived_turns(self, conversation_id: str) -> list[ConversationTurn]:
        """Turns evicted while ``keep_evicted`` was on, oldest first."""
        cid = _check_conversation_id(conversation_id)
        return self._drive(self._read(self._turns_tx, archive_namespace(cid)))

    def get_total_tokens(self, conversation_id: str) -> int:
        """Sum of the retained turns' token estimates (unknown id -> 0)."""
        cid = _check_conversation_id(conversation_id)
        return self._head(cid).total_tokens

    def get_summary(self, conversation_id: str) -> str | None:
        """The summary of the evicted turns, or ``None``."""
        cid = _check_conversation_id(conversation_id)
        return self._head(cid).summary

    def clear(self, conversation_id: str) -> None:
        """Forget a conversation: turns, archive, summary, head and index row."""
        cid = _check_conversation_id(conversation_id)
        self._drive(self._single(self._clear_tx, [cid]))

    def clear_all(self) -> None:
        """Forget every conversation of the store."""
        self._drive(self._single(self._clear_tx, None))

    def export_conversation(self, conversation_id: str) -> dict[str, Any]:
        """Export a conversation as a JSON-ready dict.

        Shape: ``{"conversation_id", "turns": [{"turn_id", "user_prompt",
        "assistant_response", "token_estimate", "metadata", "timestamp"}, ...],
        "summary", "total_tokens"}``.  A turn with raw messages also has a
        ``"raw_messages"`` key holding their portable JSON form, which
        :meth:`import_conversation` turns back into ``ModelMessage`` objects.
        Unknown id -> the same shape with no turns.
        """
        cid = _check_conversation_id(conversation_id)
        return self._drive(self._read(self._export_tx, cid))

    def import_conversation(
        self, data: Mapping[str, Any], *, conversation_id: str | None = None
    ) -> str:
        """Import a dict from :meth:`export_conversation`; return the conversation id.

        The id is ``conversation_id`` if given, else ``data["conversation_id"]``,
        else a new one.  The imported turns REPLACE the conversation's turns (and
        archive); the summary is replaced only when the import has one.  Missing
        turn fields default; ``turn_id`` defaults to the position, and ids that
        are not strictly increasing non-negative integers are renumbered
        0, 1, ... (a warning is logged).  A ``token_estimate <= 0`` is
        re-estimated.  No eviction happens on import; the next :meth:`add_turn`
        trims the conversation to the budget.
        """
        cid, turns, summary = self._prepare_import(data, conversation_id)
        return self._drive(self._import_op(cid, turns, summary))

    # ------------------------------------------------------------------ async API
    async def async_new_conversation(self) -> str:
        """Async twin of :meth:`new_conversation`."""
        return await self._adrive(self._new_op())

    async def async_add_turn(
        self,
        conversation_id: str,
        user_prompt: str,
        assistant_response: str,
        raw_messages: Sequence[Any] | None = None,
        *,
        metadata: Mapping[str, Any] | None = None,
    ) -> ConversationTurn:
        """Async twin of :meth:`add_turn` (an async summarizer is awaited; a sync one
        runs in a worker thread so the event loop is not blocked)."""
        return await self._adrive(
            self._append_op(
                self._append_request(
                    conversation_id, user_prompt, assistant_response, raw_messages, metadata
                )
            )
        )

    async def async_get_message_history(self, conversation_id: str) -> list[Any]:
        """Async twin of :meth:`get_message_history`."""
        cid = _check_conversation_id(conversation_id)
        return await self._adrive(self._read(self._history_tx, cid))

    async def async_get_turns(self, conversation_id: str) -> list[ConversationTurn]:
        """Async twin of :meth:`get_turns`."""
        cid = _check_conversation_id(conversation_id)
        return await self._adrive(self._read(self._turns_tx, conversation_namespace(cid)))

    async def async_get_archived_turns(self, conversation_id: str) -> list[ConversationTurn]:
        """Async twin of :meth:`get_archived_turns`."""
        cid = _check_conversation_id(conversation_id)
        return await self._adrive(self._read(self._turns_tx, archive_namespace(cid)))

    async def async_get_total_tokens(self, conversation_id: str) -> int:
        """Async twin of :meth:`get_total_tokens`."""
        cid = _check_conversation_id(conversation_id)
        return (await self._async_head(cid)).total_tokens

    async def async_get_summary(self, conversation_id: str) -> str | None:
        """Async twin of :meth:`get_summary`."""
        cid = _check_conversation_id(conversation_id)
        return (await self._async_head(cid)).summary

    async def async_clear(self, conversation_id: str) -> None:
        """Async twin of :meth:`clear`."""
        cid = _check_conversation_id(conversation_id)
        await self._adrive(self._single(self._clear_tx, [cid]))

    async def async_clear_all(self) -> None:
        """Async twin of :meth:`clear_all`."""
        await self._adrive(self._single(self._clear_tx, None))

    async def async_conversation_ids(self) -> list[str]:
        """Async twin of :attr:`conversation_ids`."""
        return await self._adrive(self._read(self._ids_tx))

    async def async_export_conversation(self, conversation_id: str) -> dict[str, Any]:
        """Async twin of :meth:`export_conversation`."""
        cid = _check_conversation_id(conversation_id)
        return await self._adrive(self._read(self._export_tx, cid))

    async def async_import_conversation(
        self, data: Mapping[str, Any], *, conversation_id: str | None = None
    ) -> str:
        """Async twin of :meth:`import_conversation`."""
        cid, turns, summary = self._prepare_import(data, conversation_id)
        return await self._adrive(self._import_op(cid, turns, summary))

    def _head(self, cid: str) -> HeadState:
        return cast(HeadState, self._drive(self._read(self._head_tx, cid)))

    async def _async_head(self, cid: str) -> HeadState:
        return cast(HeadState, await self._adrive(self._read(self._head_tx, cid)))

    # ------------------------------------------------------------------ drivers
    # Every operation is a generator of steps (_Tx / _Summarize / _Sleep) written
    # once; _drive performs the steps synchronously, _adrive asynchronously (units
    # of work through ``await uow.run_sync``, so SQL stores use their async driver).

    def _drive(self, op: _Op[T]) -> T:
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = op.throw(error) if error is not None else op.send(value)
            except StopIteration as stop:
                return cast(T, stop.value)
            value, error = None, None
            try:
                if isinstance(step, _Tx):
                    with unit_of_work_for(self._store, read_only=step.read_only) as uow:
                        result = step.fn(uow, *step.args)
                        if result.commit:
                            uow.commit()
                    value = result.value
                elif isinstance(step, _Summarize):
                    value = self._summarize_sync(step.turns)
                else:
                    time.sleep(step.seconds)
            except Exception as exc:
                error = exc

    async def _adrive(self, op: _Op[T]) -> T:
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = op.throw(error) if error is not None else op.send(value)
            except StopIteration as stop:
                return cast(T, stop.value)
            value, error = None, None
            try:
                if isinstance(step, _Tx):
                    async with async_unit_of_work_for(self._store, read_only=step.read_only) as uow:
                        result = await uow.run_sync(step.fn, *step.args)
                        if result.commit:
                            await uow.commit()
                    value = result.value
                elif isinstance(step, _Summarize):
                    value = await self._summarize_async(step.turns)
                else:
                    await asyncio.sleep(step.seconds)
            except Exception as exc:
                error = exc

    @staticmethod
    def _single(fn: Callable[..., _TxResult], *args: Any) -> _Op[Any]:
        value = yield _Tx(fn, args)
        return value

    @staticmethod
    def _read(fn: Callable[..., _TxResult], *args: Any) -> _Op[Any]:
        """A one-step read: a read-only unit of work (readers don't queue behind writers)."""
        value = yield _Tx(fn, args, read_only=True)
        return value

    def _summarize_sync(self, turns: list[ConversationTurn]) -> str:
        summarizer: Any = self._summarizer
        if callable(summarizer) and not _is_coroutine_callable(summarizer):
            result = summarizer(turns)
        elif callable(getattr(summarizer, "async_summarize", None)):
            result = summarizer.async_summarize(turns)
        else:
            result = summarizer(turns)
        if inspect.isawaitable(result):
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                result = asyncio.run(_await_it(result))
            else:
                if inspect.iscoroutine(result):
                    result.close()
                raise RuntimeError(
                    "the summarizer is async and an event loop is running in this thread: "
                    "use async_add_turn (nothing was written)"
                )
        return _checked_summary(result)

    async def _summarize_async(self, turns: list[ConversationTurn]) -> str:
        summarizer: Any = self._summarizer
        if callable(getattr(summarizer, "async_summarize", None)):
            result = await summarizer.async_summarize(turns)
        elif _is_coroutine_callable(summarizer):
            result = await summarizer(turns)
        else:
            result = await asyncio.to_thread(summarizer, turns)
            if inspect.isawaitable(result):
                result = await result
        return _checked_summary(result)

    # ------------------------------------------------------------------ operations
    def _append_request(
        self,
        conversation_id: Any,
        user_prompt: Any,
        assistant_response: Any,
        raw_messages: Any,
        metadata: Any,
    ) -> _AppendRequest:
        cid = _check_conversation_id(conversation_id)
        prompt = _check_text("user_prompt", user_prompt)
        response = _check_text("assistant_response", assistant_response)
        meta = _check_metadata(metadata)
        encoded = encode_raw_messages(raw_messages)
        turn = ConversationTurn(
            user_prompt=prompt,
            assistant_response=response,
            raw_messages=list(raw_messages or []),
            token_estimate=self._estimate(prompt, response),
            metadata=meta,
        )
        return _AppendRequest(cid, turn, encoded)

    def _estimate(self, user_prompt: str, assistant_response: str) -> int:
        return int(self._estimator.estimate(f"{user_prompt}\n{assistant_response}"))

    def _new_op(self) -> _Op[str]:
        cid = uuid.uuid4().hex
        yield from self._retrying(self._new_tx, cid)
        return cid

    def _append_op(self, request: _AppendRequest) -> _Op[ConversationTurn]:
        prepared: _PreparedSummary | None = None
        for attempt in range(_MAX_ATTEMPTS):
            try:
                outcome = yield _Tx(self._append_tx, (request, prepared))
            except ConcurrencyError:
                yield _Sleep(_backoff(attempt))
                continue
            if isinstance(outcome, _NeedsSummary):
                summary = yield _Summarize(outcome.turns)
                prepared = _PreparedSummary(outcome.head_version, outcome.evicted_turn_ids, summary)
                continue
            return cast(ConversationTurn, outcome)
        raise ConcurrencyError(
            f"could not add a turn to conversation {request.conversation_id!r} after "
            f"{_MAX_ATTEMPTS} attempts (too many concurrent writers)"
        )

    def _import_op(self, cid: str, turns: list[_ImportedTurn], summary: str | None) -> _Op[str]:
        yield from self._retrying(self._import_tx, cid, turns, summary)
        return cid

    def _retrying(self, fn: Callable[..., _TxResult], *args: Any) -> _Op[Any]:
        for attempt in range(_MAX_ATTEMPTS):
            try:
                value = yield _Tx(fn, args)
            except ConcurrencyError:
                if attempt + 1 == _MAX_ATTEMPTS:
                    raise
                yield _Sleep(_backoff(attempt))
                continue
            return value
        raise AssertionError("unreachable")  # pragma: no cover

    # ------------------------------------------------------------------ transactions
    # Each takes the sync unit of work first (``uow.run_sync`` passes it).

    def _new_tx(self, uow: UnitOfWork, cid: str) -> _TxResult:
        namespace = conversation_namespace(cid)
        head = _head_entry(cid, None, next_turn_id=0, total_tokens=0, turn_count=0, summary=None)
        uow.entries.save(namespace, head, expected_version=0)
        uow.entries.save(INDEX_NAMESPACE, _index_entry(cid))
        return _TxResult(cid, commit=True)

    def _append_tx(
        self, uow: UnitOfWork, request: _AppendRequest, prepared: _PreparedSummary | None
    ) -> _TxResult:
        cid = request.conversation_id
        namespace = conversation_namespace(cid)
        head_entry = uow.entries.get_by_key(namespace, HEAD_KEY, for_update=True)
        head = _head_from_entry(head_entry)
        if head.next_turn_id > MAX_TURN_ID:
            raise EntryValidationError("turn_id", f"conversation {cid!r} has run out of turn ids")
        reader = _OldestTurnsReader(uow, namespace)
        plan = plan_append(
            head,
            request.turn,
            reader,
            self._max_tokens,
            self._summarize_threshold,
            has_summarizer=self._summarizer is not None,
        )
        summary = head.summary
        if plan.summarize:
            if (
                prepared is None
                or prepared.head_version != head.version
                or prepared.evicted_turn_ids != plan.evicted_turn_ids
            ):
                return _TxResult(
                    _NeedsSummary(
                        head.version,
                        plan.evicted_turn_ids,
                        summary_input(head.summary, plan.evicted_turns),
                    )
                )
            summary = prepared.summary
        uow.entries.save(namespace, _turn_entry(namespace, plan.turn, request.encoded_raw))
        if plan.evicted_turn_ids:
            if self._keep_evicted:
                archive = archive_namespace(cid)
                for turn_id in plan.evicted_turn_ids:
                    stored = reader.entries[turn_id]
                    turn = _turn_from_entry(stored, with_raw=False)
                    uow.entries.save(archive, _turn_entry(archive, turn, _stored_raw(stored)))
            uow.entries.delete(
                namespace, [reader.entries[i].entry_id for i in plan.evicted_turn_ids]
            )
        uow.entries.save(
            namespace,
            _head_entry(
                cid,
                head_entry,
                next_turn_id=plan.next_turn_id,
                total_tokens=plan.total_tokens,
                turn_count=plan.turn_count,
                summary=summary,
            ),
            expected_version=head.version,
        )
        if head_entry is None:
            uow.entries.save(INDEX_NAMESPACE, _index_entry(cid))
        return _TxResult(plan.turn, commit=True)

    def _head_tx(self, uow: UnitOfWork, cid: str) -> _TxResult:
        return _TxResult(
            _head_from_entry(uow.entries.get_by_key(conversation_namespace(cid), HEAD_KEY))
        )

    def _turns_tx(self, uow: UnitOfWork, namespace: str) -> _TxResult:
        rows = uow.entries.list(namespace, key_prefix=TURN_KEY_PREFIX)
        return _TxResult([_turn_from_entry(e) for e in rows])

    def _history_tx(self, uow: UnitOfWork, cid: str) -> _TxResult:
        namespace = conversation_namespace(cid)
        # Only the turns' contents are needed: stores that can return just the
        # content column (SQL) skip building entries (the hot read path).
        list_contents = getattr(uow.entries, "list_contents", None)
        batch = 4 * _FIRST_BATCH
        while True:
            contents: list[Any]
            if list_contents is not None:
                contents = list_contents(
                    namespace, key_prefix=TURN_KEY_PREFIX, limit=batch, newest_first=True
                )
            else:
                contents = [
                    row.content
                    for row in uow.entries.list(
                        namespace, key_prefix=TURN_KEY_PREFIX, limit=batch, newest_first=True
                    )
                ]
            estimates: list[int] = []
            for content in contents:
                try:
                    estimates.append(int(content["token_estimate"]))
                except (KeyError, TypeError, ValueError) as exc:
                    raise StoreCorruptedError(f"unreadable turn in {namespace!r}: {exc}") from exc
            count, stopped = _fitting_count(estimates, self._max_tokens)
            if stopped or len(contents) < batch:
                break
            batch *= 4
        messages: list[Any] = []
        for content in reversed(contents[:count]):
            messages.extend(decode_raw_messages(content.get("raw_messages")))
        return _TxResult(messages)

    def _ids_tx(self, uow: UnitOfWork) -> _TxResult:
        rows = uow.entries.list(INDEX_NAMESPACE)
        return _TxResult([row.key for row in rows if row.key is not None])

    def _clear_tx(self, uow: UnitOfWork, cids: list[str] | None) -> _TxResult:
        everything = cids is None
        if cids is None:
            cids = [row.key for row in uow.entries.list(INDEX_NAMESPACE) if row.key is not None]
        for cid in cids:
            uow.entries.clear(conversation_namespace(cid))
            uow.entries.clear(archive_namespace(cid))
        if everything:
            uow.entries.clear(INDEX_NAMESPACE)
        else:
            uow.entries.delete(
                INDEX_NAMESPACE, [derived_entry_id(INDEX_NAMESPACE, c) for c in cids]
            )
        return _TxResult(None, commit=True)

    def _export_tx(self, uow: UnitOfWork, cid: str) -> _TxResult:
        namespace = conversation_namespace(cid)
        head = _head_from_entry(uow.entries.get_by_key(namespace, HEAD_KEY))
        rows = uow.entries.list(namespace, key_prefix=TURN_KEY_PREFIX)
        turns: list[dict[str, Any]] = []
        for row in rows:
            turn = _turn_from_entry(row, with_raw=False)
            item: dict[str, Any] = {
                "turn_id": turn.turn_id,
                "user_prompt": turn.user_prompt,
                "assistant_response": turn.assistant_response,
                "token_estimate": turn.token_estimate,
                "metadata": turn.metadata,
                "timestamp": turn.timestamp.isoformat(),
            }
            raw = _stored_raw(row)
            if raw:
                item["raw_messages"] = json.loads(json.dumps(raw))
            turns.append(item)
        return _TxResult(
            {
                "conversation_id": cid,
                "turns": turns,
                "summary": head.summary,
                "total_tokens": sum(t["token_estimate"] for t in turns),
            }
        )

    def _import_tx(
        self, uow: UnitOfWork, cid: str, turns: list[_ImportedTurn], summary: str | None
    ) -> _TxResult:
        namespace = conversation_namespace(cid)
        head_entry = uow.entries.get_by_key(namespace, HEAD_KEY, for_update=True)
        head = _head_from_entry(head_entry)
        old = uow.entries.list(namespace, key_prefix=TURN_KEY_PREFIX)
        if old:
            uow.entries.delete(namespace, [row.entry_id for row in old])
        uow.entries.clear(archive_namespace(cid))
        for item in turns:
            uow.entries.save(namespace, _turn_entry(namespace, item.turn, item.encoded_raw))
        uow.entries.save(
            namespace,
            _head_entry(
                cid,
                head_entry,
                next_turn_id=turns[-1].turn.turn_id + 1 if turns else 0,
                total_tokens=sum(t.turn.token_estimate for t in turns),
                turn_count=len(turns),
                summary=summary if summary else head.summary,
            ),
            expected_version=head.version,
        )
        if head_entry is None:
            uow.entries.save(INDEX_NAMESPACE, _index_entry(cid))
        return _TxResult(cid, commit=True)

    # ------------------------------------------------------------------ import parsing
    def _prepare_import(
        self, data: Any, conversation_id: Any
    ) -> tuple[str, list[_ImportedTurn], str | None]:
        if not isinstance(data, Mapping):
            raise EntryValidationError("data", f"must be a dict, got {type(data).__name__}")
        cid = conversation_id or data.get("conversation_id") or uuid.uuid4().hex
        cid = _check_conversation_id(cid)
        summary = data.get("summary")
        if summary is not None and not isinstance(summary, str):
            raise EntryValidationError("summary", "must be a str or None")
        raw_turns = data.get("turns") or []
        if not isinstance(raw_turns, list | tuple):
            raise EntryValidationError("turns", "must be a list")
        turns: list[_ImportedTurn] = []
        for position, item in enumerate(raw_turns):
            if not isinstance(item, Mapping):
                raise EntryValidationError("turns", f"turn {position} must be a dict")
            prompt = _check_text("user_prompt", item.get("user_prompt") or "")
            response = _check_text("assistant_response", item.get("assistant_response") or "")
            turn_id = item.get("turn_id", position)
            estimate = item.get("token_estimate") or 0
            if isinstance(estimate, bool) or not isinstance(estimate, int):
                raise EntryValidationError("token_estimate", "must be an integer")
            if estimate <= 0:
                estimate = self._estimate(prompt, response)
            raw = item.get("raw_messages")
            try:
                encoded = (
                    _check_encoded(raw) if isinstance(raw, Mapping) else encode_raw_messages(raw)
                )
            except TypeError as exc:
                raise EntryValidationError("raw_messages", str(exc)) from None
            timestamp = item.get("timestamp")
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
            turn = ConversationTurn(
                turn_id=turn_id
                if isinstance(turn_id, int) and not isinstance(turn_id, bool)
                else -1,
                user_prompt=prompt,
                assistant_response=response,
                raw_messages=[],
                timestamp=when,
                token_estimate=estimate,
                metadata=_check_metadata(item.get("metadata")),
            )
            turns.append(_ImportedTurn(turn, encoded))
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
                _ImportedTurn(t.turn.model_copy(update={"turn_id": n}), t.encoded_raw)
                for n, t in enumerate(turns)
            ]
        return cid, turns, summary
