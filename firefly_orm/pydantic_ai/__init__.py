"""Agents with memory in one call: a pydantic-ai agent run on a :class:`MemoryManager`.

:class:`MemoryAgent` wraps a pydantic-ai agent and a
:class:`~firefly_orm.manager.MemoryManager`.  Each of its runs

1. loads what the conversation's next model call should get, with
   :meth:`MemoryManager.assemble_context
   <firefly_orm.manager.MemoryManager.assemble_context>`: the summary of the
   evicted turns, the long-term items recalled for the prompt, the working
   facts, then the pinned and newest turns, within the token budget;
2. runs the agent with that context as its ``message_history``;
3. stores the run's new messages (``result.new_messages()``, never the loaded
   context) as ONE turn with :meth:`MemoryManager.add_turn
   <firefly_orm.manager.MemoryManager.add_turn>`, one unit of work, with the
   run's token usage in the turn's metadata.

A run that raises, is cancelled, or whose stream or iteration is left before
the end stores nothing: the conversation stays exactly as it was.  (What the
agent's tools wrote on their own, a fact for instance, is the tools' doing and
stays.)

::

    from pydantic_ai import Agent
    from firefly_orm import MemoryManager, SQLiteStore
    from firefly_orm.pydantic_ai import MemoryAgent

    agent = Agent("openai:gpt-4o", instructions="You are a support agent.")
    support = MemoryAgent(agent, memory=MemoryManager(store=SQLiteStore("memory.sqlite3")))

    result = await support.run("My order 1042 has not arrived.", user_id="ada")
    cid = result.conversation_id                # a new conversation, owned by "ada"
    result = await support.run("Any news?", user_id="ada")
    result.turn_id                              # 1: ada's current conversation continued
    result = await support.run("New topic", user_id="ada", new_conversation=True)

The runs return pydantic-ai's own objects (``StreamedRunResult``,
``AgentRun``; ``run`` and ``run_sync`` a :class:`MemoryRunResult`, which is an
``AgentRunResult`` that also carries the turn it stored: ``result.turn``,
``result.turn_id``); the firefly_orm conversation id is
``result.conversation_id`` (it is also pydantic-ai's conversation id of the
run's messages).  ``run`` / ``run_sync`` / ``run_stream`` / ``iter`` take the
agent's own keyword arguments (``deps``, ``model``, ``usage_limits``...),
except ``message_history`` and ``conversation``: the history comes from memory.

**Which conversation.** ``conversation_id=`` names it.  Without one, a run
for a user continues that user's *current conversation*: their newest
(:meth:`MemoryManager.user_conversations
<firefly_orm.manager.MemoryManager.user_conversations>`, an indexed read), so
``run(prompt, user_id="ada")`` call after call is one conversation whose
history the model sees.  ``new_conversation=True`` starts a new one (it then
becomes the current one); a run for no user (no ``user_id``, a manager bound to
none) starts a new conversation each time.

**Users.** ``user_id=`` (or a manager bound to a user) runs for one user: a
new conversation becomes theirs, and another user's conversation is refused
before the model is called with
:class:`~firefly_orm.errors.ConversationNotFoundError`, the error of a
missing conversation (nothing is written); the facts and long-term items the
run sees (and its tools reach through :class:`MemoryDeps`) are that user's
only (:meth:`MemoryAgent.memory_for`).  The owner is checked again when the
turn is written.

**No transaction across the model call.** A run reads in one short
transaction, calls the model with none open, then writes the turn in one
unit of work that re-reads the conversation's head (a turn another writer
added meanwhile comes first; nothing is lost).  On a store bound to the app's
session (``store.bind_session(session)``) the run ends the session's
transaction its read began before calling the model (the connection goes
back to the pool, ``idle``), and so what its tools began (committed: a tool's
writes are its own doing); a summarizer the write needs is called with no
transaction open either.  The turn is written in a SAVEPOINT of the session,
for the app to commit.  A session that was already in a transaction when the
run started is the app's and is left open (a warning is logged).

**Tools.** An agent whose ``deps_type`` is :class:`MemoryDeps` (or a subclass
whose other fields have defaults) gets one per run: the run's memory,
conversation id and user, so a tool can ``await ctx.deps.memory.async_set_fact(...)``.
Other deps types: pass ``deps=`` per run, or ``deps_factory=`` to build them
from the :class:`MemoryDeps`.

**State.** A run's ``state_delta=`` and what its tools stage with
``ctx.deps.stage_state({...})`` (:meth:`MemoryDeps.stage_state`) are written
with the run's turn, in its unit of work: both or neither.  (Staged, not
written by the tool: a tool's own ``async_update_state`` commits at once, even
when the run then fails.)

**Summaries.** A summarizer made with ``create_llm_summarizer()`` (no model)
asks the model of the agent whose run stores the turn: the run's ``model=``,
else the agent's own (:func:`firefly_orm.summarization.using_agent_model`).

**Delegation.** :func:`delegate` gives a sub-agent a :class:`MemoryAgent` over
a fork of the memory: the same store and conversations, its own facts (scope
``delegation:<name>``).  :class:`DelegationRouter` routes each task to one
sub-agent of a pool, picked by a strategy (round robin, the description that
best matches the task, or a model's choice), each on its own fork.

Async runs use the ``async_`` operations only (the event loop never blocks on
the database); ``run_sync`` uses the sync ones.  Needs the ``pydantic-ai``
extra; importing this module without it raises
:class:`~firefly_orm.errors.MissingExtraError`.
"""

# MemoryAgent and delegate are defined here; what a run gives and stores
# (MemoryDeps, MemoryRunResult, the turn's text and usage) is in the internal
# _result module, imported below once the extra is known to be installed.

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar, cast

from firefly_orm.errors import EntryValidationError, MissingExtraError

try:  # absolute imports: the real pydantic-ai package, not this one
    from pydantic_ai.agent import AbstractAgent
    from pydantic_ai.exceptions import UserError
    from pydantic_ai.messages import ModelMessage, UserContent
    from pydantic_ai.result import StreamedRunResult
    from pydantic_ai.run import AgentRun, AgentRunResult
except ImportError as exc:
    raise MissingExtraError("firefly_orm.pydantic_ai", "pydantic-ai", "pydantic_ai") from exc

from firefly_orm.assemble import ContextShares
from firefly_orm.bridges import _steps as steps
from firefly_orm.bridges._release import SessionHold, released_before_callouts
from firefly_orm.bridges._steps import CallOut, Operation
from firefly_orm.conversation._model import ConversationTurn, check_int
from firefly_orm.entry import validate_user_id
from firefly_orm.knowledge import KnowledgeGraph
from firefly_orm.long_term import LongTermMemory
from firefly_orm.manager import MemoryManager
from firefly_orm.pydantic_ai._context import ContextOptions, load_context
from firefly_orm.pydantic_ai._result import (
    MemoryDeps,
    MemoryRunResult,
    prompt_text,
    response_text,
    usage_metadata,
)
from firefly_orm.pydantic_ai._router import (
    CapabilityStrategy,
    DelegationError,
    DelegationStrategy,
    ModelChoiceStrategy,
    RoundRobinStrategy,
    RouterCore,
    SubAgent,
)
from firefly_orm.pydantic_ai._run import (
    Prepared,
    Release,
    RunHold,
    Started,
    current_conversation,
    prepare,
    release_capabilities,
    with_graph_tools,
)
from firefly_orm.pydantic_ai._store import run_deps, store_turn

__all__ = [
    "DELEGATION_SCOPE_PREFIX",
    "CapabilityStrategy",
    "DelegationError",
    "DelegationRouter",
    "DelegationStrategy",
    "MemoryAgent",
    "MemoryDeps",
    "MemoryRunResult",
    "ModelChoiceStrategy",
    "RoundRobinStrategy",
    "SubAgent",
    "delegate",
    "prompt_text",
    "response_text",
    "usage_metadata",
]

logger = logging.getLogger("firefly_orm.pydantic_ai")

T = TypeVar("T")
DepsT = TypeVar("DepsT")
OutputT = TypeVar("OutputT")

#: The working scope of a delegated sub-agent is this prefix and its name.
DELEGATION_SCOPE_PREFIX = "delegation:"


class MemoryAgent(Generic[DepsT, OutputT]):
    """A pydantic-ai agent whose runs load and store a conversation's memory.

    Args:
        agent: The pydantic-ai agent (any ``AbstractAgent``).  Give it
            ``instructions=`` rather than ``system_prompt=``: pydantic-ai sends a
            system prompt only when the history is empty, so it would live in
            the first stored turn and go when that turn is evicted.
        memory: The manager the runs use (its store, conversation limits,
            summarizer, facts and long-term memory).  A manager bound to a user
            (``MemoryManager(user_id=...)``) runs for that user only.
        name: Recorded as ``"agent"`` in the metadata of every turn this agent
            stores (who spoke, in a conversation several agents share).
        max_tokens: The context's token budget (default: the conversation's
            ``max_tokens``).
        max_messages: At most this many context messages (default: the
            conversation's ``max_messages``).
        recall_limit: At most this many long-term items recalled for the prompt
            (0: none).
        min_importance: Leave out long-term items less important than this.
        shares: The budget shares of long-term items and facts
            (:class:`~firefly_orm.assemble.ContextShares`).
        deps_factory: Builds the agent's deps from the run's
            :class:`MemoryDeps` when a run is given no ``deps=`` (for a deps
            type of your own that carries memory).  Without it, an agent whose
            ``deps_type`` is :class:`MemoryDeps` (or a subclass) gets one, any
            other agent ``None``.
        graph: A :class:`~firefly_orm.knowledge.KnowledgeGraph`: each run gets its
            ``facts_about`` / ``related`` tools over the run's user's graph (a run
            for no user is refused).

    Raises:
        TypeError: ``agent`` is not a pydantic-ai agent or ``memory`` not a
            :class:`~firefly_orm.manager.MemoryManager`.
        EntryValidationError: A bad context option.

    Example:
        >>> from pydantic_ai import Agent
        >>> from pydantic_ai.models.test import TestModel
        >>> agent = Agent(TestModel(custom_output_text="Hi!"))
        >>> support = MemoryAgent(agent, memory=MemoryManager())
        >>> result = support.run_sync("Hello", user_id="ada")
        >>> result.output
        'Hi!'
        >>> result.turn_id, result.turn.user_prompt
        (0, 'Hello')
        >>> [t.user_prompt for t in support.memory.conversation.get_turns(result.conversation_id)]
        ['Hello']
    """

    def __init__(
        self,
        agent: AbstractAgent[DepsT, OutputT],
        *,
        memory: MemoryManager,
        name: str | None = None,
        max_tokens: int | None = None,
        max_messages: int | None = None,
        recall_limit: int = 5,
        min_importance: float = 0.0,
        shares: ContextShares | None = None,
        deps_factory: Callable[[MemoryDeps], DepsT] | None = None,
        graph: KnowledgeGraph | None = None,
    ) -> None:
        if not isinstance(agent, AbstractAgent):
            raise TypeError(f"agent must be a pydantic-ai agent, got {type(agent).__name__}")
        if not isinstance(memory, MemoryManager):
            raise TypeError(f"memory must be a MemoryManager, got {type(memory).__name__}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        if deps_factory is not None and not callable(deps_factory):
            raise TypeError("deps_factory must be callable")
        if shares is not None and not isinstance(shares, ContextShares):
            raise EntryValidationError("shares", "must be a ContextShares")
        self._agent = agent
        self._memory = memory
        self._name = name
        LongTermMemory.recall_floor(min_importance)  # checked now, not at the first run
        self._context_options = ContextOptions(
            max_tokens=None if max_tokens is None else check_int("max_tokens", max_tokens, 1),
            max_messages=(
                None if max_messages is None else check_int("max_messages", max_messages, 1)
            ),
            recall_limit=check_int("recall_limit", recall_limit, 0),
            min_importance=min_importance,
            shares=shares,
        )
        self._deps_factory = deps_factory
        self._graph = graph

    # ------------------------------------------------------------------ properties
    @property
    def agent(self) -> AbstractAgent[DepsT, OutputT]:
        """The wrapped pydantic-ai agent."""
        return self._agent

    @property
    def memory(self) -> MemoryManager:
        """The manager the runs use."""
        return self._memory

    @property
    def name(self) -> str | None:
        """The name recorded in the metadata of the turns this agent stores."""
        return self._name

    def __repr__(self) -> str:
        return f"MemoryAgent(agent={self._agent!r}, memory={self._memory!r}, name={self._name!r})"

    # ------------------------------------------------------------------ users
    def memory_for(self, user_id: str | None) -> MemoryManager:
        """The manager a run for ``user_id`` uses (no I/O).

        ``None``: :attr:`memory` itself.  A user of a manager bound to no user:
        a view of it that shares the store and the conversations and keeps the
        user's own facts and long-term items
        (:meth:`MemoryManager.for_user <firefly_orm.MemoryManager.for_user>`).
        A manager bound to a user serves that user only.

        Raises:
            EntryValidationError: A bad ``user_id``, or another user than the
                one the manager is bound to.
        """
        bound = self._memory.user_id
        if user_id is None:
            return self._memory
        user_id = validate_user_id(user_id)
        if bound is not None:
            if user_id != bound:
                raise EntryValidationError(
                    "user_id", f"this agent's memory belongs to user {bound!r}"
                )
            return self._memory
        return self._memory.for_user(user_id)

    # ------------------------------------------------------------------ runs
    async def run(
        self,
        user_prompt: str | Sequence[UserContent],
        *,
        conversation_id: str | None = None,
        user_id: str | None = None,
        new_conversation: bool = False,
        deps: DepsT | None = None,
        state_delta: Mapping[str, Any] | None = None,
        **agent_kwargs: Any,
    ) -> MemoryRunResult[OutputT]:
        """Run the agent on the conversation's memory and store the run as one turn.

        Args:
            user_prompt: The user's message.
            conversation_id: The conversation to continue.  ``None``: the
                user's current conversation (their newest, see
                :meth:`MemoryManager.user_conversations
                <firefly_orm.manager.MemoryManager.user_conversations>`), or a
                new one when the user has none, when the run is for no user,
                or with ``new_conversation=True``; a new one is written with
                this run's turn (read its id from ``result.conversation_id``).
            user_id: The user the run is for (see :meth:`memory_for`); default:
                the user the manager is bound to, if any.
            new_conversation: Start a new conversation even though the user
                has one (not with ``conversation_id``).
            deps: The agent's deps for this run (default: see ``deps_factory``).
            state_delta: A state change stored with the run's turn, in its unit
                of work (``add_turn(..., state_delta=)``; nothing written if
                the run stores no turn); the run's tools stage more with
                :meth:`MemoryDeps.stage_state`, over it.
            **agent_kwargs: Passed to the agent's ``run`` (``model``,
                ``usage_limits``, ``instructions``...).

        Returns:
            pydantic-ai's result (a :class:`MemoryRunResult`: an
            ``AgentRunResult`` with the stored turn as ``result.turn`` and
            ``result.turn_id``); the turn is stored by the time it returns.

        Raises:
            TypeError: ``message_history`` or ``conversation`` among the
                keyword arguments, or no user prompt.
            EntryValidationError: A bad id, ``conversation_id`` with
                ``new_conversation=True``, a ``user_id`` other than the one
                the manager is bound to, or ``deps`` a :class:`MemoryDeps` of
                another user's (or an unbound) memory.
            ConversationNotFoundError: The conversation is another user's
                (the model is not called, nothing is written).
            Exception: Whatever the run raised (nothing is written).
        """
        prepared, held = self._prepare(
            user_prompt, conversation_id, user_id, new_conversation, deps, agent_kwargs, state_delta
        )
        return await self._arun(prepared, held, self._whole_run(prepared, held))

    def run_sync(
        self,
        user_prompt: str | Sequence[UserContent],
        *,
        conversation_id: str | None = None,
        user_id: str | None = None,
        new_conversation: bool = False,
        deps: DepsT | None = None,
        state_delta: Mapping[str, Any] | None = None,
        **agent_kwargs: Any,
    ) -> MemoryRunResult[OutputT]:
        """Sync form of :meth:`run` (the agent's ``run_sync``; memory's sync methods).

        Returns:
            A :class:`MemoryRunResult`, as :meth:`run`.
        """
        prepared, held = self._prepare(
            user_prompt, conversation_id, user_id, new_conversation, deps, agent_kwargs, state_delta
        )
        try:
            return steps.run(prepared.memory.store, self._whole_run(prepared, held))
        except BaseException as exc:
            if not isinstance(exc, Exception):  # interrupted: no step saw it
                held.release_unless_writing()
            raise

    @asynccontextmanager
    async def run_stream(
        self,
        user_prompt: str | Sequence[UserContent],
        *,
        conversation_id: str | None = None,
        user_id: str | None = None,
        new_conversation: bool = False,
        deps: DepsT | None = None,
        state_delta: Mapping[str, Any] | None = None,
        **agent_kwargs: Any,
    ) -> AsyncIterator[StreamedRunResult[DepsT, OutputT]]:
        """:meth:`run` with the agent's ``run_stream``: stream the answer, store it at the end.

        ``async with memory_agent.run_stream(prompt, conversation_id=cid) as stream:``
        gives pydantic-ai's ``StreamedRunResult``.  When the block ends with
        the stream received in full (``stream_text``, ``stream_output`` or
        ``get_output`` ran to the end), the turn is stored as the block exits;
        if the block raises, is cancelled or leaves the stream unfinished,
        nothing is stored.  Arguments and errors as for :meth:`run`.  The
        stored turn is not on the stream (it is written after the block):
        read it with ``memory.conversation.async_get_recent(cid, 1)`` (its
        ``metadata["run_id"]`` is the run's ``run_id``).
        """
        prepared, held = self._prepare(
            user_prompt, conversation_id, user_id, new_conversation, deps, agent_kwargs, state_delta
        )
        started = await self._astart(prepared, held)
        settled: AgentRunResult[Any] | None = None
        added = release_capabilities(held.hold, between_requests=True)
        async with self._agent.run_stream(
            prepared.prompt, **started.agent_arguments(added)
        ) as stream:
            await held.hold.arelease()  # what the tools before the stream began
            for capability in added:  # the app's block runs from here on
                capability.between_requests = False
            yield cast(StreamedRunResult[DepsT, OutputT], stream)
            if stream.is_complete:
                try:
                    settled = stream.result
                except UserError:  # the run failed after its output was streamed
                    settled = None
        await self._store_finished(started, settled, "stream")

    @asynccontextmanager
    async def iter(
        self,
        user_prompt: str | Sequence[UserContent],
        *,
        conversation_id: str | None = None,
        user_id: str | None = None,
        new_conversation: bool = False,
        deps: DepsT | None = None,
        state_delta: Mapping[str, Any] | None = None,
        **agent_kwargs: Any,
    ) -> AsyncIterator[AgentRun[DepsT, OutputT]]:
        """:meth:`run` with the agent's ``iter``: drive the run node by node.

        ``async with memory_agent.iter(prompt, conversation_id=cid) as agent_run:``
        gives pydantic-ai's ``AgentRun``.  When the block ends with the run
        finished (``agent_run.result`` set), the turn is stored as the block
        exits; a block that raises, is cancelled or stops iterating early
        stores nothing.  Arguments and errors as for :meth:`run`; the stored
        turn as for :meth:`run_stream`.
        """
        prepared, held = self._prepare(
            user_prompt, conversation_id, user_id, new_conversation, deps, agent_kwargs, state_delta
        )
        started = await self._astart(prepared, held)
        added = release_capabilities(held.hold, between_requests=False)
        async with self._agent.iter(prepared.prompt, **started.agent_arguments(added)) as agent_run:
            yield cast(AgentRun[DepsT, OutputT], agent_run)
        await self._store_finished(started, agent_run.result, "run")

    # ------------------------------------------------------------------ shared core
    def _prepare(
        self,
        user_prompt: str | Sequence[UserContent],
        conversation_id: str | None,
        user_id: str | None,
        new_conversation: bool,
        deps: DepsT | None,
        agent_kwargs: Mapping[str, Any],
        state_delta: Mapping[str, Any] | None = None,
    ) -> tuple[Prepared, RunHold]:
        """Check a run's arguments and decide its memory (no I/O), with its session's hold."""
        memory = self.memory_for(user_id)
        agent_kwargs = with_graph_tools(self._graph, memory, agent_kwargs)
        prepared = prepare(
            memory, user_prompt, conversation_id, new_conversation, deps, agent_kwargs, state_delta
        )
        return prepared, RunHold(SessionHold.of(prepared.memory.store))

    @staticmethod
    async def _arun(prepared: Prepared, held: RunHold, operation: Operation[T]) -> T:
        """``operation`` on the run's store from async code.

        A cancellation no step saw releases the session's hold (unless the run
        is writing); an exception passed through the run's steps, which see to it.
        """
        try:
            return await steps.arun(prepared.memory.store, operation)
        except BaseException as exc:
            if not isinstance(exc, Exception):  # cancelled: no step saw it
                await held.arelease_unless_writing()
            raise

    async def _astart(self, prepared: Prepared, held: RunHold) -> Started:
        """:meth:`_start` from async code (``run_stream`` and ``iter``)."""
        return await self._arun(prepared, held, self._start(prepared, held.hold))

    async def _store_finished(
        self, started: Started, result: AgentRunResult[Any] | None, what: str
    ) -> None:
        """Store the turn of ``run_stream``'s or ``iter``'s block, or log (``what``: the
        stream or the run) that it left before its end (``result`` ``None``)."""
        if result is None:
            logger.info(
                "%s on conversation %r left before its end: nothing stored",
                what,
                started.conversation_id,
            )
            return
        await steps.arun(started.prepared.memory.store, self._write(started, result))

    def _start(self, prepared: Prepared, hold: SessionHold) -> Operation[Started]:
        """Decide the conversation, read the model call's context, end the read's transaction.

        The run's transaction in the caller's session (its read's) is ended
        before the model call, also when the read failed.
        """
        try:
            conversation_id = yield from current_conversation(prepared)
            history = yield from self._load(prepared, conversation_id)
        except Exception:
            yield from Release(hold)
            raise
        yield from Release(hold)
        deps, memory_deps = run_deps(self._agent, self._deps_factory, prepared, conversation_id)
        return Started(prepared, conversation_id, deps, history, memory_deps)

    def _whole_run(self, prepared: Prepared, held: RunHold) -> Operation[MemoryRunResult[OutputT]]:
        """``run`` and ``run_sync``: start, call the agent (one step), write the turn."""
        started = yield from self._start(prepared, held.hold)
        arguments = started.agent_arguments(release_capabilities(held.hold, between_requests=True))

        def call_sync() -> AgentRunResult[OutputT]:
            return self._agent.run_sync(prepared.prompt, **arguments)

        async def call_async() -> AgentRunResult[OutputT]:
            return await self._agent.run(prepared.prompt, **arguments)

        try:
            result = yield from CallOut(call_sync, async_fn=call_async, what="the agent")
        except Exception:
            yield from Release(held.hold)  # what its tools began, also when the run failed
            raise
        yield from Release(held.hold)
        held.writing = True
        turn = yield from self._write(started, result)
        return MemoryRunResult.of(result, turn)

    def _load(self, prepared: Prepared, cid: str) -> Operation[list[ModelMessage]]:
        """The context of the run's model call; a conversation of another user is refused."""
        loaded = yield from load_context(
            prepared.memory,
            cid,
            user_id=prepared.user_id,
            query=prepared.text,
            options=self._context_options,
        )
        logger.debug(
            "conversation %r: %d context message(s) for the run%s",
            cid,
            len(loaded.context),
            "" if loaded.exists else " (new conversation)",
        )
        return cast(list[ModelMessage], loaded.context)

    def _write(self, started: Started, result: AgentRunResult[Any]) -> Operation[ConversationTurn]:
        """:meth:`_store`; on a session-bound store, no call-out inside the run's transaction.

        Taken when the write starts: if the session has no transaction then,
        the one a first attempt begins is ended before a summarizer (or a
        promotion scorer) is called, as long as nothing was written.  The
        turn's write is left for the caller to commit.
        """
        hold = SessionHold.of(started.prepared.memory.store, warn=False)
        return released_before_callouts(self._store(started, result), hold)

    def _store(self, started: Started, result: AgentRunResult[Any]) -> Operation[ConversationTurn]:
        """Store the run's new messages and staged state as one turn (``_store.store_turn``)."""
        # A summarizer made with model=None asks the model this run used.
        model = started.prepared.agent_kwargs.get("model") or self._agent.model
        return store_turn(started, result, self._name, model)


def delegate(
    memory: MemoryManager,
    agent: AbstractAgent[DepsT, OutputT],
    *,
    name: str,
    **options: Any,
) -> MemoryAgent[DepsT, OutputT]:
    """A :class:`MemoryAgent` for a delegated sub-agent: shared conversations, its own facts.

    The sub-agent works on ``memory.fork(working_scope_id="delegation:<name>")``:
    the same store, conversations and long-term memory as ``memory``, and a
    working scope of its own, so the facts it sets are invisible to the other
    agents and theirs to it, while a conversation they all run on
    (``conversation_id=``) holds every agent's turns, each marked with its
    agent's ``name`` in the metadata.  Per-user runs (``user_id=``) get the
    user's part of that scope.

    Args:
        memory: The manager the agents share.
        agent: The sub-agent.
        name: Names the sub-agent (its scope and the ``"agent"`` of its turns).
        **options: The other :class:`MemoryAgent` options (``max_tokens``,
            ``recall_limit``, ``deps_factory``...).

    Example::

        researcher = delegate(mgr, research_agent, name="researcher")
        writer = delegate(mgr, writing_agent, name="writer")
        found = await researcher.run("Find the refund policy", conversation_id=cid)
        draft = await writer.run("Draft the answer", conversation_id=cid)
    """
    if not isinstance(name, str) or not name.strip():
        raise EntryValidationError("name", "must be a non-blank string")
    fork = memory.fork(working_scope_id=f"{DELEGATION_SCOPE_PREFIX}{name}")
    return MemoryAgent(agent, memory=fork, name=name, **options)


class DelegationRouter(RouterCore[MemoryAgent[Any, Any]]):
    """Routes each task to one sub-agent, which runs on its own fork of ``memory``.

    Args:
        agents: The pool: :class:`SubAgent` objects, or pydantic-ai agents
            built with ``name=`` (and ``description=``).  Names are unique.
        strategy: Picks the sub-agent of each task.
        memory: The manager the sub-agents share (each works on
            ``memory.fork(working_scope_id="delegation:<name>")``, as
            :func:`~firefly_orm.pydantic_ai.delegate` gives it).  ``None``: a
            new in-process :class:`~firefly_orm.manager.MemoryManager`.
        **options: The other :class:`~firefly_orm.pydantic_ai.MemoryAgent`
            options of every sub-agent (``max_tokens``, ``recall_limit``...).

    Raises:
        DelegationError: An empty pool, a repeated name, an agent without a name.

    Example::

        router = DelegationRouter(
            [SubAgent(billing_agent, "billing", "invoice, payment and refund questions"),
             SubAgent(tech_agent, "tech", "error, crash and installation problems")],
            CapabilityStrategy(),
            memory=mgr,
        )
        result = await router.route("I was charged twice, please refund", user_id="ada")
        result.turn.metadata["agent"]      # 'billing'
    """

    def _delegate(
        self, memory: MemoryManager, agent: SubAgent, options: Mapping[str, Any]
    ) -> MemoryAgent[Any, Any]:
        """``delegate(memory, agent.agent, name=agent.name, **options)``."""
        return delegate(memory, agent.agent, name=agent.name, **options)
