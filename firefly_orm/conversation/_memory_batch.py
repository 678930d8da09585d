"""Adding several turns, or model messages, to a conversation in one unit of work.

:class:`ConversationBatches` holds the operation methods ``_add_turns``,
``_add`` and ``_add_many`` of
:class:`~firefly_orm.conversation.ConversationMemory` (which derives their
public and ``async_`` forms), and :meth:`ConversationBatches._report`, which
tells the ``on_trim`` / ``on_summarize`` observers what a committed append did
(``add_turn`` uses it too).  The grouping of messages into turns is
:mod:`firefly_orm.conversation._batch`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from firefly_orm.bridges import _telemetry
from firefly_orm.bridges._release import SessionHold, released_before_callouts
from firefly_orm.bridges._steps import Operation
from firefly_orm.conversation._append import Appended, EncodedTurn, Policy
from firefly_orm.conversation._batch import FixedTurns, MessageBatch, TurnsBuilder, add_turns
from firefly_orm.conversation._codec import encode_raw_messages
from firefly_orm.conversation._memory_search import ConversationSearch
from firefly_orm.conversation._messages import estimate_turn
from firefly_orm.conversation._model import (
    ConversationTurn,
    Summarizer,
    check_conversation_id,
    check_metadata,
    check_text,
)
from firefly_orm.conversation._plan import Limits
from firefly_orm.conversation._policies import Observer, SummarizeEvent, TrimEvent, notify
from firefly_orm.conversation._state import StateDelta, check_state_delta, with_state
from firefly_orm.errors import EntryValidationError
from firefly_orm.tokens import TokenEstimator

__all__ = ["ConversationBatches"]

logger = logging.getLogger("firefly_orm")


class ConversationBatches(ConversationSearch):
    """Batched appends of a conversation memory (a base of ``ConversationMemory``)."""

    _limits: Limits
    _estimator: TokenEstimator
    _policy: Policy
    _summarizer: Summarizer | None
    _on_trim: Observer | None
    _on_summarize: Observer | None

    def _add_turns(
        self,
        conversation_id: str,
        turns: Sequence[ConversationTurn],
        *,
        user_id: str | None = None,
        state_delta: Mapping[str, Any] | None = None,
    ) -> Operation[list[ConversationTurn]]:
        """Add ``turns`` in order, all or nothing (one unit of work), evicting as needed.

        Each item is a :class:`~firefly_orm.conversation.ConversationTurn`
        whose ``user_prompt``, ``assistant_response``, ``raw_messages`` and
        ``metadata`` are stored (its ``turn_id``, ``timestamp`` and
        ``token_estimate`` are assigned, as by :meth:`add_turn`).  Every turn is
        checked before anything is written; the turns are then planned one
        after another, as consecutive :meth:`add_turn` calls would be, and
        committed together, so a failure leaves the conversation as it was.
        ``user_id`` as for :meth:`add_turn`.  With an ``embedder``, the turns
        are embedded (in batches) before the unit of work opens and their
        vectors stored with them.  ``state_delta``: a state change stored in
        the batch's unit of work, as with :meth:`add_turn` (an empty batch writes
        nothing, state included).

        Returns:
            The stored turns (those the batch itself evicted included).

        Raises:
            EntryValidationError: A bad id, turn or state delta (nothing written).
            ConversationNotFoundError: The conversation is another user's.
            TypeError: A turn's ``raw_messages`` cannot be stored.
        """
        conversation_id = check_conversation_id(conversation_id)
        state = check_state_delta(state_delta)
        if isinstance(turns, str | bytes | Mapping) or not isinstance(turns, Sequence):
            raise TypeError("turns must be a sequence of ConversationTurn")
        owner = self._acting_user(user_id)
        encoded_turns: list[EncodedTurn] = []
        for index, turn in enumerate(turns):
            if not isinstance(turn, ConversationTurn):
                raise EntryValidationError(
                    "turns", f"item {index} is a {type(turn).__name__}, not a ConversationTurn"
                )
            prompt = check_text("user_prompt", turn.user_prompt)
            response = check_text("assistant_response", turn.assistant_response)
            encoded = encode_raw_messages(turn.raw_messages)
            tokens, per_message = estimate_turn(self._estimator, prompt, response, encoded)
            stored = ConversationTurn(
                user_prompt=prompt,
                assistant_response=response,
                raw_messages=list(turn.raw_messages),
                token_estimate=tokens,
                metadata=check_metadata(turn.metadata),
            )
            encoded_turns.append(EncodedTurn(stored, encoded, per_message, owner))
        if not encoded_turns:
            return []
        vectors = yield from self._embed_turns([t.turn for t in encoded_turns])
        if any(v is not None for v in vectors):
            encoded_turns = [
                replace(t, vector=v) for t, v in zip(encoded_turns, vectors, strict=True)
            ]
        return (
            yield from self._append(
                conversation_id, FixedTurns(tuple(encoded_turns)), state=state, user_id=owner
            )
        )

    def _add(
        self, conversation_id: str, message: Any, *, user_id: str | None = None
    ) -> Operation[ConversationTurn]:
        """Add one model message to a conversation (creating it if needed).

        ``message``: a pydantic-ai ``ModelMessage`` (``ModelRequest`` /
        ``ModelResponse``) or a JSON message (``{"role": ..., "content": ...}``,
        OpenAI or Anthropic style).  It starts a new turn when it opens a
        history (a user or system message) and the newest turn is complete (it
        has a model response and no tool call waiting for its result);
        otherwise it joins the newest turn, which is rewritten with it (same
        ``turn_id``, ``updated_at`` set): so a tool call and its result are
        always in one turn, and a dangling tool call is completed by its
        result when it arrives.  Limits are enforced as by :meth:`add_turn`
        (the newest turn is never evicted).  The turn's ``user_prompt`` is the
        text of its user messages, its ``assistant_response`` the text of its
        last model response with text.

        Returns:
            The turn that now holds the message (with every message of it).

        Raises:
            EntryValidationError: A bad id, or a tool result that answers no
                tool call of its turn (nothing written).
            ConversationNotFoundError: The conversation is another user's.
            TypeError: The message is neither a pydantic-ai message nor JSON.
        """
        added = yield from self._add_many(conversation_id, [message], user_id=user_id)
        return added[-1]

    def _add_many(
        self, conversation_id: str, messages: Sequence[Any], *, user_id: str | None = None
    ) -> Operation[list[ConversationTurn]]:
        """Add model messages in order, as :meth:`add` would one by one, in ONE unit of work.

        All pydantic-ai messages, or all JSON messages (a mix is refused).  All
        or nothing: a failure leaves the conversation as it was.

        Returns:
            The turns written, oldest first: the newest stored turn when the
            first messages joined it, then one per new turn (``[]`` for no
            messages, nothing written).
        """
        conversation_id = check_conversation_id(conversation_id)
        if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
            raise TypeError("messages must be a sequence of messages")
        owner = self._acting_user(user_id)
        encoded = encode_raw_messages(list(messages))
        if encoded is None:
            return []
        batch = MessageBatch(encoded, self._estimator, owner)
        return (yield from self._append(conversation_id, batch))

    def _append(
        self,
        conversation_id: str,
        build: TurnsBuilder,
        *,
        state: StateDelta | None = None,
        user_id: str | None = None,
    ) -> Operation[list[ConversationTurn]]:
        """Run the batch (no summarizer inside the caller's transaction), then report it.

        ``state``: applied in the batch's unit of work, for ``user_id``.
        """
        op = add_turns(conversation_id, build, self._policy, self._summarizer)
        if state is not None:
            op = with_state(op, conversation_id, state, user_id)
        done = yield from released_before_callouts(
            op,
            SessionHold.of(self._store, warn=False),
        )
        for appended in done:
            yield from self._report(conversation_id, appended)
        return [appended.turn for appended in done]

    def _report(self, conversation_id: str, appended: Appended) -> Operation[None]:
        """Tell the observers what a committed append did (evictions, a new summary)."""
        plan = appended.plan
        if plan is None:
            return
        over = self._newest_over(plan.turn)
        if plan.evicted_turn_ids or over is not None:
            evicted = plan.evicted_turns
            event = TrimEvent(
                conversation_id=conversation_id,
                reason=plan.reason or over or "max_tokens",
                evicted_turn_ids=plan.evicted_turn_ids,
                turns_removed=len(evicted),
                messages_removed=sum(t.message_count for t in evicted),
                turns_remaining=plan.turn_count,
                messages_remaining=plan.total_messages,
                tokens_remaining=plan.total_tokens,
                promoted_ids=appended.promoted_ids,
                newest_over_budget=over is not None,
            )
            logger.debug("conversation %r trimmed: %s", conversation_id, event)
            _telemetry.evicted(event.turns_removed, event.reason)
            yield from notify(self._on_trim, event)
        if appended.new_summary is not None:
            yield from notify(
                self._on_summarize,
                SummarizeEvent(conversation_id, appended.new_summary, plan.evicted_turn_ids),
            )

    def _newest_over(self, turn: ConversationTurn) -> str | None:
        """The limit ``turn`` alone exceeds (``"max_tokens"`` / ``"max_messages"``), or ``None``."""
        limits = self._limits
        if limits.max_tokens is not None and turn.token_estimate > limits.max_tokens:
            return "max_tokens"
        if limits.max_messages is not None and turn.message_count > limits.max_messages:
            return "max_messages"
        return None
