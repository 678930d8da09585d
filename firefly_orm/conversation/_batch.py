"""Several turns, or model messages one at a time, added in ONE unit of work.

:func:`add_turns` appends a batch of turns all or nothing: the batch is one
transaction that runs the general append path
(:func:`~firefly_orm.conversation._append.append_general`) once per turn, so
each turn is planned on the head the previous one left (turns of the batch may
evict older ones, or each other, as consecutive ``add_turn`` calls would).  The
summarizer and the promotion scorer still run outside the unit of work: a step
that needs a summary rolls the whole batch back, the summary is made, and the
batch is redone with it (:class:`BatchSummaryNeeded` says which step asked).

Messages added one at a time (:meth:`ConversationMemory.add
<firefly_orm.conversation.ConversationMemory.add>`) are grouped into turns by
:func:`group_messages`, inside the transaction, against the newest stored turn:

* a message that opens a history (a user or system message answering no tool
  call) starts a new turn, unless the current turn has no model response yet
  or still waits for the result of one of its tool calls (then it joins it);
* every other message (a model response, a tool result, a retry prompt)
  joins the current turn, so a tool call and its result are never in two turns
  and a dangling tool call is completed by its result when it arrives.

The current turn at the start is the newest stored turn when it holds raw
messages of the same format (pydantic-ai or JSON); it is rewritten with the
new messages appended (same ``turn_id`` and ``timestamp``, ``updated_at`` set,
estimates redone), through :attr:`EncodedTurn.replaces
<firefly_orm.conversation._append.EncodedTurn.replaces>`.  A turn's
``user_prompt`` is the text of its user messages and its
``assistant_response`` the text of its last model response that has text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from firefly_orm.bridges._steps import Operation, RetryBudget, Transaction
from firefly_orm.conversation._append import (
    Appended,
    EncodedTurn,
    Policy,
    PreparedSummary,
    SummaryNeeded,
    append_general,
    prepare,
)
from firefly_orm.conversation._codec import decode_raw_messages
from firefly_orm.conversation._messages import Estimator, estimate_turn, inspect_encoded
from firefly_orm.conversation._model import ConversationTurn, Summarizer
from firefly_orm.conversation._rows import (
    HEAD_KEY,
    conversation_namespace,
    head_from_entry,
    stored_raw,
    turn_from_entry,
    turn_key,
)
from firefly_orm.entry import utcnow
from firefly_orm.errors import ConcurrencyError, EntryValidationError
from firefly_orm.protocols import UnitOfWork

__all__ = [
    "BatchSummaryNeeded",
    "FixedTurns",
    "MessageBatch",
    "Shape",
    "add_turns",
    "append_batch",
    "group_messages",
    "message_shapes",
    "prompt_and_answer",
]

#: Builds the turns of a batch in its unit of work, ``(uow, conversation_id) -> turns``
#: (they may depend on the stored turns).
TurnsBuilder = Callable[[UnitOfWork, str], list[EncodedTurn]]


class BatchSummaryNeeded(SummaryNeeded):
    """:class:`SummaryNeeded` of step ``step`` of a batch (the batch rolled back)."""

    def __init__(self, step: int, needed: SummaryNeeded) -> None:
        super().__init__(
            needed.previous_summary,
            needed.evicted_turns,
            summarize=needed.summarize,
            score=needed.score,
        )
        self.step = step


def append_batch(
    uow: UnitOfWork,
    conversation_id: str,
    build: TurnsBuilder,
    policy: Policy,
    has_summarizer: bool,
    prepared: Mapping[int, PreparedSummary],
) -> list[Appended]:
    """The transaction: append every turn ``build`` gives, in order, in this unit of work."""
    done: list[Appended] = []
    turns = build(uow, conversation_id)
    for step, new_turn in enumerate(turns):
        try:
            appended = append_general(
                uow, conversation_id, new_turn, policy, has_summarizer, prepared.get(step)
            )
        except SummaryNeeded as needed:
            raise BatchSummaryNeeded(step, needed) from None
        done.append(appended)
    return done


def add_turns(
    conversation_id: str,
    build: TurnsBuilder,
    policy: Policy,
    summarizer: Summarizer | None,
) -> Operation[list[Appended]]:
    """Run :func:`append_batch` until it commits, making the summaries it asks for outside it.

    Lost races (a concurrent writer changed the head, or made a prepared
    summary stale) are retried within a :class:`~firefly_orm.bridges._steps.RetryBudget`,
    then :class:`~firefly_orm.errors.ConcurrencyError` is raised (nothing written).
    """
    prepared: dict[int, PreparedSummary] = {}
    budget = RetryBudget()
    while True:
        try:
            return (
                yield from Transaction.write(
                    append_batch,
                    conversation_id=conversation_id,
                    build=build,
                    policy=policy,
                    has_summarizer=summarizer is not None,
                    prepared=dict(prepared),
                )
            )
        except ConcurrencyError:
            if not budget.spend():
                break
            yield from budget.pause()
        except BatchSummaryNeeded as needed:
            # A summary made for this step already: a lost race made it stale.
            if needed.step in prepared and not budget.spend():
                break
            prepared[needed.step] = yield from prepare(needed, summarizer, policy.promotion)
    raise ConcurrencyError(
        f"could not add turns to conversation {conversation_id!r} after "
        f"{budget.used} attempts (too many concurrent writers)"
    )


# --------------------------------------------------------------------------- messages


@dataclass(frozen=True)
class Shape:
    """What grouping needs of one message: whether it opens a history, is a model
    response, and which tool calls it makes and answers."""

    opens: bool
    responds: bool
    calls: tuple[str, ...] = ()
    results: tuple[str, ...] = ()


def message_shapes(encoded: Any) -> list[Shape]:
    """One :class:`Shape` per message of an encoded raw-messages object."""
    messages = encoded.get("messages") if isinstance(encoded, Mapping) else None
    if not isinstance(messages, list):
        return []
    pydantic_ai = encoded.get("format") == "pydantic-ai"
    infos = inspect_encoded(encoded, with_text=False)
    return [
        Shape(info.opens, _responds(message, pydantic_ai), info.calls, info.results)
        for message, info in zip(messages, infos, strict=True)
    ]


def _responds(message: Any, pydantic_ai: bool) -> bool:
    if not isinstance(message, Mapping):
        return False
    if pydantic_ai:
        return message.get("kind") == "response"
    return message.get("role") == "assistant"


@dataclass
class _Open:
    """The turn being filled: whether it has a response, its tool calls, and those unanswered."""

    answered: bool
    pending: set[str]
    called: set[str]

    def take(self, shape: Shape, *, stored: bool = False) -> None:
        """Add ``shape`` to the turn; a new message's results must answer calls of the turn."""
        stray = [r for r in shape.results if r not in self.called and r not in shape.calls]
        if stray and not stored:
            raise EntryValidationError(
                "messages",
                f"a tool result answers no tool call of its turn (tool_call_id {stray[0]!r}); "
                "add the model response that makes the call first",
            )
        self.called.update(shape.calls)
        self.answered = self.answered or shape.responds
        self.pending.difference_update(shape.results)
        self.pending.update(c for c in shape.calls if c not in shape.results)

    def closed(self) -> bool:
        return self.answered and not self.pending


def group_messages(
    shapes: Sequence[Shape], newest: Sequence[Shape] | None
) -> tuple[int, list[int]]:
    """Where the turns of a run of messages start (pure: the rule of the module docstring).

    ``newest``: the shapes of the newest stored turn's messages when new
    messages may join it, else ``None``.

    Returns:
        ``(joined, starts)``: the first ``joined`` messages join the newest
        stored turn; each index in ``starts`` begins a new turn (ascending,
        each after ``joined``).

    Raises:
        EntryValidationError: A message answers a tool call its turn does not
            make (a history holding it could not be read back).
    """
    current: _Open | None = None
    if newest is not None:
        current = _Open(False, set(), set())
        for shape in newest:
            current.take(shape, stored=True)
    joined = 0
    starts: list[int] = []
    for index, shape in enumerate(shapes):
        if current is None or (shape.opens and current.closed()):
            starts.append(index)
            current = _Open(False, set(), set())
        elif not starts:
            joined = index + 1
        current.take(shape)
    return joined, starts


def prompt_and_answer(encoded: Any) -> tuple[str, str]:
    """The text of a turn's user messages, and of its last model response with text."""
    messages = encoded.get("messages") if isinstance(encoded, Mapping) else None
    if not isinstance(messages, list):
        return "", ""
    pydantic_ai = encoded.get("format") == "pydantic-ai"
    prompts: list[str] = []
    answer = ""
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        if pydantic_ai:
            parts = message.get("parts")
            parts = parts if isinstance(parts, list) else []
            if message.get("kind") == "request":
                prompts.extend(
                    _text(p.get("content"))
                    for p in parts
                    if isinstance(p, Mapping) and p.get("part_kind") == "user-prompt"
                )
            elif message.get("kind") == "response":
                said = "".join(
                    _text(p.get("content"))
                    for p in parts
                    if isinstance(p, Mapping) and p.get("part_kind") == "text"
                )
                answer = said or answer
        elif message.get("role") == "user":
            prompts.append(_text(message.get("content")))
        elif message.get("role") == "assistant":
            answer = _text(message.get("content")) or answer
    return "\n".join(p for p in prompts if p), answer


def _text(content: Any) -> str:
    """The text of a message's content (a str, or the text items of a list)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            item if isinstance(item, str) else item.get("text")
            for item in content
            if isinstance(item, str) or (isinstance(item, Mapping) and item.get("type") == "text")
        ]
        return "\n".join(t for t in texts if isinstance(t, str) and t)
    return ""


@dataclass(frozen=True)
class FixedTurns:
    """A batch of turns known in advance (:data:`TurnsBuilder` that reads nothing)."""

    turns: tuple[EncodedTurn, ...]

    def __call__(self, uow: UnitOfWork, conversation_id: str) -> list[EncodedTurn]:
        return list(self.turns)


@dataclass(frozen=True)
class MessageBatch:
    """Messages to add to a conversation, already encoded: builds the batch's turns.

    Called in the unit of work (:data:`TurnsBuilder`): reads the head and the
    newest turn, groups the messages (:func:`group_messages`) and returns one
    :class:`EncodedTurn` per turn to write (the newest stored turn, grown,
    first when messages join it).  The first carries the head version read
    (``base_version``): on a store whose reads in a unit of work are not one
    snapshot, a writer that changed the conversation in between makes the
    batch retry instead of overwriting the turn it grew.
    """

    encoded: dict[str, Any]
    estimator: Estimator
    owner: str | None

    def __call__(self, uow: UnitOfWork, conversation_id: str) -> list[EncodedTurn]:
        fmt, messages = self.encoded["format"], list(self.encoded["messages"])
        shapes = message_shapes(self.encoded)
        newest_turn: ConversationTurn | None = None
        newest_messages: list[Any] = []
        namespace = conversation_namespace(conversation_id)
        head = head_from_entry(uow.entries.get_by_key(namespace, HEAD_KEY, for_update=True))
        if head.turn_count and head.next_turn_id:
            row = uow.entries.get_by_key(namespace, turn_key(head.next_turn_id - 1))
            raw = None if row is None else stored_raw(row)
            if row is not None and isinstance(raw, Mapping) and raw.get("format") == fmt:
                newest_turn = turn_from_entry(row, with_raw=False)
                newest_messages = list(raw.get("messages") or [])
        joined, starts = group_messages(
            shapes,
            None
            if newest_turn is None
            else message_shapes({"format": fmt, "messages": newest_messages}),
        )
        turns: list[EncodedTurn] = []
        if joined:
            assert newest_turn is not None
            turns.append(self._turn(fmt, newest_messages + messages[:joined], replaces=newest_turn))
        for begin, end in zip(starts, [*starts[1:], len(messages)][: len(starts)], strict=True):
            turns.append(self._turn(fmt, messages[begin:end], replaces=None))
        if turns and head.version:  # grouped on the turn read: a concurrent change retries
            turns[0] = replace(turns[0], base_version=head.version)
        return turns

    def _turn(
        self, fmt: str, messages: list[Any], *, replaces: ConversationTurn | None
    ) -> EncodedTurn:
        encoded = {"format": fmt, "messages": messages}
        prompt, answer = prompt_and_answer(encoded)
        if replaces is not None:
            prompt = prompt or replaces.user_prompt
            answer = answer or replaces.assistant_response
        tokens, per_message = estimate_turn(self.estimator, prompt, answer, encoded)
        turn = ConversationTurn(
            user_prompt=prompt,
            assistant_response=answer,
            raw_messages=decode_raw_messages(encoded),
            token_estimate=tokens,
            message_count=len(messages),
        )
        if replaces is not None:
            turn = turn.model_copy(
                update={
                    "timestamp": replaces.timestamp,
                    "metadata": replaces.metadata,
                    "updated_at": utcnow(),
                }
            )
        return EncodedTurn(turn, encoded, per_message, self.owner, replaces=replaces)
