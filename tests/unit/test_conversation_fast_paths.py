"""The read and write fast paths of conversations give what the general rules give.

History, last-N and context reads take
:func:`~firefly_orm.conversation._context.newest_whole_turns` (only what each turn
row recorded at write time) before the general window rule
(:func:`~firefly_orm.conversation._context.place_window`, which inspects every
message); turn rows store their per-message token estimates only where a window
may start inside the turn; entries are copied and turned into column values
without the mapped attributes' descriptors.  Each is checked against the slow
form it stands for, over random conversations (hypothesis) and limits.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.orm import Session

from firefly_orm.conversation._codec import encode_raw_messages
from firefly_orm.conversation._context import (
    ContextWindow,
    checked_turns,
    history_messages,
    newest_whole_turns,
    pinned_part,
    place_window,
)
from firefly_orm.conversation._messages import estimate_turn, inspect_encoded
from firefly_orm.conversation._model import ConversationTurn
from firefly_orm.conversation._rows import (
    conversation_namespace,
    head_entry,
    stored_message_tokens,
    turn_entry,
)
from firefly_orm.entry import MemoryEntry, metadata, utcnow
from firefly_orm.entry._model import HEAD_ARCHIVED_COLUMN, HEAD_UPDATED_COLUMN
from firefly_orm.errors import StoreCorruptedError
from firefly_orm.sql import PostgreSQLStore, SQLiteStore
from firefly_orm.sql._statements import entry_values, insert_values
from firefly_orm.tokens import TokenEstimator

NAMESPACE = conversation_namespace("fast-paths")
ESTIMATOR = TokenEstimator()

# --------------------------------------------------------------------------- generators

words = st.text(alphabet="abc xyz", max_size=30)


@st.composite
def turn_messages(draw: st.DrawFn, number: int) -> list[dict[str, Any]] | None:
    """The raw messages of one turn: plain, with tool rounds, several prompts, or odd."""
    shape = draw(st.sampled_from(["none", "plain", "tools", "prompts", "continues", "orphan"]))
    if shape == "none":
        return None
    prompt = {"role": "user", "content": draw(words)}
    answer = {"role": "assistant", "content": draw(words)}
    if shape == "plain":
        return [prompt, answer]
    if shape == "prompts":  # a later message opens: a window may start inside this turn
        return [prompt, answer, {"role": "user", "content": draw(words)}, answer]
    if shape == "continues":  # the turn does not open a history
        return [answer, {"role": "user", "content": draw(words)}, answer]
    call = f"call-{number}"
    if shape == "orphan":  # answers a call of another turn
        return [{"role": "tool", "tool_call_id": f"call-{number - 1}", "content": "ok"}, answer]
    return [
        prompt,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call, "function": {"name": "f", "arguments": draw(words)}}],
        },
        {"role": "tool", "tool_call_id": call, "content": draw(words)},
        answer,
    ]


@st.composite
def conversations(draw: st.DrawFn) -> list[tuple[ConversationTurn, Any, list[int] | None]]:
    """Turns as the library stores them: the turn, its encoded messages, its estimates."""
    turns = []
    for number in range(draw(st.integers(0, 12))):
        raw = draw(turn_messages(number))
        prompt, answer = draw(words), draw(words)
        encoded = encode_raw_messages(raw)
        tokens, per_message = estimate_turn(ESTIMATOR, prompt, answer, encoded)
        turn = ConversationTurn(
            turn_id=number,
            user_prompt=prompt,
            assistant_response=answer,
            raw_messages=raw or [],
            token_estimate=tokens,
        )
        turns.append((turn, encoded, per_message))
    return turns


def stored(turn: ConversationTurn, encoded: Any, per_message: list[int] | None) -> Any:
    """A turn row's content as a store hands it back (JSON)."""
    return json.loads(
        json.dumps(turn_entry(NAMESPACE, turn, encoded, per_message, text_search=True).content)
    )


limits = st.tuples(st.none() | st.integers(0, 120), st.none() | st.integers(0, 14))


# --------------------------------------------------------------------------- history fast path


@settings(max_examples=400, deadline=None)
@given(turns=conversations(), limit=limits, earlier_release=st.booleans(), bare=st.booleans())
def test_the_history_fast_path_gives_the_general_window(
    turns: list[tuple[ConversationTurn, Any, list[int] | None]],
    limit: tuple[int | None, int | None],
    earlier_release: bool,
    bare: bool,
) -> None:
    """Over rows of this release and of earlier ones (whose raw messages may even be a
    bare list, as something else than the codec wrote them)."""
    max_tokens, max_messages = limit
    rows = [stored(turn, encoded, None if earlier_release else per) for turn, encoded, per in turns]
    if earlier_release and bare:
        for row in rows:
            if row["raw_messages"]:
                row["raw_messages"] = row["raw_messages"]["messages"]
    newest_first = rows[::-1]
    fast = newest_whole_turns(
        newest_first, NAMESPACE, max_tokens=max_tokens, max_messages=max_messages
    )
    general = place_window(
        checked_turns(list(rows), NAMESPACE),
        max_tokens=max_tokens,
        max_messages=max_messages,
        whole_turns=True,
    )
    tool_free = not any(
        info.calls or info.results
        for row in rows
        for info in inspect_encoded(row["raw_messages"], with_text=False)
    )
    if tool_free:
        assert fast is not None  # only tool calls take the general path
    if fast is not None:
        assert fast == general


def _provider_valid(messages: list[Any]) -> bool:
    """An OpenAI-style history a provider accepts: opens on user/system, no orphan result."""
    calls: set[str] = set()
    for index, message in enumerate(messages):
        if index == 0 and message.get("role") not in ("user", "system"):
            return False
        calls.update(c["id"] for c in message.get("tool_calls") or [])
        if message.get("role") == "tool" and message.get("tool_call_id") not in calls:
            return False
    return bool(messages)


@settings(max_examples=300, deadline=None)
@given(turns=conversations(), limit=limits, whole_turns=st.booleans())
def test_keep_one_never_gives_an_empty_window_while_a_valid_one_exists(
    turns: list[tuple[ConversationTurn, Any, list[int] | None]],
    limit: tuple[int | None, int | None],
    whole_turns: bool,
) -> None:
    """Issue 33: what fits is unchanged; when nothing does, the window holds the
    newest messages a provider accepts (over the limits), the fast path agreeing."""
    max_tokens, max_messages = limit
    rows = checked_turns([stored(turn, encoded, per) for turn, encoded, per in turns], NAMESPACE)
    options: dict[str, Any] = {
        "max_tokens": max_tokens,
        "max_messages": max_messages,
        "whole_turns": whole_turns,
    }
    plain = place_window(rows, **options)
    kept = place_window(rows, **options, keep_one=True, complete=True)
    if plain.turn < len(rows):
        assert kept == plain
        return
    style = None if whole_turns else "dict"
    newest = history_messages(rows, kept, style)
    if kept.turn < len(rows):
        assert not kept.reached_oldest
        if style is None:  # the history leaves out turns without raw messages
            assert newest == [] or _provider_valid(newest)
        else:
            assert _provider_valid(newest)
    else:  # no valid window at all
        if not whole_turns:  # every message may start a window: none is valid
            everything = history_messages(rows, ContextWindow(0, 0, True), "dict")
            assert not any(_provider_valid(everything[i:]) for i in range(len(everything)))
    if whole_turns and rows:
        fast = newest_whole_turns(
            rows[::-1], NAMESPACE, max_tokens=max_tokens, max_messages=max_messages, keep_one=True
        )
        if fast is not None and not fast.reached_oldest:  # else: it reads older turns
            assert fast == kept


@settings(max_examples=500, deadline=None)
@given(turns=conversations(), limit=limits, earlier_release=st.booleans())
def test_the_partial_turn_fast_path_gives_the_general_window(
    turns: list[tuple[ConversationTurn, Any, list[int] | None]],
    limit: tuple[int | None, int | None],
    earlier_release: bool,
) -> None:
    """Last-N and context reads find the general rule's window from the rows' records."""
    max_tokens, max_messages = limit
    rows = checked_turns(
        [stored(turn, encoded, None if earlier_release else per) for turn, encoded, per in turns],
        NAMESPACE,
    )
    fast = newest_whole_turns(
        rows[::-1], NAMESPACE, max_tokens=max_tokens, max_messages=max_messages, inside_turns=True
    )
    general = place_window(
        rows, max_tokens=max_tokens, max_messages=max_messages, whole_turns=False
    )
    chat_only = all(
        not turn.raw_messages or [m["role"] for m in turn.raw_messages] == ["user", "assistant"]
        for turn, _encoded, _per in turns
    )
    if chat_only and not earlier_release:
        assert fast is not None  # plain chats never take the general path
    if fast is not None:
        assert fast == general


@pytest.mark.parametrize(
    ("max_tokens", "max_messages", "start"),
    [(20, None, 2), (19, None, 3), (21, None, 2), (None, 4, 2), (None, 3, 3), (20, 4, 2)],
)
def test_the_partial_turn_fast_path_at_the_limits(
    max_tokens: int | None, max_messages: int | None, start: int
) -> None:
    """Turns that fit exactly are in the window; one token or message more is not."""
    chat = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    rows = []
    for number in range(4):
        turn = ConversationTurn(
            turn_id=number, user_prompt="q", assistant_response="a", token_estimate=10
        )
        rows.append(stored(turn, encode_raw_messages(chat), [5, 5]))
    rows = checked_turns(rows, NAMESPACE)
    fast = newest_whole_turns(
        rows[::-1], NAMESPACE, max_tokens=max_tokens, max_messages=max_messages, inside_turns=True
    )
    assert fast == ContextWindow(start, 0, False)
    assert fast == place_window(
        rows, max_tokens=max_tokens, max_messages=max_messages, whole_turns=False
    )


def test_the_fast_path_checks_every_row_read() -> None:
    rows = [
        stored(
            ConversationTurn(turn_id=n, user_prompt="q", assistant_response="a", token_estimate=5),
            None,
            None,
        )
        for n in range(4)
    ][::-1]
    rows[-1]["token_estimate"] = "many"  # the oldest row, far outside a 6-token window
    with pytest.raises(StoreCorruptedError, match="unreadable turn"):
        newest_whole_turns(rows, NAMESPACE, max_tokens=6, max_messages=None)
    with pytest.raises(StoreCorruptedError, match="holds list, not an object"):
        newest_whole_turns([[1, 2]], NAMESPACE, max_tokens=None, max_messages=None)
    with pytest.raises(StoreCorruptedError, match="holds str, not an object"):
        checked_turns(["text"], NAMESPACE)


# --------------------------------------------------------------------------- per-message estimates


@settings(max_examples=300, deadline=None)
@given(turns=conversations(), limit=limits)
def test_unsplit_estimates_give_the_same_context_windows(
    turns: list[tuple[ConversationTurn, Any, list[int] | None]],
    limit: tuple[int | None, int | None],
) -> None:
    """Rows store ``[]`` unless a window may start inside the turn: nothing changes."""
    max_tokens, max_messages = limit
    rows = [stored(turn, encoded, per) for turn, encoded, per in turns]
    split = []
    for row, (_turn, _encoded, per) in zip(rows, turns, strict=True):
        split.append({**row, "message_tokens": per} if per is not None else row)
    for whole_turns in (False, True):
        assert place_window(
            rows, max_tokens=max_tokens, max_messages=max_messages, whole_turns=whole_turns
        ) == place_window(
            split, max_tokens=max_tokens, max_messages=max_messages, whole_turns=whole_turns
        )
    assert pinned_part(rows, max_tokens=max_tokens, max_messages=max_messages) == pinned_part(
        split, max_tokens=max_tokens, max_messages=max_messages
    )


def test_estimates_are_stored_only_where_a_window_may_start_inside_the_turn() -> None:
    def row_for(raw: list[dict[str, Any]], per_message: list[int] | None) -> MemoryEntry:
        turn = ConversationTurn(turn_id=1, user_prompt="q", assistant_response="a")
        return turn_entry(NAMESPACE, turn, encode_raw_messages(raw), per_message, text_search=True)

    plain = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    assert row_for(plain, [3, 4]).content["message_tokens"] == []
    assert stored_message_tokens(row_for(plain, [3, 4])) == []
    two_prompts = [*plain, {"role": "system", "content": "s"}, {"role": "user", "content": "q2"}]
    assert row_for(two_prompts, [1, 2, 3, 4]).content["message_tokens"] == [1, 2, 3, 4]
    earlier = row_for(plain, None)  # an earlier release's row stays one (archived copies)
    assert "message_tokens" not in earlier.content
    assert stored_message_tokens(earlier) is None


# --------------------------------------------------------------------------- message inspection


odd_messages = st.one_of(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "system", "developer", "assistant", "tool", "x"]),
            "content": st.none() | words | st.just([{"type": "text", "text": "t"}]) | st.just(7),
        },
        optional={
            "tool_calls": st.just([]) | st.just([{"id": "c1", "function": {"name": "f"}}]),
            "tool_call_id": st.just("c1"),
        },
    ),
    st.just("bare text"),
    st.just({"no": "role"}),
    st.just(None),
)


@settings(max_examples=300, deadline=None)
@given(messages=st.lists(odd_messages, min_size=1, max_size=6))
def test_inspection_without_text_finds_the_same_facts(messages: list[Any]) -> None:
    encoded = {"format": "json", "messages": messages}
    with_text = inspect_encoded(encoded)
    without = inspect_encoded(encoded, with_text=False)
    assert [(i.opens, i.calls, i.results) for i in without] == [
        (i.opens, i.calls, i.results) for i in with_text
    ]
    assert all(info.text == "" for info in without)


# --------------------------------------------------------------------------- entries


def test_a_head_copy_is_the_previous_head_with_new_content() -> None:
    first = head_entry(
        "c1", None, next_turn_id=1, total_tokens=5, turn_count=1, summary=None, user_id="u1"
    )
    first.version = 7
    first.metadata_["note"] = {"nested": [1]}
    again = head_entry("c1", first, next_turn_id=2, total_tokens=9, turn_count=2, summary="s")
    assert again.to_dict() == first.copy_entry(content=again.content).to_dict()
    assert again.content["summary"] == "s" and again.user_id == "u1" and again.version == 7
    first.metadata_["note"]["nested"].append(2)  # the copy shares nothing with the original
    assert again.metadata_["note"] == {"nested": [1]}


def _by_descriptors(entry: MemoryEntry) -> dict[str, Any]:
    return {
        "entry_id": entry.entry_id,
        "namespace": "ns",
        "scope": entry.scope,
        "key": entry.key,
        "content": entry.content,
        "metadata": entry.metadata_,
        "created_at": entry.created_at,
        "expires_at": entry.expires_at,
        "importance": entry.importance,
        "version": entry.version,
        "user_id": entry.user_id,
        "search_text": entry.search_text,
        "search_language": entry.search_language,
        # Not entry fields: the conversation list's columns, None off a head (0010).
        HEAD_UPDATED_COLUMN: None,
        HEAD_ARCHIVED_COLUMN: None,
    }


def test_column_values_read_the_entry_fields() -> None:
    entry = MemoryEntry(
        namespace="ns", key="k", content={"a": [1]}, user_id="u", search_text="t", version=3
    )
    assert entry_values("ns", entry) == _by_descriptors(entry)
    assert entry_values("ns", MemoryEntry.from_dict(entry.to_dict())) == _by_descriptors(entry)


def test_column_values_of_an_entry_a_session_expired() -> None:
    """Attributes a commit expired are loaded through the mapping, not read as missing."""
    engine = sa.create_engine("sqlite://")
    metadata.create_all(engine)
    with Session(engine) as session:
        entry = MemoryEntry(
            namespace="ns", key="k", content={"a": 1}, user_id="u", created_at=utcnow()
        )
        session.add(entry)
        session.commit()  # expires every attribute
        assert "user_id" not in entry.__dict__
        values = entry_values("ns", entry)
        assert values == _by_descriptors(entry)
        assert values["user_id"] == "u" and values["content"] == {"a": 1}
    engine.dispose()


# --------------------------------------------------------------------------- inserts


def test_insert_values_leave_out_only_the_empty_usually_null_columns() -> None:
    bare = MemoryEntry(namespace="ns", key="k", content=1)
    assert insert_values("ns", bare) == {
        name: value
        for name, value in entry_values("ns", bare).items()
        if name
        not in (
            "user_id",
            "search_text",
            "search_language",
            HEAD_UPDATED_COLUMN,
            HEAD_ARCHIVED_COLUMN,
        )
    }
    owned = bare.copy_entry(user_id="u")
    assert insert_values("ns", owned) == {
        name: value
        for name, value in entry_values("ns", owned).items()
        if name not in ("search_text", "search_language", HEAD_UPDATED_COLUMN, HEAD_ARCHIVED_COLUMN)
    }


@pytest.fixture(params=["sqlite", "postgres"])
def sql_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        yield SQLiteStore(tmp_path / "fast.sqlite3")
        return
    url = request.getfixturevalue("postgres_url")
    schema = "fast_" + uuid.uuid4().hex[:10]
    yield PostgreSQLStore(url, schema_name=schema)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.schema.DropSchema(schema, cascade=True, if_exists=True))
    engine.dispose()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_upsert_without_owner_or_search_text_clears_them(sql_store: Any, mode: str) -> None:
    """The shorter INSERT of an entry without them still sets them NULL on conflict."""
    full = MemoryEntry(
        namespace="ns",
        key="k",
        content={"v": 1},
        user_id="ann",
        search_text="kiwi mango",
        search_language="english",
    )
    cleared = full.copy_entry(user_id=None, search_text=None, search_language=None)

    def found() -> list[Any]:
        with sql_store.unit_of_work(read_only=True) as uow:
            return [hit.entry.key for hit in uow.entries.search("ns", "kiwi")]

    async def save(entry: MemoryEntry) -> Any:
        if mode == "sync":
            sql_store.save("ns", entry)
            return sql_store.load_by_key("ns", "k")
        await sql_store.async_save("ns", entry)
        return await sql_store.async_load_by_key("ns", "k")

    async def run() -> tuple[Any, Any, list[Any], list[Any]]:
        before = await save(full)
        found_before = found()
        after = await save(cleared)
        if mode == "async":
            await sql_store.async_close()
        return before, after, found_before, found()

    before, after, found_before, found_after = asyncio.run(run())
    sql_store.close()
    assert (before.user_id, before.search_text, before.search_language) == (
        "ann",
        "kiwi mango",
        "english",
    )
    assert len(found_before) == 1
    assert (after.user_id, after.search_text, after.search_language) == (None, None, None)
    assert after.version == before.version + 1 and after.content == {"v": 1}
    assert found_after == []
