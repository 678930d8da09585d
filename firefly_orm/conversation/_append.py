"""The add-turn machine's parts: what adding a turn obeys, hands in and gets back; the general path.

:func:`~firefly_orm.conversation._ops.add_turn` (the operation) and
:func:`~firefly_orm.conversation._ops.append_turn` (its transaction, which first
tries the store's one-statement append) are in :mod:`~firefly_orm.conversation._ops`;
this module holds what they run on:

* the inputs and results: :class:`Policy` (limits, archiving, promotion, and
  :class:`AppendHints`, the totals conversations were left with),
  :class:`EncodedTurn`, :class:`Appended`;
* the summary hand-off: :class:`SummaryNeeded` (raised to roll back and ask for
  a summary or promotion scores of the turns to evict),
  :class:`PreparedSummary`, and the operations that make one (:func:`prepare`,
  :func:`summarize`);
* the general path (:func:`append_general`): the head read ``for_update``, the
  owner check, an idempotency key's replay or marker
  (:mod:`~firefly_orm.conversation._idempotency`), the plan
  (:func:`~firefly_orm.conversation._plan.plan_append` over the oldest turns,
  read by :class:`OldestTurnsReader`), the eviction (archived or deleted), the
  summary, the promoted items and the head saved back at the version read
  (:func:`save_head`).

Internal: import these names from :mod:`firefly_orm.conversation._ops`, which
re-exports them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from firefly_orm._layout import NO_MESSAGE_CAP, token_caps, within_caps
from firefly_orm.bridges._steps import CallOut, Operation, is_coroutine_callable
from firefly_orm.conversation._idempotency import marker_entry, replayed_turn
from firefly_orm.conversation._model import AsyncSummarizer, ConversationTurn, Summarizer
from firefly_orm.conversation._owner import claim
from firefly_orm.conversation._plan import (
    AppendPlan,
    HeadState,
    Limits,
    plan_append,
    summary_input,
)
from firefly_orm.conversation._policies import PromotionPolicy
from firefly_orm.conversation._rows import (
    HEAD_KEY,
    INDEX_NAMESPACE,
    MAX_TURN_ID,
    TURN_KEY_PREFIX,
    archive_namespace,
    archived_turn_entry,
    conversation_namespace,
    head_entry,
    head_from_entry,
    index_entry,
    turn_entry,
    turn_from_entry,
    turn_message_count,
)
from firefly_orm.conversation._search import save_turn_vector
from firefly_orm.entry import MemoryEntry
from firefly_orm.errors import ConcurrencyError, EntryValidationError
from firefly_orm.protocols import UnitOfWork
from firefly_orm.vector._spec import ModelVector

__all__ = [
    "AppendHints",
    "Appended",
    "EncodedTurn",
    "OldestTurnsReader",
    "Policy",
    "PreparedSummary",
    "SummaryNeeded",
    "append_general",
    "eviction_caps",
    "move_head",
    "no_eviction_needed",
    "prepare",
    "save_head",
    "save_totals",
    "summarize",
]


class AppendHints:
    """The totals each recently written conversation was left with (in this process).

    Only a hint: it decides whether :func:`append_turn` first tries the
    one-statement append (pointless when the turn will evict), never what is
    written.  Another process's writes make it stale, which costs at most one
    statement that writes nothing, or one general-path turn.  Bounded: the
    least recently written conversations are forgotten first.
    """

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._totals: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self._lock = threading.Lock()

    def record(self, conversation_id: str, total_tokens: int, total_messages: int) -> None:
        """``conversation_id`` now holds these totals."""
        with self._lock:
            self._totals[conversation_id] = (total_tokens, total_messages)
            self._totals.move_to_end(conversation_id)
            if len(self._totals) > self._size:
                self._totals.popitem(last=False)

    def fits(self, conversation_id: str, tokens: int, messages: int, limits: Limits) -> bool:
        """Whether a turn of ``tokens`` / ``messages`` likely needs no eviction (unknown: yes)."""
        totals = self._totals.get(conversation_id)
        if totals is None:
            return True
        return no_eviction_needed(totals[0] + tokens, totals[1] + messages, limits)


def no_eviction_needed(total_tokens: int, total_messages: int, limits: Limits) -> bool:
    """Whether a conversation at these totals (the new turn in) stays within ``limits``.

    The planner's trigger (:func:`~firefly_orm.conversation._plan.plan_append`)
    in reverse: tokens evict above the trigger of :func:`~firefly_orm._layout.token_caps`.
    """
    return all(within_caps(total_tokens, total_messages, *eviction_caps(limits)))


def eviction_caps(limits: Limits) -> tuple[int, int]:
    """The token and message caps of :func:`~firefly_orm._layout.within_caps` for ``limits``."""
    messages = NO_MESSAGE_CAP if limits.max_messages is None else limits.max_messages
    trigger, _ = token_caps(limits.max_tokens, limits.summarize_threshold)
    return trigger, messages


@dataclass(frozen=True)
class Policy:
    """What adding a turn obeys: the limits (:class:`~firefly_orm.conversation._plan.Limits`),
    whether evicted turns are archived, whether they are promoted to long-term memory,
    and whether new turn rows carry their ``search_text`` (``text_search``).

    ``hints``: the totals recently written conversations were left with
    (:class:`AppendHints`; a memory's own, not part of what the policy says).
    """

    limits: Limits
    keep_evicted: bool
    promotion: PromotionPolicy | None = None
    text_search: bool = True
    hints: AppendHints = field(default_factory=AppendHints, compare=False, repr=False)

    @property
    def max_tokens(self) -> int | None:
        """The token budget (``None``: no token limit)."""
        return self.limits.max_tokens

    @property
    def summarize_threshold(self) -> int | None:
        """Token eviction starts above this total (``None``: no threshold)."""
        return self.limits.summarize_threshold


@dataclass(frozen=True)
class EncodedTurn:
    """A turn to store, with its raw messages already in their portable form.

    ``message_tokens``: one token estimate per raw message (``None`` without
    them); ``user_id``: the owner a new conversation gets (an existing one must
    belong to that user); ``idempotency_key`` / ``fingerprint``: see
    :mod:`firefly_orm.conversation._idempotency`.  ``replaces``: the newest
    stored turn (as read in the same unit of work) that this turn replaces,
    keeping its ``turn_id`` (a turn grown by more messages,
    :mod:`firefly_orm.conversation._batch`); ``None``: a new turn.
    ``base_version``: the head version the turn was built on (``None``: any);
    another raises ``ConcurrencyError`` (a concurrent writer got there first).
    ``vector``: the turn's vector, made before the unit of work opened
    (:mod:`firefly_orm.conversation._search`), stored with the turn.
    """

    turn: ConversationTurn
    encoded_raw: dict[str, Any] | None
    message_tokens: list[int] | None = None
    user_id: str | None = None
    idempotency_key: str | None = None
    fingerprint: str | None = None
    replaces: ConversationTurn | None = None
    base_version: int | None = None
    vector: ModelVector | None = None


@dataclass(frozen=True)
class Appended:
    """What :func:`add_turn` did: the stored turn, the plan, the new summary if one was
    made, and the ids of the long-term items evicted turns were promoted to.

    ``plan`` is ``None`` when the turn had already been added under its
    idempotency key (nothing was written: ``turn`` is the stored one).
    """

    turn: ConversationTurn
    plan: AppendPlan | None
    new_summary: str | None
    promoted_ids: tuple[str, ...] = ()


class SummaryNeeded(Exception):
    """Raised by :func:`append_turn` to roll back and ask for work on the evicted turns first.

    The summary (when ``summarize``) is to cover ``previous_summary`` and
    ``evicted_turns`` (the summarizer gets :attr:`turns`); the promotion
    scores (when ``score``) rate ``evicted_turns``.
    """

    def __init__(
        self,
        previous_summary: str | None,
        evicted_turns: tuple[ConversationTurn, ...],
        *,
        summarize: bool = True,
        score: bool = False,
    ) -> None:
        super().__init__("a summary (or promotion scores) of the evicted turns is needed")
        self.previous_summary = previous_summary
        self.evicted_turns = evicted_turns
        self.summarize = summarize
        self.score = score

    @property
    def turns(self) -> list[ConversationTurn]:
        """The summarizer's input (:func:`summary_input`)."""
        return summary_input(self.previous_summary, self.evicted_turns)

    def prepared(
        self, summary: str | None, scores: tuple[float, ...] | None = None
    ) -> PreparedSummary:
        """``summary`` and ``scores``, made for this need."""
        return PreparedSummary(self.previous_summary, self.evicted_turns, summary, scores)


@dataclass(frozen=True)
class PreparedSummary:
    """A summary made of ``previous_summary`` and ``evicted_turns``, and their promotion scores.

    It serves any plan with the same previous summary and the same turns to
    evict, whatever the head's version (a concurrent write that changed neither
    does not make it stale).  ``summary`` / ``scores`` are ``None`` when they
    were not needed.
    """

    previous_summary: str | None
    evicted_turns: tuple[ConversationTurn, ...]
    summary: str | None
    scores: tuple[float, ...] | None = None

    def fits(
        self, previous_summary: str | None, evicted_turns: tuple[ConversationTurn, ...]
    ) -> bool:
        """Whether this was made of exactly ``previous_summary`` and ``evicted_turns``."""
        return (self.previous_summary, self.evicted_turns) == (previous_summary, evicted_turns)

    def serves(
        self,
        previous_summary: str | None,
        evicted_turns: tuple[ConversationTurn, ...],
        *,
        summarize: bool,
        score: bool,
    ) -> bool:
        """Whether it :meth:`fits` and holds what a plan needs (a summary, scores)."""
        return (
            self.fits(previous_summary, evicted_turns)
            and (not summarize or self.summary is not None)
            and (not score or self.scores is not None)
        )


def prepare(
    needed: SummaryNeeded, summarizer: Summarizer | None, promotion: PromotionPolicy | None
) -> Operation[PreparedSummary]:
    """Make what ``needed`` asks for: the summary, then the promotion scores."""
    summary: str | None = None
    scores: tuple[float, ...] | None = None
    if needed.summarize:
        if summarizer is None:  # pragma: no cover - plans ask only when there is one
            raise needed
        summary = yield from summarize(summarizer, needed.turns)
    if needed.score:
        if promotion is None:  # pragma: no cover - asked only with a promotion
            raise needed
        scores = yield from promotion.score(needed.evicted_turns)
    return needed.prepared(summary, scores)


def summarize(summarizer: Summarizer, turns: list[ConversationTurn]) -> Operation[str]:
    """Call the summarizer (its async form from async code) and check it gave a str.

    From sync code a plain callable is called; an async one (or an object with
    only ``async_summarize``) runs on the shared event-loop thread, unless an
    event loop runs in the calling thread (then ``RuntimeError``: use
    ``async_add_turn``).  From async code ``async_summarize`` or an async
    callable is awaited and a sync callable runs in a worker thread.
    """
    async_form = summarizer.async_summarize if isinstance(summarizer, AsyncSummarizer) else None
    sync_form: Any = summarizer
    if not callable(summarizer) or is_coroutine_callable(summarizer):
        sync_form = async_form if async_form is not None else summarizer
    result = yield from CallOut[Any](
        sync_form,
        (turns,),
        async_fn=async_form,
        what="the summarizer",
        use_instead="async_add_turn (nothing was written)",
    )
    if not isinstance(result, str):
        raise TypeError(f"the summarizer must return a str, got {type(result).__name__}")
    return result


@dataclass
class OldestTurnsReader:
    """Reads the oldest turns of a conversation through a unit of work (for the planner)."""

    uow: UnitOfWork
    namespace: str
    entries: dict[int, MemoryEntry] = field(default_factory=dict)

    def __call__(self, n: int) -> list[ConversationTurn]:
        rows = self.uow.entries.list(self.namespace, key_prefix=TURN_KEY_PREFIX, limit=n)
        turns = [turn_from_entry(e) for e in rows]
        for entry, turn in zip(rows, turns, strict=True):
            self.entries[turn.turn_id] = entry
        return turns


def append_general(
    uow: UnitOfWork,
    conversation_id: str,
    new_turn: EncodedTurn,
    policy: Policy,
    has_summarizer: bool,
    prepared: PreparedSummary | None,
) -> Appended:
    """:func:`~firefly_orm.conversation._ops.append_turn`'s general path: read the head
    ``for_update``, plan, insert the turn, evict (archive), write the summary, the
    idempotency marker, the promoted items and the head; return what was done.

    Raises :class:`SummaryNeeded` when the plan needs a summary (or promotion
    scores) that ``prepared`` does not hold (the unit of work then rolls back),
    and :class:`~firefly_orm.errors.ConversationNotFoundError` when the
    conversation belongs to another user than ``new_turn.user_id`` (the error a
    missing conversation gives a reader, so ids cannot be probed).
    """
    namespace = conversation_namespace(conversation_id)
    stored_head = uow.entries.get_by_key(namespace, HEAD_KEY, for_update=True)
    head = head_from_entry(stored_head)
    if head.next_turn_id > MAX_TURN_ID:
        raise EntryValidationError(
            "turn_id", f"conversation {conversation_id!r} has run out of turn ids"
        )
    owner = claim(stored_head, new_turn.user_id, conversation_id)
    if new_turn.base_version is not None and head.version != new_turn.base_version:
        raise ConcurrencyError(
            f"conversation {conversation_id!r} changed while its turn was built "
            f"(head at version {head.version}, built on {new_turn.base_version})"
        )
    key = new_turn.idempotency_key
    if key is not None and new_turn.fingerprint is not None:
        replayed = replayed_turn(uow, namespace, key, new_turn.fingerprint)
        if replayed is not None:
            return Appended(replayed, None, None)
    if head.total_messages is None and head.turn_count and policy.limits.max_messages:
        head = replace(head, total_messages=_count_messages(uow, namespace))
    if new_turn.replaces is not None:
        head = _without_newest(head, new_turn.replaces)
    known_messages = head.total_messages is not None or head.turn_count == 0
    reader = OldestTurnsReader(uow, namespace)
    plan = plan_append(head, new_turn.turn, reader, policy.limits, has_summarizer=has_summarizer)
    summary = head.summary
    new_summary: str | None = None
    promotion = policy.promotion
    score = promotion is not None and bool(plan.evicted_turn_ids)
    if plan.summarize or score:
        if prepared is None or not prepared.serves(
            head.summary, plan.evicted_turns, summarize=plan.summarize, score=score
        ):
            raise SummaryNeeded(
                head.summary, plan.evicted_turns, summarize=plan.summarize, score=score
            )
        if plan.summarize:
            summary = new_summary = prepared.summary
    uow.entries.save(
        namespace,
        turn_entry(
            namespace,
            plan.turn,
            new_turn.encoded_raw,
            new_turn.message_tokens,
            user_id=owner,
            text_search=policy.text_search,
        ),
    )
    if new_turn.vector is not None:
        save_turn_vector(uow, conversation_id, plan.turn.turn_id, new_turn.vector)
    if plan.evicted_turn_ids:
        evicted = [reader.entries[turn_id] for turn_id in plan.evicted_turn_ids]
        if policy.keep_evicted:
            archive = archive_namespace(conversation_id)
            for stored in evicted:
                turn = turn_from_entry(stored, with_raw=False)
                uow.entries.save(archive, archived_turn_entry(archive, stored, turn))
        uow.entries.delete(namespace, [stored.entry_id for stored in evicted])
    if key is not None and new_turn.fingerprint is not None:
        marker = marker_entry(namespace, key, plan.turn, new_turn.fingerprint, owner)
        # A plain upsert (it may replace an expired marker): racing writers of one key
        # are serialised by the head's versioned save below, so only one commits.
        uow.entries.save(namespace, marker)
    promoted: tuple[str, ...] = ()
    if score and promotion is not None and prepared is not None and prepared.scores is not None:
        promoted = promotion.store(uow, conversation_id, owner, plan.evicted_turns, prepared.scores)
    save_head(
        uow,
        conversation_id,
        stored_head,
        head,
        next_turn_id=plan.next_turn_id,
        total_tokens=plan.total_tokens,
        turn_count=plan.turn_count,
        summary=summary,
        total_messages=plan.total_messages if known_messages else None,
        user_id=owner,
    )
    if known_messages:
        policy.hints.record(conversation_id, plan.total_tokens, plan.total_messages)
    return Appended(plan.turn, plan, new_summary, promoted)


def _without_newest(head: HeadState, newest: ConversationTurn) -> HeadState:
    """The head as if its newest turn ``newest`` were not stored (it is being replaced).

    The plan then gives the replacement ``newest.turn_id`` and never evicts the
    stored row it overwrites (the newest turn is never evicted).
    """
    if head.next_turn_id != newest.turn_id + 1 or head.turn_count < 1:
        raise ConcurrencyError(f"turn {newest.turn_id} is no longer the newest turn")
    return replace(
        head,
        next_turn_id=newest.turn_id,
        total_tokens=max(head.total_tokens - newest.token_estimate, 0),
        turn_count=head.turn_count - 1,
        total_messages=(
            None
            if head.total_messages is None
            else max(head.total_messages - newest.message_count, 0)
        ),
    )


def _count_messages(uow: UnitOfWork, namespace: str) -> int:
    """The model messages of every stored turn (once, for a head written before they were kept)."""
    contents = uow.entries.list_contents(namespace, key_prefix=TURN_KEY_PREFIX)
    return sum(turn_message_count(c) for c in contents if isinstance(c, Mapping))


def save_head(
    uow: UnitOfWork,
    conversation_id: str,
    stored_head: MemoryEntry | None,
    head: HeadState,
    *,
    next_turn_id: int,
    total_tokens: int,
    turn_count: int,
    summary: str | None,
    total_messages: int | None = None,
    user_id: str | None = None,
) -> None:
    """Write the head back at the version read (and the index row of a new conversation).

    ``total_messages=None`` keeps what the head said; ``user_id`` owns a new conversation.
    """
    new_head = head_entry(
        conversation_id,
        stored_head,
        next_turn_id=next_turn_id,
        total_tokens=total_tokens,
        turn_count=turn_count,
        summary=summary,
        total_messages=head.total_messages if total_messages is None else total_messages,
        user_id=user_id,
    )
    uow.entries.save(
        conversation_namespace(conversation_id), new_head, expected_version=head.version
    )
    if stored_head is None:
        uow.entries.save(INDEX_NAMESPACE, index_entry(conversation_id, user_id))


def move_head(
    uow: UnitOfWork,
    conversation_id: str,
    stored_head: MemoryEntry,
    *,
    tokens: int,
    messages: int,
    turns: int,
) -> None:
    """Move the head's totals by these differences (never below zero), at the version read.

    An unknown message total (a head written before they were kept) stays unknown.
    """
    head = head_from_entry(stored_head)
    save_totals(
        uow,
        conversation_id,
        stored_head,
        head,
        total_tokens=max(head.total_tokens + tokens, 0),
        turn_count=max(head.turn_count + turns, 0),
        total_messages=(
            None if head.total_messages is None else max(head.total_messages + messages, 0)
        ),
    )


def save_totals(
    uow: UnitOfWork,
    conversation_id: str,
    stored_head: MemoryEntry,
    head: HeadState,
    *,
    total_tokens: int,
    turn_count: int,
    total_messages: int | None,
) -> None:
    """Write the head back at the version read with these totals (``total_messages=None``:
    as it was), its next turn id and summary unchanged."""
    save_head(
        uow,
        conversation_id,
        stored_head,
        head,
        next_turn_id=head.next_turn_id,
        total_tokens=total_tokens,
        turn_count=turn_count,
        summary=head.summary,
        total_messages=total_messages,
    )
