"""The turn model, the summarizer types and the checks on what callers pass in.

Add a field to a turn here (:class:`ConversationTurn`), then in its row codec
(:mod:`firefly_orm.conversation._rows`) and, if it is exported, in
:mod:`firefly_orm.conversation._transfer`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, Self, cast, runtime_checkable

from pydantic import AwareDatetime, BaseModel, Field, field_validator, model_validator

from firefly_orm.conversation._messages import MESSAGES_PER_PLAIN_TURN
from firefly_orm.entry import check_json_structure, utcnow
from firefly_orm.errors import EntryValidationError
from firefly_orm.summarization import SUMMARY_TURN_ID, SUMMARY_TURN_PROMPT

__all__ = [
    "SUMMARY_TURN_ID",
    "SUMMARY_TURN_PROMPT",
    "AsyncSummarizer",
    "ConversationTurn",
    "Summarizer",
]


class ConversationTurn(BaseModel):
    """One user/assistant exchange.

    Attributes:
        turn_id: Unique, increasing id within the conversation.
        user_prompt: What the user said.
        assistant_response: What the assistant answered.
        raw_messages: The model messages of the exchange (pydantic-ai
            ``ModelMessage`` objects, or JSON values); ``None`` becomes ``[]``.
        timestamp: Timezone-aware time the turn was added.
        token_estimate: Tokens counted for what the model sees of the turn: the
            text of its raw messages when it has some, else
            ``"{user_prompt}\\n{assistant_response}"``.
        metadata: A JSON object.
        message_count: Model messages the turn stands for: ``len(raw_messages)``,
            or 2 (prompt and answer) without raw messages; filled in when 0.
        updated_at: When the turn last changed after it was added (an edit,
            a message added to it by ``add`` / ``add_many``); ``None``: never.
    """

    turn_id: int = 0
    user_prompt: str = ""
    assistant_response: str = ""
    raw_messages: list[Any] = Field(default_factory=list)
    timestamp: AwareDatetime = Field(default_factory=utcnow)
    token_estimate: int = 0
    metadata: dict[str, Any] = Field(default_factory=dict)
    message_count: int = 0
    updated_at: AwareDatetime | None = None

    @field_validator("raw_messages", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value

    @model_validator(mode="after")
    def _count_messages(self) -> Self:
        if self.message_count <= 0:
            self.message_count = len(self.raw_messages) or MESSAGES_PER_PLAIN_TURN
        return self


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


# --------------------------------------------------------------------------- input checks


def check_conversation_id(conversation_id: Any) -> str:
    """``conversation_id`` if it is a non-empty string without NUL characters."""
    if not isinstance(conversation_id, str) or not conversation_id:
        raise EntryValidationError("conversation_id", "must be a non-empty string")
    if "\x00" in conversation_id:
        raise EntryValidationError("conversation_id", "must not contain NUL characters")
    return conversation_id


def check_text(name: str, value: Any) -> str:
    """``value`` if it is a string."""
    if not isinstance(value, str):
        raise EntryValidationError(name, f"must be a str, got {type(value).__name__}")
    return value


def check_metadata(metadata: Any) -> dict[str, Any]:
    """A JSON copy of ``metadata`` (``None`` -> ``{}``), or ``EntryValidationError``."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping) or not all(isinstance(k, str) for k in metadata):
        raise EntryValidationError("metadata", "must be a dict with string keys")
    check_json_structure("metadata", dict(metadata))
    try:
        return cast(dict[str, Any], json.loads(json.dumps(dict(metadata), allow_nan=False)))
    except (TypeError, ValueError) as exc:
        raise EntryValidationError("metadata", f"must be JSON-serialisable ({exc})") from None


def check_int(name: str, value: Any, minimum: int) -> int:
    """``value`` if it is an integer (not a bool) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise EntryValidationError(name, f"must be an integer >= {minimum}, got {value!r}")
    return value
