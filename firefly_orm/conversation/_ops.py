"""Conversation operations and the transactions they run (see :mod:`firefly_orm.bridges._steps`).

A *transaction* here is a plain sync function whose first argument is a unit
of work; an *operation* is a generator of steps that runs transactions, calls
the summarizer and backs off.  Both take the conversation id explicitly.
:class:`~firefly_orm.conversation.ConversationMemory` validates its inputs and
hands them to these; :func:`~firefly_orm.bridges._steps.run` /
:func:`~firefly_orm.bridges._steps.arun` perform them.

Adding a turn (:func:`add_turn`) is one unit of work: insert the turn, evict the
oldest turns, update the summary and the head, all or nothing.  Only the head
is read, plus the oldest turns in small batches when some must be evicted.
Every write re-reads the head (``for_update``) and saves it back with
``expected_version=<version read>``.

The summarizer runs outside the unit of work first (on SQLite a write
transaction blocks every other writer): when a plan needs a new summary the
transaction raises :class:`SummaryNeeded` (so it rolls back), the summarizer
runs, and the transaction is redone and applied only if the summarizer's input
(the previous summary and the turns to evict) is still the same; otherwise the
writer lost a race.  Lost races are retried within a
:class:`~firefly_orm.bridges._steps.RetryBudget`, then
:class:`~firefly_orm.errors.ConcurrencyError` is raised.  On stores whose
``for_update`` locks just the head row
(:func:`~firefly_orm.bridges._steps.locks_rows`: PostgreSQL), a writer that lost
a race does not race again: it locks the head and calls the summarizer while
holding the lock (:func:`append_turn_holding`), so the writers of that
conversation queue on the lock, each with at most one summary made in vain.

When the unit of work's repository offers ``append_turn`` (the SQL stores,
:func:`firefly_orm.sql._ops.append_turn`), a turn that needs no eviction is
first tried as ONE statement on PostgreSQL that bumps the head (its UPDATE
takes the head's row lock) and inserts the turn, as two on SQLite (the head's
``UPDATE ... RETURNING``, then the turn's ``INSERT``); when it writes
nothing (eviction needed, no head yet, another owner, an idempotency key...)
the general path above runs, unchanged.  :class:`AppendHints` remembers the
totals each conversation was left with, so a conversation that evicts on
every turn does not try the one statement first.

The parts of the machine (the policy, the encoded turn and its result, the
summary hand-off, the general path) are in the internal
:mod:`firefly_orm.conversation._append`; this module re-exports them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from firefly_orm.bridges._steps import (
    HoldingTransaction,
    HoldingWork,
    LocksRows,
    Operation,
    RetryBudget,
    Transaction,
    retrying,
)
from firefly_orm.conversation._append import (
    Appended,
    AppendHints,
    EncodedTurn,
    OldestTurnsReader,
    Policy,
    PreparedSummary,
    SummaryNeeded,
    append_general,
    eviction_caps,
    prepare,
    save_head,
    summarize,
)
from firefly_orm.conversation._append import no_eviction_needed as no_eviction_needed
from firefly_orm.conversation._branch import detach, unlink
from firefly_orm.conversation._model import ConversationTurn, Summarizer
from firefly_orm.conversation._owner import claim
from firefly_orm.conversation._plan import HeadState, plan_append
from firefly_orm.conversation._rows import (
    HEAD_KEY,
    INDEX_NAMESPACE,
    TURN_KEY_PREFIX,
    archive_namespace,
    conversation_namespace,
    empty_head_entry,
    head_from_content,
    head_from_entry,
    index_entry,
    turn_entry,
    turn_from_entry,
)
from firefly_orm.entry import derived_entry_id, validate_namespace
from firefly_orm.errors import ConcurrencyError
from firefly_orm.protocols import AppendedHead, TurnAppend, UnitOfWork
from firefly_orm.uow import optional_operations

__all__ = [
    "AppendHints",
    "EncodedTurn",
    "OldestTurnsReader",
    "Policy",
    "PreparedSummary",
    "SummaryNeeded",
    "Appended",
    "add_turn",
    "prepare",
    "append_turn",
    "append_turn_holding",
    "clear_conversations",
    "create_conversation",
    "new_conversation",
    "read_conversation_ids",
    "read_head",
    "read_turns",
    "replace_conversation",
    "summarize",
]


# =========================================================================== operations


def new_conversation(conversation_id: str, user_id: str | None = None) -> Operation[str]:
    """Create the empty conversation ``conversation_id`` owned by ``user_id``."""
    yield from retrying(Transaction.write(create_conversation, conversation_id, user_id))
    return conversation_id


def add_turn(
    conversation_id: str,
    new_turn: EncodedTurn,
    policy: Policy,
    summarizer: Summarizer | None,
) -> Operation[Appended]:
    """Add ``new_turn`` to ``conversation_id``, evicting (and summarising) as planned.

    The summarizer (and the promotion scorer) run outside the unit of work
    until this writer loses a race (a concurrent writer changed the head
    meanwhile); on stores that lock rows they then run under the head's lock
    (:func:`append_turn_holding`), so this writer waits in the database's lock
    queue instead of racing again.
    """
    prepared: PreparedSummary | None = None
    holding = False
    budget = RetryBudget()
    while True:
        try:
            if holding:
                return (
                    yield from HoldingTransaction.write(
                        append_turn_holding,
                        conversation_id=conversation_id,
                        new_turn=new_turn,
                        policy=policy,
                        summarizer=summarizer,
                        prepared=prepared,
                    )
                )
            return (
                yield from Transaction.write(
                    append_turn,
                    conversation_id=conversation_id,
                    new_turn=new_turn,
                    policy=policy,
                    has_summarizer=summarizer is not None,
                    prepared=prepared,
                )
            )
        except ConcurrencyError:
            if not budget.spend():
                break
            yield from budget.pause()
        except SummaryNeeded as needed:
            if prepared is not None:  # the summary made for this turn went stale: a lost race
                if not budget.spend():
                    break
                holding = yield from LocksRows()
                if holding:
                    continue  # summarise again, under the head's lock
            prepared = yield from prepare(needed, summarizer, policy.promotion)
    raise ConcurrencyError(
        f"could not add a turn to conversation {conversation_id!r} after "
        f"{budget.used} attempts (too many concurrent writers)"
    )


# =========================================================================== transactions
# Each takes the sync unit of work first (``uow.run_sync`` passes it on the async path).


def create_conversation(uow: UnitOfWork, conversation_id: str, user_id: str | None = None) -> None:
    """Store the head and the index row of a new, empty conversation."""
    namespace = conversation_namespace(conversation_id)
    uow.entries.save(namespace, empty_head_entry(conversation_id, user_id), expected_version=0)
    uow.entries.save(INDEX_NAMESPACE, index_entry(conversation_id, user_id))


def append_turn(
    uow: UnitOfWork,
    conversation_id: str,
    new_turn: EncodedTurn,
    policy: Policy,
    has_summarizer: bool,
    prepared: PreparedSummary | None,
) -> Appended:
    """Insert the turn, evict, write the summary and the head; return what was done.

    A turn that needs no eviction is first tried as the store's one statement
    (:func:`_append_at_once`); otherwise, or when that wrote nothing, the general
    path (:func:`~firefly_orm.conversation._append.append_general`) runs.

    Raises :class:`SummaryNeeded` when the plan needs a summary that
    ``prepared`` does not hold (the unit of work then rolls back), and
    :class:`~firefly_orm.errors.ConversationNotFoundError` when the conversation
    belongs to another user than ``new_turn.user_id``.
    """
    if prepared is None:  # (a prepared summary: this turn evicts)
        appended = _append_at_once(uow, conversation_id, new_turn, policy, has_summarizer)
        if appended is not None:
            return appended
    return append_general(uow, conversation_id, new_turn, policy, has_summarizer, prepared)


def _one_statement_append(
    uow: UnitOfWork,
) -> Callable[[TurnAppend], AppendedHead | None] | None:
    """The repository's one-statement append: the declared optional operation
    :meth:`RepositoryBase.append_turn <firefly_orm.uow.RepositoryBase.append_turn>`
    (its default writes nothing and returns ``None``)."""
    return optional_operations(uow.entries).append_turn


def _append_at_once(
    uow: UnitOfWork,
    conversation_id: str,
    new_turn: EncodedTurn,
    policy: Policy,
    has_summarizer: bool,
) -> Appended | None:
    """:func:`append_turn` in one statement when the store can and no eviction is needed.

    ``None``: nothing was written (the general path follows in the same unit of work).
    """
    turn = new_turn.turn
    limits = policy.limits
    append = _one_statement_append(uow)
    if (
        append is None
        or new_turn.idempotency_key is not None
        or new_turn.vector is not None  # its vector goes in the same unit of work
        or not policy.hints.fits(conversation_id, turn.token_estimate, turn.message_count, limits)
    ):
        return None
    # Checked here as the general path's first read would: the statement's
    # derived ids hash the namespace, which must be text the database can store.
    namespace = validate_namespace(conversation_namespace(conversation_id))
    # None: the store has no one-statement append, or the head does not qualify.
    done = append(
        TurnAppend(
            namespace=namespace,
            head_id=derived_entry_id(namespace, HEAD_KEY),
            conversation_id=conversation_id,
            row=turn_entry(
                namespace,
                turn,
                new_turn.encoded_raw,
                new_turn.message_tokens,
                text_search=policy.text_search,
            ),
            tokens=turn.token_estimate,
            messages=turn.message_count,
            token_cap=eviction_caps(limits)[0],
            message_cap=limits.max_messages,
            owner=new_turn.user_id,
        )
    )
    if done is None:
        return None
    after = head_from_content(done.content, done.version, namespace)
    before = HeadState(
        next_turn_id=after.next_turn_id - 1,
        total_tokens=after.total_tokens - turn.token_estimate,
        turn_count=after.turn_count - 1,
        summary=after.summary,
        version=after.version - 1,
        total_messages=(after.total_messages or 0) - turn.message_count,
    )
    plan = plan_append(before, turn, (), limits, has_summarizer=has_summarizer)
    if plan.evicted_turn_ids or plan.next_turn_id != after.next_turn_id:
        # Unreachable while the statement and the planner agree (on PostgreSQL the
        # statement has committed on its own; on SQLite the unit of work rolls back).
        raise RuntimeError(f"one-statement append disagrees with the planner: {plan}")
    policy.hints.record(conversation_id, plan.total_tokens, plan.total_messages)
    return Appended(plan.turn, plan, None)


def append_turn_holding(
    uow: UnitOfWork,
    conversation_id: str,
    new_turn: EncodedTurn,
    policy: Policy,
    summarizer: Summarizer | None,
    prepared: PreparedSummary | None,
) -> HoldingWork[Appended]:
    """:func:`append_turn`, calling the summarizer and scorer inside the unit of work if needed.

    Run by a :class:`~firefly_orm.bridges._steps.HoldingTransaction` on stores
    that lock rows: the head read ``for_update`` stays locked while the
    summarizer (and the promotion scorer) run, so the plan cannot go stale and
    other writers of the conversation wait for the lock.  ``prepared`` is used
    when it still fits.
    """
    has_summarizer = summarizer is not None
    try:
        return append_turn(uow, conversation_id, new_turn, policy, has_summarizer, prepared)
    except SummaryNeeded as exc:
        needed = exc
    made = yield from prepare(needed, summarizer, policy.promotion)
    return append_turn(uow, conversation_id, new_turn, policy, has_summarizer, made)


def replace_conversation(
    uow: UnitOfWork,
    conversation_id: str,
    turns: Sequence[EncodedTurn],
    summary: str | None,
    owner: str | None = None,
    *,
    text_search: bool,
) -> None:
    """Replace the turns (and archive) of a conversation; keep its summary unless given one.

    ``text_search``: the new turn rows carry their ``search_text``
    (:func:`~firefly_orm.conversation._rows.turn_entry`).

    A branch replaced this way is no longer one (:func:`~firefly_orm.conversation._branch.detach`).

    The conversation keeps its owner: the new rows carry its ``user_id``.  A new
    conversation belongs to ``owner``; with an ``owner``, an existing
    conversation must be that user's.

    Raises:
        ConversationNotFoundError: The conversation is not ``owner``'s.
    """
    namespace = conversation_namespace(conversation_id)
    stored_head = uow.entries.get_by_key(namespace, HEAD_KEY, for_update=True)
    head = head_from_entry(stored_head)
    owner = claim(stored_head, owner, conversation_id)
    if stored_head is not None:
        detach(uow, conversation_id)  # new turns: no longer a branch of anything
    old = uow.entries.list(namespace, key_prefix=TURN_KEY_PREFIX)
    if old:
        uow.entries.delete(namespace, [row.entry_id for row in old])
    uow.entries.clear(archive_namespace(conversation_id))
    for item in turns:
        row = turn_entry(
            namespace,
            item.turn,
            item.encoded_raw,
            item.message_tokens,
            owner,
            text_search=text_search,
        )
        uow.entries.save(namespace, row)
    save_head(
        uow,
        conversation_id,
        stored_head,
        head,
        next_turn_id=turns[-1].turn.turn_id + 1 if turns else 0,
        total_tokens=sum(t.turn.token_estimate for t in turns),
        turn_count=len(turns),
        summary=summary if summary else head.summary,
        total_messages=sum(t.turn.message_count for t in turns),
        user_id=owner,
    )


def read_head(uow: UnitOfWork, conversation_id: str) -> HeadState:
    """The head of ``conversation_id`` (a fresh one when it is unknown)."""
    return head_from_entry(
        uow.entries.get_by_key(conversation_namespace(conversation_id), HEAD_KEY)
    )


def read_turns(uow: UnitOfWork, namespace: str) -> list[ConversationTurn]:
    """Every turn stored in ``namespace`` (a conversation's or its archive), oldest first."""
    rows = uow.entries.list(namespace, key_prefix=TURN_KEY_PREFIX)
    return [turn_from_entry(e) for e in rows]


def read_conversation_ids(uow: UnitOfWork, user_id: str | None = None) -> list[str]:
    """Ids of the stored conversations (``user_id``'s only, when given), in creation order."""
    rows = uow.entries.list(INDEX_NAMESPACE, user_id=user_id)
    return [row.key for row in rows if row.key is not None]


def clear_conversations(
    uow: UnitOfWork, conversation_ids: list[str] | None, user_id: str | None = None
) -> None:
    """Forget these conversations (``None``: every one, or every one of ``user_id``):
    turns, archive, head, index row, and the row of a branch's parent naming it."""
    everything = conversation_ids is None and user_id is None
    if conversation_ids is None:
        conversation_ids = read_conversation_ids(uow, user_id)
    for conversation_id in conversation_ids:
        unlink(uow, conversation_id)  # its parent's row naming it (a branch's)
        uow.entries.clear(conversation_namespace(conversation_id))
        uow.entries.clear(archive_namespace(conversation_id))
    if everything:
        uow.entries.clear(INDEX_NAMESPACE)
    else:
        uow.entries.delete(
            INDEX_NAMESPACE, [derived_entry_id(INDEX_NAMESPACE, c) for c in conversation_ids]
        )
