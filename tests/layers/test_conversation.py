"""ConversationMemory on every store: upstream behaviours, and none of its faults.

The ``conv_store`` fixture runs each test on every memory-layer backend of the
registry (``tests/store_backends.py``: in-memory, file, SQLite, PostgreSQL and
MongoDB, each database test in a schema or database of its own, dropped
afterwards).  ``conv_env.reopen()`` gives a NEW store object over the same data,
to show that a new process would resume the conversations.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
from store_backends import OpenedBackend

from firefly_orm.conversation import (
    INDEX_NAMESPACE,
    SUMMARY_TURN_ID,
    SUMMARY_TURN_PROMPT,
    ConversationMemory,
    ConversationTurn,
    TrimEvent,
    archive_namespace,
    conversation_namespace,
)
from firefly_orm.entry import MemoryEntry, MemoryScope
from firefly_orm.errors import EntryValidationError
from firefly_orm.store import InMemoryStore
from firefly_orm.tokens import TokenEstimator

# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def conv_env(layer_backend: OpenedBackend) -> OpenedBackend:
    """conftest's ``layer_backend`` (each memory-layer backend); ``reopen()``: a new store."""
    return layer_backend


@pytest.fixture
def conv_store(conv_env: OpenedBackend) -> Any:
    return conv_env.store


# --------------------------------------------------------------------------- helpers


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


EST = TokenEstimator()


def tokens(prompt: str, response: str) -> int:
    return EST.estimate(f"{prompt}\n{response}")


class RecordingSummarizer:
    """Sync summarizer that records what it was given."""

    def __init__(self) -> None:
        self.calls: list[list[ConversationTurn]] = []
        self.by_summary: dict[str, list[ConversationTurn]] = {}
        self._lock = threading.Lock()

    def __call__(self, turns: list[ConversationTurn]) -> str:
        with self._lock:
            self.calls.append(list(turns))
            summary = f"summary#{len(self.calls)}:" + ",".join(str(t.turn_id) for t in turns)
            self.by_summary[summary] = list(turns)
        return summary

    def covered_turn_ids(self, summary: str | None) -> list[int]:
        """Turn ids a summary covers, following the chain of folded summaries."""
        covered: list[int] = []
        while summary is not None:
            turns = self.by_summary[summary]
            summary = None
            for turn in turns:
                if turn.turn_id == SUMMARY_TURN_ID:
                    summary = turn.assistant_response
                else:
                    covered.append(turn.turn_id)
        return sorted(covered)


def stored_turn_rows(store: Any, cid: str) -> list[MemoryEntry]:
    return [
        e
        for e in store.load(conversation_namespace(cid))
        if e.key is not None and e.key.startswith("turn:")
    ]


def model_messages(text: str) -> list[Any]:
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    return [
        ModelRequest(parts=[UserPromptPart(content=f"ask {text}")]),
        ModelResponse(parts=[TextPart(content=f"answer {text}")]),
    ]


# --------------------------------------------------------------------------- basics


def test_add_turn_creates_conversation_and_returns_the_turn(conv_store: Any) -> None:
    mem = ConversationMemory(store=conv_store)
    turn = mem.add_turn("c1", "hello there", "general kenobi", None, metadata={"k": 1})
    assert turn.turn_id == 0
    assert turn.token_estimate == tokens("hello there", "general kenobi") == 5
    assert turn.raw_messages == []
    assert turn.metadata == {"k": 1}
    assert turn.timestamp.tzinfo is not None
    assert mem.conversation_ids == ["c1"]
    turns = mem.get_turns("c1")
    assert [(t.turn_id, t.user_prompt, t.assistant_response) for t in turns] == [
        (0, "hello there", "general kenobi")
    ]
    assert turns[0].metadata == {"k": 1}
    assert turns[0].timestamp == turn.timestamp
    assert mem.get_total_tokens("c1") == 5
    assert mem.get_summary("c1") is None


def test_new_conversation_is_listed_and_empty(conv_store: Any) -> None:
    mem = ConversationMemory(store=conv_store)
    cid = mem.new_conversation()
    assert len(cid) == 32 and int(cid, 16) >= 0
    other = mem.new_conversation()
    assert mem.conversation_ids == [cid, other]
    assert mem.get_turns(cid) == []
    assert mem.get_message_history(cid) == []
    assert mem.get_total_tokens(cid) == 0
    assert mem.add_turn(cid, "a", "b").turn_id == 0


def test_unknown_conversation_reads(conv_store: Any) -> None:
    mem = ConversationMemory(store=conv_store)
    assert mem.get_turns("nope") == []
    assert mem.get_message_history("nope") == []
    assert mem.get_total_tokens("nope") == 0
    assert mem.get_summary("nope") is None
    assert mem.export_conversation("nope") == {
        "conversation_id": "nope",
        "turns": [],
        "summary": None,
        "total_tokens": 0,
    }
    assert mem.conversation_ids == []


def test_rows_are_conversation_scoped_one_per_turn(conv_store: Any) -> None:
    mem = ConversationMemory(store=conv_store)
    for i in range(3):
        mem.add_turn("c", f"p{i}", f"r{i}")
    rows = conv_store.load(conversation_namespace("c"))
    assert sorted(e.key or "" for e in rows) == [
        "head",
        "turn:000000000000",
        "turn:000000000001",
        "turn:000000000002",
    ]
    assert all(e.scope == MemoryScope.CONVERSATION for e in rows)
    head = conv_store.load_by_key(conversation_namespace("c"), "head")
    assert head.content["next_turn_id"] == 3
    assert head.content["total_tokens"] == mem.get_total_tokens("c")
    assert head.version >= 3  # bumped on every write
    index = conv_store.load(INDEX_NAMESPACE)
    assert [e.key for e in index] == ["c"]


# --------------------------------------------------------------------------- upstream faults


def test_turn_ids_stay_unique_and_increasing_after_eviction(conv_store: Any) -> None:
    # Upstream used len(turns) as the id, so ids repeated after eviction ([2, 2]).
    for summarizer in (None, RecordingSummarizer()):
        mem = ConversationMemory(
            max_tokens=20, summarize_threshold=0, summarizer=summarizer, store=conv_store
        )
        cid = mem.new_conversation()
        returned = [mem.add_turn(cid, words(4), words(4)).turn_id for _ in range(8)]
        assert returned == list(range(8))
        kept = [t.turn_id for t in mem.get_turns(cid)]
        assert kept == [6, 7]
        assert mem.add_turn(cid, "x", "y").turn_id == 8


def test_summary_folds_in_the_previous_summary(conv_store: Any) -> None:
    summarizer = RecordingSummarizer()
    mem = ConversationMemory(
        max_tokens=20, summarize_threshold=0, summarizer=summarizer, store=conv_store
    )
    for _ in range(2):
        mem.add_turn("c", words(4), words(4))  # 10 tokens each
    assert summarizer.calls == []
    mem.add_turn("c", words(4), words(4))
    assert [[t.turn_id for t in call] for call in summarizer.calls] == [[0]]
    first = mem.get_summary("c")
    assert first == "summary#1:0"

    mem.add_turn("c", words(4), words(4))
    second_call = summarizer.calls[1]
    assert second_call[0].turn_id == SUMMARY_TURN_ID
    assert second_call[0].user_prompt == SUMMARY_TURN_PROMPT
    assert second_call[0].assistant_response == first
    assert [t.turn_id for t in second_call[1:]] == [1]
    assert mem.get_summary("c") == "summary#2:-1,1"
    assert summarizer.covered_turn_ids(mem.get_summary("c")) == [0, 1]


def test_eviction_without_summarizer_bounds_storage(conv_store: Any) -> None:
    # Upstream never dropped turns without a summarizer: unbounded growth.
    mem = ConversationMemory(max_tokens=30, summarize_threshold=0, store=conv_store)
    for i in range(40):
        mem.add_turn("c", words(3, f"p{i}-"), words(3, f"r{i}-"))  # 7 tokens each
    rows = stored_turn_rows(conv_store, "c")
    assert len(rows) == 4  # 4 * 7 = 28 <= 30 < 35
    assert sum(r.content["token_estimate"] for r in rows) == mem.get_total_tokens("c") == 28
    assert mem.get_summary("c") is None
    assert [t.turn_id for t in mem.get_turns("c")] == [36, 37, 38, 39]


def test_threshold_below_max_tokens_evicts_down_to_the_threshold(conv_store: Any) -> None:
    """The model's rule (issue 33): above the threshold the oldest turns are evicted
    and summarised down to it, whatever max_tokens is."""
    summarizer = RecordingSummarizer()
    events: list[TrimEvent] = []
    mem = ConversationMemory(
        max_tokens=30,
        summarize_threshold=25,
        summarizer=summarizer,
        store=conv_store,
        on_trim=events.append,
    )
    for _ in range(2):
        mem.add_turn("c", words(4), words(4))  # 10 each -> 20, not > 25
    assert len(mem.get_turns("c")) == 2
    assert summarizer.calls == []
    mem.add_turn("c", words(4), words(4))  # 30 > 25 (not > 30): down to 20
    assert [t.turn_id for t in mem.get_turns("c")] == [1, 2]
    assert mem.get_total_tokens("c") == 20
    assert [[t.turn_id for t in c] for c in summarizer.calls] == [[0]]
    assert [(e.reason, e.evicted_turn_ids) for e in events] == [("summarize_threshold", (0,))]


@pytest.mark.parametrize("threshold", [None, 0])
def test_no_threshold_evicts_past_max_tokens(conv_store: Any, threshold: int | None) -> None:
    mem = ConversationMemory(max_tokens=30, summarize_threshold=threshold, store=conv_store)
    for _ in range(3):
        mem.add_turn("c", words(4), words(4))  # 10 each -> 30, not > 30
    assert len(mem.get_turns("c")) == 3
    mem.add_turn("c", words(4), words(4))
    assert [t.turn_id for t in mem.get_turns("c")] == [1, 2, 3]
    assert mem.get_total_tokens("c") == 30


def test_no_token_limit(conv_store: Any) -> None:
    """selectools' max_tokens=None (issue 33): no token eviction, no token window."""
    mem = ConversationMemory(max_tokens=None, max_messages=6, store=conv_store)
    assert mem.max_tokens is None and mem.config()["max_tokens"] is None
    for i in range(4):
        mem.add_turn("c", words(400), words(400), [{"m": i}])  # 1064 tokens each
    assert [t.turn_id for t in mem.get_turns("c")] == [0, 1, 2, 3]  # 4 messages <= 6
    assert mem.get_message_history("c") == [{"m": i} for i in range(4)]
    assert len(mem.get_context("c")) == 4
    for i in range(4, 8):
        mem.add_turn("c", "p", "a", [{"m": i}])
    assert mem.get_message_history("c") == [{"m": i} for i in range(2, 8)]  # max_messages


def test_threshold_above_max_tokens_lets_storage_grow_to_it(conv_store: Any) -> None:
    summarizer = RecordingSummarizer()
    mem = ConversationMemory(
        max_tokens=20, summarize_threshold=45, summarizer=summarizer, store=conv_store
    )
    for _ in range(4):
        mem.add_turn("c", words(4), words(4))
    assert mem.get_total_tokens("c") == 40  # over max_tokens, under the threshold
    assert summarizer.calls == []
    # history is still trimmed to max_tokens at read time (JSON raw messages here)
    mem.add_turn("c", words(4), words(4))  # 50 > 45 and > 20: trim to 20
    assert [t.turn_id for t in mem.get_turns("c")] == [3, 4]
    assert [[t.turn_id for t in c] for c in summarizer.calls] == [[0, 1, 2]]


def test_history_is_newest_contiguous_suffix(conv_store: Any) -> None:
    mem = ConversationMemory(max_tokens=25, summarize_threshold=1000, store=conv_store)
    mem.add_turn("c", words(1), words(1), [{"m": 0}])  # 2 tokens
    mem.add_turn("c", words(8), words(8), [{"m": 1}, {"m": 1.5}])  # 21 tokens
    mem.add_turn("c", words(4), words(4), [{"m": 2}])  # 10
    mem.add_turn("c", words(4), words(4), None)  # 10, no raw messages
    mem.add_turn("c", words(1), words(1), [{"m": 4}])  # 2
    # 2 + 10 + 10 = 22 fits; +21 does not -> stop (do not skip to the 2-token turn 0)
    assert mem.get_message_history("c") == [{"m": 2}, {"m": 4}]


def test_oversize_newest_turn_is_kept_in_the_history(conv_store: Any) -> None:
    """At least one message (issue 33): upstream gave [] here."""
    events: list[TrimEvent] = []
    mem = ConversationMemory(
        max_tokens=5, summarize_threshold=0, store=conv_store, on_trim=events.append
    )
    mem.add_turn("c", "a", "b", [{"m": 1}])
    assert mem.get_message_history("c") == [{"m": 1}]
    assert events == []
    mem.add_turn("c", words(10), words(10), [{"m": 2}])
    assert mem.get_message_history("c") == [{"m": 2}]
    assert mem.get_context("c") == [{"m": 2}]
    assert [t.turn_id for t in mem.get_turns("c")] == [1]  # the newest turn is never evicted
    (event,) = events
    assert (event.evicted_turn_ids, event.newest_over_budget) == ((0,), True)


def test_persistence_across_a_new_conversation_memory(conv_env: OpenedBackend) -> None:
    summarizer = RecordingSummarizer()
    mem = ConversationMemory(
        max_tokens=20, summarize_threshold=0, summarizer=summarizer, store=conv_env.store
    )
    empty = mem.new_conversation()
    for _ in range(4):
        mem.add_turn("c", words(4), words(4), [{"n": 1}])
    before = mem.export_conversation("c")

    resumed = ConversationMemory(
        max_tokens=20, summarize_threshold=0, summarizer=summarizer, store=conv_env.reopen()
    )
    assert resumed.conversation_ids == [empty, "c"]
    assert resumed.export_conversation("c") == before
    assert resumed.get_summary("c") == mem.get_summary("c") is not None
    assert resumed.get_message_history("c") == [{"n": 1}, {"n": 1}]
    assert resumed.add_turn("c", words(4), words(4)).turn_id == 4
    assert [t.turn_id for t in resumed.get_turns("c")] == [3, 4]
    # the estimate is stored, never recomputed with another estimator on read
    other = ConversationMemory(
        store=conv_env.reopen(), estimator=TokenEstimator(tokens_per_word=10)
    )
    assert [t.token_estimate for t in other.get_turns("c")] == [10, 10]
    assert other.get_total_tokens("c") == 20


def test_pydantic_ai_messages_survive_restart_and_export_import(conv_env: OpenedBackend) -> None:
    from pydantic_ai.messages import ModelRequest, ModelResponse

    mem = ConversationMemory(store=conv_env.store)
    first, second = model_messages("one"), model_messages("two")
    mem.add_turn("c", "ask one", "answer one", first)
    mem.add_turn("c", "ask two", "answer two", second)

    resumed = ConversationMemory(store=conv_env.reopen())
    history = resumed.get_message_history("c")
    assert history == first + second
    assert isinstance(history[0], ModelRequest) and isinstance(history[1], ModelResponse)
    assert resumed.get_turns("c")[1].raw_messages == second

    exported = json.loads(json.dumps(resumed.export_conversation("c")))  # JSON-clean
    turn0 = exported["turns"][0]
    assert set(turn0) == {
        "turn_id",
        "user_prompt",
        "assistant_response",
        "token_estimate",
        "metadata",
        "timestamp",
        "raw_messages",
    }
    assert turn0["raw_messages"]["format"] == "pydantic-ai"
    new_id = resumed.import_conversation(exported, conversation_id="copy")
    assert new_id == "copy"
    assert resumed.get_message_history("copy") == first + second
    assert isinstance(resumed.get_message_history("copy")[0], ModelRequest)


def test_json_raw_messages_round_trip_and_bad_ones_write_nothing(conv_store: Any) -> None:
    mem = ConversationMemory(store=conv_store)
    mem.add_turn("c", "p", "r", ({"role": "user", "n": [1, 2]}, "text", 3))
    assert mem.get_message_history("c") == [{"role": "user", "n": [1, 2]}, "text", 3]
    with pytest.raises(TypeError, match="raw_messages"):
        mem.add_turn("c", "p", "r", [object()])
    with pytest.raises(TypeError, match="raw_messages"):
        mem.add_turn("c", "p", "r", "not a list")
    with pytest.raises(TypeError, match="raw_messages"):
        mem.add_turn("new", "p", "r", [model_messages("x")[0], object()])
    assert len(mem.get_turns("c")) == 1
    assert mem.conversation_ids == ["c"]


def test_summarizer_failure_writes_nothing(conv_store: Any) -> None:
    calls: list[int] = []

    def failing(turns: list[ConversationTurn]) -> str:
        calls.append(len(turns))
        raise RuntimeError("LLM down")

    mem = ConversationMemory(
        max_tokens=20, summarize_threshold=0, summarizer=failing, store=conv_store
    )
    mem.add_turn("c", words(4), words(4))
    mem.add_turn("c", words(4), words(4))
    before = mem.export_conversation("c")
    head_before = conv_store.load_by_key(conversation_namespace("c"), "head")
    with pytest.raises(RuntimeError, match="LLM down"):
        mem.add_turn("c", words(4), words(4))
    assert calls == [1]
    assert mem.export_conversation("c") == before  # the turn was not added
    assert conv_store.load_by_key(conversation_namespace("c"), "head").version == (
        head_before.version
    )
    assert len(stored_turn_rows(conv_store, "c")) == 2


def test_summarizer_returning_non_string_writes_nothing(conv_store: Any) -> None:
    def not_a_string(turns: list[ConversationTurn]) -> Any:
        return 42

    mem = ConversationMemory(
        max_tokens=10, summarize_threshold=0, summarizer=not_a_string, store=conv_store
    )
    mem.add_turn("c", words(4), words(4))
    with pytest.raises(TypeError, match="str"):
        mem.add_turn("c", words(4), words(4))
    assert len(mem.get_turns("c")) == 1


def test_summarizer_does_not_run_inside_a_transaction(conv_store: Any) -> None:
    # On SQLite a unit of work holds the write lock (BEGIN IMMEDIATE); a summarizer
    # that uses the store itself would deadlock (until busy_timeout) if it ran inside.
    other = ConversationMemory(store=conv_store)
    seen: list[int] = []

    def summarizer(turns: list[ConversationTurn]) -> str:
        other.add_turn("side", "summarizer was here", "ok")
        seen.append(len(other.get_turns("side")))
        seen.append(len(other.get_turns("main")))
        return "s"

    mem = ConversationMemory(
        max_tokens=10, summarize_threshold=0, summarizer=summarizer, store=conv_store
    )
    mem.add_turn("main", words(4), words(4))
    mem.add_turn("main", words(4), words(4))
    assert seen == [1, 1]  # the second main turn was not visible yet
    assert mem.get_summary("main") == "s"
    assert [t.turn_id for t in mem.get_turns("main")] == [1]
    assert sorted(mem.conversation_ids) == ["main", "side"]


def test_keep_evicted_archives_instead_of_deleting(conv_store: Any) -> None:
    mem = ConversationMemory(
        max_tokens=20, summarize_threshold=0, keep_evicted=True, store=conv_store
    )
    for i in range(5):
        mem.add_turn("c", words(4, f"p{i}"), words(4), [{"i": i}])
    assert [t.turn_id for t in mem.get_turns("c")] == [3, 4]
    archived = mem.get_archived_turns("c")
    assert [t.turn_id for t in archived] == [0, 1, 2]
    assert archived[1].user_prompt == words(4, "p1")
    assert archived[2].raw_messages == [{"i": 2}]
    assert len(conv_store.load(archive_namespace("c"))) == 3
    mem.clear("c")
    assert mem.get_archived_turns("c") == []


def test_clear_and_clear_all(conv_store: Any) -> None:
    mem = ConversationMemory(
        max_tokens=10, summarize_threshold=0, summarizer=lambda t: "s", store=conv_store
    )
    for cid in ("a", "b", "c"):
        mem.add_turn(cid, words(4), words(4))
        mem.add_turn(cid, words(4), words(4))
    assert mem.get_summary("a") == "s"
    mem.clear("a")
    assert mem.conversation_ids == ["b", "c"]
    assert mem.get_turns("a") == [] and mem.get_summary("a") is None
    assert conv_store.load(conversation_namespace("a")) == []
    assert mem.add_turn("a", "x", "y").turn_id == 0  # ids restart after clear (documented)
    mem.clear("never-existed")
    mem.clear_all()
    assert mem.conversation_ids == []
    for cid in ("a", "b", "c"):
        assert conv_store.load(conversation_namespace(cid)) == []
    assert conv_store.load(INDEX_NAMESPACE) == []


# --------------------------------------------------------------------------- export / import


def test_export_has_the_upstream_shape(conv_store: Any) -> None:
    mem = ConversationMemory(store=conv_store)
    mem.add_turn("c", "p0", "r0", metadata={"a": [1]})
    mem.add_turn("c", "p1", "r1")
    data = mem.export_conversation("c")
    assert set(data) == {"conversation_id", "turns", "summary", "total_tokens"}
    assert data["conversation_id"] == "c"
    assert data["summary"] is None
    assert data["total_tokens"] == sum(t["token_estimate"] for t in data["turns"]) == 4
    assert [{k: v for k, v in t.items() if k != "timestamp"} for t in data["turns"]] == [
        {
            "turn_id": 0,
            "user_prompt": "p0",
            "assistant_response": "r0",
            "token_estimate": 2,
            "metadata": {"a": [1]},
        },
        {
            "turn_id": 1,
            "user_prompt": "p1",
            "assistant_response": "r1",
            "token_estimate": 2,
            "metadata": {},
        },
    ]


def test_import_ids_replace_and_summary_rules(conv_store: Any) -> None:
    mem = ConversationMemory(store=conv_store)
    data = {
        "conversation_id": "from-data",
        "turns": [
            {"user_prompt": "a b", "assistant_response": "c", "token_estimate": 0},
            {
                "turn_id": 5,
                "user_prompt": "x",
                "assistant_response": "y",
                "token_estimate": 7,
                "metadata": {"m": 1},
            },
        ],
        "summary": "old news",
    }
    assert mem.import_conversation(data) == "from-data"
    turns = mem.get_turns("from-data")
    assert [(t.turn_id, t.token_estimate) for t in turns] == [(0, tokens("a b", "c")), (5, 7)]
    assert turns[1].metadata == {"m": 1}
    assert mem.get_summary("from-data") == "old news"
    assert mem.get_total_tokens("from-data") == tokens("a b", "c") + 7
    assert mem.add_turn("from-data", "n", "m").turn_id == 6

    # override id wins; an import without summary keeps the existing one; turns replaced
    assert (
        mem.import_conversation({"turns": [{"user_prompt": "only"}]}, conversation_id="from-data")
        == "from-data"
    )
    assert [t.user_prompt for t in mem.get_turns("from-data")] == ["only"]
    assert mem.get_summary("from-data") == "old news"
    assert len(stored_turn_rows(conv_store, "from-data")) == 1

    fresh = mem.import_conversation({})
    assert len(fresh) == 32 and mem.get_turns(fresh) == []
    assert fresh in mem.conversation_ids


def test_import_renumbers_upstream_duplicate_ids(conv_store: Any) -> None:
    mem = ConversationMemory(store=conv_store)
    upstream = {  # upstream exports after eviction had repeated ids
        "conversation_id": "u",
        "turns": [
            {"turn_id": 2, "user_prompt": "a", "assistant_response": "b", "token_estimate": 2},
            {"turn_id": 2, "user_prompt": "c", "assistant_response": "d", "token_estimate": 2},
        ],
        "summary": None,
        "total_tokens": 4,
    }
    mem.import_conversation(upstream)
    assert [(t.turn_id, t.user_prompt) for t in mem.get_turns("u")] == [(0, "a"), (1, "c")]


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_hostile_raw_messages_and_metadata_write_nothing(conv_store: Any) -> None:
    """Deep nesting and colliding keys are refused before anything is written
    (they were a RecursionError, and a silently lost value, before)."""
    mem = ConversationMemory(store=conv_store)
    mem.add_turn("c", "p", "r", [{"role": "user", "content": "hi"}], metadata={"k": 1})
    hostile_raw: list[list[Any]] = [
        [_nested(10_000)],
        [{1: "a", "1": "b"}],
        [{"nested": {True: 1, "true": 2}}],
    ]
    for raw in hostile_raw:
        with pytest.raises(EntryValidationError, match="raw_messages"):
            mem.add_turn("c", "p", "r", raw)
    for meta in ({"m": _nested(10_000)}, {"m": {1: "a", "1": "b"}}):
        with pytest.raises(EntryValidationError, match="metadata"):
            mem.add_turn("c", "p", "r", metadata=meta)
    exported = mem.export_conversation("c")
    with pytest.raises(EntryValidationError, match="raw_messages"):
        mem.import_conversation(
            {
                "conversation_id": "c",
                "turns": [{"raw_messages": {"format": "json", "messages": [_nested(10_000)]}}],
            }
        )
    assert [t.turn_id for t in mem.get_turns("c")] == [0]
    assert mem.export_conversation("c") == exported


def test_import_rejects_bad_data_before_writing(conv_store: Any) -> None:
    mem = ConversationMemory(store=conv_store)
    with pytest.raises(EntryValidationError):
        mem.import_conversation(["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(EntryValidationError):
        mem.import_conversation({"conversation_id": "x", "turns": ["nope"]})
    with pytest.raises(EntryValidationError):
        mem.import_conversation({"conversation_id": "x", "turns": [{"metadata": {1: object()}}]})
    with pytest.raises(EntryValidationError):
        mem.import_conversation(
            {"conversation_id": "x", "turns": [{"raw_messages": {"format": "??", "messages": []}}]}
        )
    assert mem.conversation_ids == []


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("cid", ["", None, 3, "a\x00b"])
def test_bad_conversation_id(cid: Any) -> None:
    mem = ConversationMemory()
    with pytest.raises(EntryValidationError, match="conversation_id"):
        mem.add_turn(cid, "p", "r")
    with pytest.raises(EntryValidationError, match="conversation_id"):
        mem.get_turns(cid)


def test_bad_arguments_write_nothing() -> None:
    store = InMemoryStore()
    mem = ConversationMemory(store=store)
    with pytest.raises(EntryValidationError, match="user_prompt"):
        mem.add_turn("c", None, "r")  # type: ignore[arg-type]
    with pytest.raises(EntryValidationError, match="assistant_response"):
        mem.add_turn("c", "p", 5)  # type: ignore[arg-type]
    with pytest.raises(EntryValidationError, match="metadata"):
        mem.add_turn("c", "p", "r", metadata={"x": object()})
    with pytest.raises(EntryValidationError, match="metadata"):
        mem.add_turn("c", "p", "r", metadata=["x"])  # type: ignore[arg-type]
    assert store.namespaces == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_tokens": 0},
        {"max_tokens": True},
        {"max_tokens": 1.5},
        {"summarize_threshold": -1},
        {"summarize_threshold": "3"},
    ],
)
def test_bad_constructor_arguments(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ConversationMemory(**kwargs)


def test_constructor_defaults_and_repr() -> None:
    mem = ConversationMemory()
    assert mem.max_tokens == 4096
    # No threshold by default (issue 33): turns are evicted above max_tokens, as before
    # the threshold rule (3072 would now evict at 3072).
    assert mem.summarize_threshold is None
    assert isinstance(mem.store, InMemoryStore)
    assert not mem.keep_evicted
    assert "max_tokens=4096" in repr(mem)
    with pytest.raises(TypeError):
        ConversationMemory(4096)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        ConversationMemory(summarizer="nope")  # type: ignore[arg-type]


def test_turn_model_normalises_none_and_requires_aware_timestamps() -> None:
    from datetime import datetime

    assert ConversationTurn(raw_messages=None).raw_messages == []
    with pytest.raises(ValueError):
        ConversationTurn(timestamp=datetime(2024, 1, 1))


# --------------------------------------------------------------------------- cost


class CountingStore(InMemoryStore):
    """Records what units of work read, to check per-turn cost."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[str, Any]] = []

    def unit_of_work(self, *, read_only: bool = False) -> Any:
        uow = super().unit_of_work(read_only=read_only)
        repo = uow.entries
        reads = self.reads

        class Spy:
            def __getattr__(self, name: str) -> Any:
                return getattr(repo, name)

            def get_by_key(self, ns: str, key: str, *, for_update: bool = False) -> Any:
                reads.append(("get_by_key", key))
                return repo.get_by_key(ns, key, for_update=for_update)

            def list(self, ns: str, **kw: Any) -> Any:
                rows = repo.list(ns, **kw)
                reads.append(("list", (kw.get("limit"), len(rows))))
                return rows

        uow.entries = Spy()  # type: ignore[assignment]
        return uow


def test_add_turn_does_not_load_the_whole_conversation() -> None:
    store = CountingStore()
    mem = ConversationMemory(max_tokens=10_000, summarize_threshold=0, store=store)
    for _ in range(200):
        mem.add_turn("c", "a b", "c d")
    store.reads.clear()
    mem.add_turn("c", "a b", "c d")
    assert store.reads == [("get_by_key", "head")]  # no turn rows read at all

    small = ConversationMemory(max_tokens=40, summarize_threshold=0, store=store)
    store.reads.clear()
    small.add_turn("c", words(10), words(10))  # 26 tokens: evicts most of 201 turns
    lists = [r for r in store.reads if r[0] == "list"]
    assert lists and all(limit is not None for limit, _ in (r[1] for r in lists))
    assert len(small.get_turns("c")) <= 8
    store.reads.clear()
    small.add_turn("c", "x", "y")  # bounded again: a small read at most
    assert all(r[1][1] <= 16 for r in store.reads if r[0] == "list")


def test_history_reads_only_what_fits() -> None:
    store = CountingStore()
    mem = ConversationMemory(max_tokens=10, summarize_threshold=10**9, store=store)
    for i in range(300):
        mem.add_turn("c", "a", "b", [i])  # 2 tokens each, never evicted (huge threshold)
    store.reads.clear()
    assert mem.get_message_history("c") == [295, 296, 297, 298, 299]
    assert all(rows <= 32 for kind, (limit, rows) in store.reads if kind == "list")


# --------------------------------------------------------------------------- concurrency


def _run_threads(n: int, target: Callable[[int], None]) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def run(i: int) -> None:
        try:
            barrier.wait()
            target(i)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_concurrent_threads_lose_no_turn(conv_env: OpenedBackend) -> None:
    n_threads, per_thread = 4, 6
    mem = ConversationMemory(max_tokens=100_000, summarize_threshold=0, store=conv_env.store)
    # Create the schema first: concurrent first-time initialisation has its own
    # tests (tests/integration/test_sql_store.py); this one is about turns.
    assert mem.conversation_ids == []
    stores = [conv_env.reopen() for _ in range(n_threads)]
    for store in stores:
        ConversationMemory(store=store).get_turns("warm-up")

    def worker(i: int) -> None:
        # each thread has its own memory object (and, except in-memory, its own store)
        local = ConversationMemory(max_tokens=100_000, summarize_threshold=0, store=stores[i])
        for j in range(per_thread):
            local.add_turn("shared", f"t{i} n{j}", "ok")

    _run_threads(n_threads, worker)
    turns = mem.get_turns("shared")
    assert [t.turn_id for t in turns] == list(range(n_threads * per_thread))
    assert sorted(t.user_prompt for t in turns) == sorted(
        f"t{i} n{j}" for i in range(n_threads) for j in range(per_thread)
    )
    for i in range(n_threads):  # each writer's turns kept their order
        mine = [t.user_prompt for t in turns if t.user_prompt.startswith(f"t{i} ")]
        assert mine == [f"t{i} n{j}" for j in range(per_thread)]
    assert mem.get_total_tokens("shared") == sum(t.token_estimate for t in turns)
    assert mem.conversation_ids == ["shared"]


def test_concurrent_threads_with_eviction_keep_head_consistent(conv_env: OpenedBackend) -> None:
    summarizer = RecordingSummarizer()
    mem = ConversationMemory(
        max_tokens=30, summarize_threshold=0, summarizer=summarizer, store=conv_env.store
    )
    mem.new_conversation()

    def worker(i: int) -> None:
        for _ in range(5):
            mem.add_turn("c", words(4), words(4))

    _run_threads(4, worker)
    rows = stored_turn_rows(conv_env.store, "c")
    assert len(rows) == 3
    assert mem.get_total_tokens("c") == sum(r.content["token_estimate"] for r in rows) == 30
    head = conv_env.store.load_by_key(conversation_namespace("c"), "head")
    assert head.content["next_turn_id"] == 20
    assert [t.turn_id for t in mem.get_turns("c")] == [17, 18, 19]
    # the final summary covers every evicted turn exactly once, through the chain of
    # folded summaries (summaries computed for a plan that lost a race were discarded)
    assert summarizer.covered_turn_ids(mem.get_summary("c")) == list(range(17))


# --------------------------------------------------------------------------- async


async def test_async_twins(conv_env: OpenedBackend) -> None:
    store = conv_env.store
    summarizer = RecordingSummarizer()
    mem = ConversationMemory(
        max_tokens=20, summarize_threshold=0, summarizer=summarizer, store=store
    )
    try:
        cid = await mem.async_new_conversation()
        assert await mem.async_conversation_ids() == [cid]
        for i in range(3):
            turn = await mem.async_add_turn(cid, words(4), words(4), [{"i": i}], metadata={"i": i})
            assert turn.turn_id == i
        assert [t.turn_id for t in await mem.async_get_turns(cid)] == [1, 2]
        assert await mem.async_get_message_history(cid) == [{"i": 1}, {"i": 2}]
        assert await mem.async_get_total_tokens(cid) == 20
        assert await mem.async_get_summary(cid) == "summary#1:0"
        exported = await mem.async_export_conversation(cid)
        assert exported["total_tokens"] == 20
        copy = await mem.async_import_conversation(exported, conversation_id="copy")
        assert await mem.async_get_message_history(copy) == [{"i": 1}, {"i": 2}]
        assert await mem.async_get_archived_turns(cid) == []
        await mem.async_clear(cid)
        assert await mem.async_conversation_ids() == ["copy"]
        await mem.async_clear_all()
        assert await mem.async_conversation_ids() == []
    finally:
        close = getattr(store, "async_close", None)
        if close is not None:
            await close()


async def test_async_summarizers_are_awaited(conv_env: OpenedBackend) -> None:
    calls: list[str] = []

    async def coro_summarizer(turns: list[ConversationTurn]) -> str:
        await asyncio.sleep(0)
        calls.append("coro")
        return "from coroutine"

    class ObjectSummarizer:
        async def async_summarize(self, turns: list[ConversationTurn]) -> str:
            calls.append("object")
            return "from object"

    def sync_summarizer(turns: list[ConversationTurn]) -> str:
        calls.append(f"sync in {threading.current_thread() is threading.main_thread()}")
        return "from sync"

    store = conv_env.store
    try:
        for summarizer, expected in (
            (coro_summarizer, "from coroutine"),
            (ObjectSummarizer(), "from object"),
            (sync_summarizer, "from sync"),
        ):
            mem = ConversationMemory(
                max_tokens=10, summarize_threshold=0, summarizer=summarizer, store=store
            )
            cid = await mem.async_new_conversation()
            await mem.async_add_turn(cid, words(4), words(4))
            await mem.async_add_turn(cid, words(4), words(4))
            assert await mem.async_get_summary(cid) == expected
        # a sync summarizer runs in a worker thread, not on the event loop
        assert calls == ["coro", "object", "sync in False"]
    finally:
        close = getattr(store, "async_close", None)
        if close is not None:
            await close()


def test_async_summarizer_in_sync_code_without_a_loop() -> None:
    async def summarizer(turns: list[ConversationTurn]) -> str:
        return "async summary"

    mem = ConversationMemory(max_tokens=10, summarize_threshold=0, summarizer=summarizer)
    mem.add_turn("c", words(4), words(4))
    mem.add_turn("c", words(4), words(4))
    assert mem.get_summary("c") == "async summary"


async def test_async_summarizer_from_sync_call_inside_a_loop_is_a_clear_error() -> None:
    async def summarizer(turns: list[ConversationTurn]) -> str:
        return "never"

    mem = ConversationMemory(max_tokens=10, summarize_threshold=0, summarizer=summarizer)
    mem.add_turn("c", words(4), words(4))
    with pytest.raises(RuntimeError, match="async_add_turn"):
        mem.add_turn("c", words(4), words(4))
    assert len(mem.get_turns("c")) == 1  # nothing written
    await mem.async_add_turn("c", words(4), words(4))
    assert mem.get_summary("c") == "never"


async def test_async_concurrent_tasks_lose_no_turn(conv_env: OpenedBackend) -> None:
    store = conv_env.store
    mem = ConversationMemory(max_tokens=100_000, summarize_threshold=0, store=store)
    try:
        await mem.async_new_conversation()

        async def worker(i: int) -> None:
            for j in range(4):
                await mem.async_add_turn("shared", f"t{i} n{j}", "ok")

        await asyncio.gather(*(worker(i) for i in range(4)))
        turns = await mem.async_get_turns("shared")
        assert [t.turn_id for t in turns] == list(range(16))
        assert len({t.user_prompt for t in turns}) == 16
    finally:
        close = getattr(store, "async_close", None)
        if close is not None:
            await close()


def test_works_without_pydantic_ai(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import firefly_orm.conversation._codec as conversation

    store = InMemoryStore()
    with_pai = ConversationMemory(store=store)
    with_pai.add_turn("c", "p", "r", model_messages("x"))

    monkeypatch.setattr(conversation, "_pydantic_ai_cache", [None])  # as if not installed
    mem = ConversationMemory(store=store)
    mem.add_turn("j", "p", "r", [{"role": "user"}])
    assert mem.get_message_history("j") == [{"role": "user"}]
    with caplog.at_level("WARNING", logger="firefly_orm"):
        history = mem.get_message_history("c")
    assert [m["kind"] for m in history] == ["request", "response"]  # JSON dicts
    assert any("pydantic-ai is not installed" in r.getMessage() for r in caplog.records)
