"""Adapters that run the workloads through firefly_orm's public API."""

from __future__ import annotations

import inspect
import sys
from typing import Any

from bench.common import UNLIMITED, estimate_tokens


def _memory(
    store: Any,
    max_tokens: int | None,
    max_messages: int | None = None,
    *,
    text_search: bool = True,
) -> Any:
    from firefly_orm.conversation import ConversationMemory

    # The default (indexed) memory is built as earlier versions take it.
    options: dict[str, Any] = {} if text_search else {"text_search": False}
    if max_tokens is None:  # never evict, never trim (by tokens): no token limit
        options["max_messages"] = max_messages
        try:
            return ConversationMemory(
                store=store, max_tokens=None, summarize_threshold=None, **options
            )
        except (TypeError, ValueError):  # a version without max_tokens=None: a huge budget
            return ConversationMemory(
                store=store, max_tokens=UNLIMITED, summarize_threshold=UNLIMITED, **options
            )
    return ConversationMemory(store=store, max_tokens=max_tokens, summarize_threshold=0, **options)


#: The library's last-N read, when it has one.
RECENT_API = "get_recent_messages(cid, n)"


def last_n_api(memory: Any) -> str:
    """How the library reads a conversation's last N messages.

    ``get_recent_messages(cid, n)`` when the library has it (one indexed
    ``ORDER BY ... DESC LIMIT`` read), else a reader with ``max_messages=n``
    (the newest whole turns holding at most ``n`` messages), so the bench also
    runs against earlier versions.  (``get_recent(cid, n)`` returns the newest
    ``n`` turns, not messages.)
    """
    if callable(getattr(memory, "get_recent_messages", None)):
        return RECENT_API
    return "max_messages reader"


def _library_rows(conversations: list[tuple[str, list[tuple[str, str, Any]]]]) -> list[Any]:
    """Column values of the rows ConversationMemory would store for these conversations."""
    from firefly_orm.conversation import ConversationTurn, encode_raw_messages
    from firefly_orm.conversation._rows import (
        INDEX_NAMESPACE,
        conversation_namespace,
        head_entry,
        index_entry,
        turn_entry,
    )
    from firefly_orm.sql._statements import entry_values

    has_text_search = "text_search" in inspect.signature(turn_entry).parameters
    rows = []
    for cid, turns in conversations:
        namespace = conversation_namespace(cid)
        total = 0
        for number, (user, assistant, messages) in enumerate(turns):
            turn = ConversationTurn(
                turn_id=number,
                user_prompt=user,
                assistant_response=assistant,
                token_estimate=estimate_tokens(user, assistant),
            )
            encoded = encode_raw_messages(messages)
            if has_text_search:
                row = turn_entry(namespace, turn, encoded, text_search=True)
            else:  # a version before ConversationMemory(text_search=...)
                row = turn_entry(namespace, turn, encoded)  # type: ignore[call-arg]
            rows.append(entry_values(namespace, row))
            total += turn.token_estimate
        head = head_entry(
            cid,
            None,
            next_turn_id=len(turns),
            total_tokens=total,
            turn_count=len(turns),
            summary=None,
        )
        rows.append(entry_values(namespace, head))
        rows.append(entry_values(INDEX_NAMESPACE, index_entry(cid)))
    return rows


class _Base:
    def __init__(
        self, store: Any, *, max_tokens: int | None = None, text_search: bool = True
    ) -> None:
        """``text_search=False``: the writer is ``ConversationMemory(text_search=False)``
        (turns outside the full-text index; :data:`bench.cells.OURS_UNINDEXED`)."""
        self.store = store
        self.writer = _memory(store, max_tokens, text_search=text_search)
        self._readers: dict[int | None, Any] = {}
        self._last_readers: dict[int, Any] = {}
        self._working: dict[str, Any] = {}
        self.last_n_api = last_n_api(self.writer)
        self.detail = {"last_n_api": self.last_n_api}

    def reader(self, budget: int | None) -> Any:
        """A ConversationMemory whose max_tokens is the read budget (reads never evict)."""
        if budget not in self._readers:
            self._readers[budget] = _memory(self.store, budget)
        return self._readers[budget]

    def last_reader(self, n: int) -> Any:
        """A ConversationMemory whose reads keep at most ``n`` messages (no token limit)."""
        if n not in self._last_readers:
            self._last_readers[n] = _memory(self.store, None, max_messages=n)
        return self._last_readers[n]

    def working(self, scope: str) -> Any:
        from firefly_orm.working import WorkingMemory

        if scope not in self._working:
            self._working[scope] = WorkingMemory(store=self.store, scope_id=scope)
        return self._working[scope]


class Ours(_Base):
    """Sync API: ConversationMemory.add_turn / get_message_history, WorkingMemory."""

    name = "firefly_orm"

    def add_turn(self, cid: str, user: str, assistant: str, messages: list[dict[str, str]]) -> None:
        self.writer.add_turn(cid, user, assistant, messages)

    def history(self, cid: str, budget: int | None) -> list[Any]:
        result: list[Any] = self.reader(budget).get_message_history(cid)
        return result

    def recent(self, cid: str, n: int) -> list[Any]:
        """The last ``n`` messages through the library's last-N read (:func:`last_n_api`)."""
        result: list[Any]
        if self.last_n_api == RECENT_API:
            result = self.writer.get_recent_messages(cid, n)
        else:
            result = self.last_reader(n).get_message_history(cid)
        return result

    def wm_set(self, scope: str, key: str, value: Any) -> None:
        self.working(scope).set(key, value)

    def wm_get(self, scope: str, key: str) -> Any:
        return self.working(scope).get(key)

    def wm_delete(self, scope: str, key: str) -> None:
        self.working(scope).delete(key)

    def bulk_fill(self, conversations: list[tuple[str, list[tuple[str, str, Any]]]]) -> None:
        """Untimed set-up for W4: load whole conversations quickly.

        Builds the very rows the library writes (its own row helpers) and inserts
        them with one executemany; W4 then checks that ours and the baseline read
        identical histories, so a format drift fails loudly.  Falls back to
        ``import_conversation`` (one transaction per conversation, ~2 ms a turn)
        when those helpers are not there.
        """
        try:
            rows = _library_rows(conversations)
            import sqlalchemy as sa

            from firefly_orm.sql._statements import TABLE
        except (ImportError, AttributeError) as exc:
            print(f"bench: W4 fill through import_conversation (slow): {exc}", file=sys.stderr)
            for cid, turns in conversations:
                data = {
                    "turns": [
                        {"turn_id": n, "user_prompt": u, "assistant_response": a, "raw_messages": m}
                        for n, (u, a, m) in enumerate(turns)
                    ]
                }
                self.writer.import_conversation(data, conversation_id=cid)
            return
        self.store.ensure_initialized()
        with self.store.engine.begin() as conn:
            conn.execute(sa.insert(TABLE), rows)

    def close(self) -> None:
        self.store.close()


class AsyncOurs(_Base):
    """Async API: async_add_turn / async_get_message_history, WorkingMemory.async_*."""

    name = "firefly_orm async"

    async def open(self) -> None:
        await self.store.async_initialize()

    async def add_turn(
        self, cid: str, user: str, assistant: str, messages: list[dict[str, str]]
    ) -> None:
        await self.writer.async_add_turn(cid, user, assistant, messages)

    async def history(self, cid: str, budget: int | None) -> list[Any]:
        result: list[Any] = await self.reader(budget).async_get_message_history(cid)
        return result

    async def recent(self, cid: str, n: int) -> list[Any]:
        """:meth:`Ours.recent` through the async API."""
        result: list[Any]
        if self.last_n_api == RECENT_API:
            result = await self.writer.async_get_recent_messages(cid, n)
        else:
            result = await self.last_reader(n).async_get_message_history(cid)
        return result

    async def wm_set(self, scope: str, key: str, value: Any) -> None:
        await self.working(scope).async_set(key, value)

    async def wm_get(self, scope: str, key: str) -> Any:
        return await self.working(scope).async_get(key)

    async def wm_delete(self, scope: str, key: str) -> None:
        await self.working(scope).async_delete(key)

    async def close(self) -> None:
        await self.store.async_close()
