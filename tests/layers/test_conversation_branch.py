"""``ConversationMemory.branch`` / ``rewind`` / ``pop_turn`` and the branch tree (issue 32).

The behaviour runs on every memory-layer backend (conftest's ``layer_backend``),
sync everywhere and async on two; the races (threads released together by a
barrier, each with its own store object) on SQLite, PostgreSQL and MongoDB:
appends racing a branch, a rewind and a pop lose and double no turn, and every
head stays consistent with its turns (``verify`` finds nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from modes import call
from races import race
from store_backends import OpenedBackend, backend_params, layer_mode_params

from firefly_orm.conversation import (
    ConversationMemory,
    ConversationTurn,
    conversation_namespace,
    turn_key,
)
from firefly_orm.conversation._branch import summary_within
from firefly_orm.entry import derived_entry_id
from firefly_orm.errors import ConversationNotFoundError, EntryValidationError, NotFoundError
from firefly_orm.privacy import Encryption, KeyRing, generate_key, protect
from firefly_orm.store import InMemoryStore

RACE_BACKENDS = backend_params(["sqlite", "postgres", "mongo"])


def _ids(turns: list[ConversationTurn]) -> list[int]:
    return [t.turn_id for t in turns]


async def _ten_turns(mode: str, mem: ConversationMemory, user_id: str | None = None) -> str:
    cid: str = await call(mode, mem, "new_conversation", user_id=user_id)
    for n in range(10):
        raw = [{"role": "user", "content": f"q{n}"}, {"role": "assistant", "content": f"a{n}"}]
        await call(mode, mem, "add_turn", cid, f"q{n}", f"answer {n} " * (n + 1), raw)
    return cid


@pytest.mark.parametrize(
    ("layer_backend", "mode"), layer_mode_params(async_on=["memory", "postgres"]), indirect=True
)
async def test_branch_rewind_pop_and_the_tree(layer_backend: OpenedBackend, mode: str) -> None:
    mem = ConversationMemory(store=layer_backend.store, max_tokens=None)
    cid = await _ten_turns(mode, mem, user_id="u1")
    source = await call(mode, mem, "get_turns", cid)

    # a branch at turn 3 reads turns 0-3, then its own
    branch = await call(mode, mem, "branch", cid, 3)
    mine = await call(mode, mem, "get_turns", branch)
    assert _ids(mine) == [0, 1, 2, 3]
    assert [t.model_dump() for t in mine] == [t.model_dump() for t in source[:4]]
    assert await call(mode, mem, "get_total_tokens", branch) == sum(
        t.token_estimate for t in source[:4]
    )
    assert await call(mode, mem, "owner_of", branch) == "u1"
    added = await call(mode, mem, "add_turn", branch, "own", "turn")
    assert added.turn_id == 4
    assert _ids(await call(mode, mem, "get_turns", cid)) == list(range(10))  # source untouched
    link = await call(mode, mem, "parent_of", branch)
    assert (link.conversation_id, link.parent_id, link.at_turn) == (branch, cid, 3)
    assert await call(mode, mem, "branches", cid) == [link]
    assert await call(mode, mem, "parent_of", cid) is None
    assert (await call(mode, mem, "export_conversation", branch))["branch_of"]["at_turn"] == 3

    # editing an earlier user message: branch before it, then add the edited turn
    edited = await call(mode, mem, "branch", cid, 1)
    await call(mode, mem, "add_turn", edited, "q2 edited", "new answer")
    prompts = [t.user_prompt for t in await call(mode, mem, "get_turns", edited)]
    assert prompts == ["q0", "q1", "q2 edited"]
    assert len(await call(mode, mem, "branches", cid)) == 2

    # rewind: later turns leave the conversation, kept until purged; ids not reused
    assert await call(mode, mem, "rewind", cid, 5) == [6, 7, 8, 9]
    kept = await call(mode, mem, "get_turns", cid)
    assert _ids(kept) == list(range(6))
    assert await call(mode, mem, "get_total_tokens", cid) == sum(t.token_estimate for t in kept)
    assert _ids(await call(mode, mem, "get_rewound_turns", cid)) == [6, 7, 8, 9]
    assert await call(mode, mem, "rewind", cid, 5) == []
    assert (await call(mode, mem, "add_turn", cid, "after", "rewind")).turn_id == 10

    # pop: the newest turn, whole, in one unit of work
    popped = await call(mode, mem, "pop_turn", cid)
    assert popped.turn_id == 10 and popped.user_prompt == "after"
    assert _ids(await call(mode, mem, "get_turns", cid)) == list(range(6))
    for conversation in (cid, branch, edited):
        assert await call(mode, mem, "verify", conversation) == []

    assert await call(mode, mem, "purge_rewound", cid) == 4
    assert await call(mode, mem, "get_archived_turns", cid) == []
    assert await call(mode, mem, "verify", cid) == []

    # clearing a branch takes it out of the tree; copy is copy_conversation
    await call(mode, mem, "clear", edited)
    assert await call(mode, mem, "branches", cid) == [link]
    copied = await call(mode, mem, "copy", cid)
    assert _ids(await call(mode, mem, "get_turns", copied)) == list(range(6))
    assert await call(mode, mem, "parent_of", copied) is None

    # erasing the user takes everything: turns, branches, links, rewound turns
    await call(mode, mem, "rewind", branch, 0)
    await call(mode, mem, "erase_user", "u1")
    for conversation in (cid, branch, copied):
        assert not await call(mode, mem, "exists", conversation)
        assert await call(mode, mem, "parent_of", conversation) is None
        assert await call(mode, mem, "branches", conversation) == []
        assert await call(mode, mem, "get_archived_turns", conversation) == []


async def test_bad_arguments_and_other_users() -> None:
    mem = ConversationMemory(max_tokens=None)
    cid = await _ten_turns("sync", mem, user_id="alice")
    with pytest.raises(NotFoundError):
        mem.branch(cid, 10)  # no such turn
    mem.rewind(cid, 7)
    with pytest.raises(NotFoundError):
        mem.branch(cid, 8)  # rewound: not a retained turn
    bad: Any
    for bad in (-1, True, "3"):
        with pytest.raises(EntryValidationError):
            mem.branch(cid, bad)
    with pytest.raises(EntryValidationError):
        mem.rewind(cid, -2)
    with pytest.raises(EntryValidationError):
        mem.branch(cid, 1, new_conversation_id=cid)
    other = mem.new_conversation()
    with pytest.raises(EntryValidationError):
        mem.branch(cid, 1, new_conversation_id=other)  # exists: never replaced
    with pytest.raises(ConversationNotFoundError):
        mem.branch("missing", 0)
    with pytest.raises(ConversationNotFoundError):
        mem.rewind("missing", 0)
    assert mem.pop_turn("missing") is None

    bob = mem.for_user("bob")
    for method, args in (
        (bob.branch, (cid, 1)),
        (bob.rewind, (cid, 1)),
        (bob.pop_turn, (cid,)),
        (bob.branches, (cid,)),
        (bob.parent_of, (cid,)),
        (bob.purge_rewound, (cid,)),
        (bob.get_rewound_turns, (cid,)),
    ):
        with pytest.raises(ConversationNotFoundError):
            method(*args)
    assert _ids(mem.get_turns(cid)) == list(range(8))  # nothing written by bob
    alice = mem.for_user("alice")
    assert alice.get_turns(alice.branch(cid, 2))[-1].turn_id == 2


def test_the_summary_follows_the_turns_it_covers() -> None:
    assert summary_within([0, 1, 6, 7], 5) and summary_within([0, 1, 6, 7], 6)
    assert not summary_within([0, 1, 6, 7], 1)
    assert summary_within([0, 1, 2], 0)  # no gap: an imported summary, older than turn 0

    mem = ConversationMemory(
        max_tokens=12, pin_count=1, summarizer=lambda turns: f"{len(turns)} turns"
    )
    for n in range(8):
        mem.add_turn("c", f"q{n}", "a b")  # 4 tokens each: turn 0 pinned, the rest evict
    ids = _ids(mem.get_turns("c"))
    assert ids[0] == 0 and ids[1] > 1 and mem.get_summary("c") is not None
    kept = mem.branch("c", ids[1])  # after every summarised turn: the summary comes along
    assert mem.get_summary(kept) == mem.get_summary("c")
    bare = mem.branch("c", 0)  # before them: no summary telling of turns it lacks
    assert mem.get_summary(bare) is None and _ids(mem.get_turns(bare)) == [0]
    with pytest.raises(EntryValidationError, match="summary"):
        mem.rewind("c", 0)  # a rewind does not split the summary
    assert _ids(mem.get_turns("c")) == ids


def test_pop_keeps_part_of_a_turn() -> None:
    mem = ConversationMemory(max_tokens=None)
    raw = [{"role": "user", "content": "one two"}, {"role": "assistant", "content": "three"}]
    mem.add_turn("c", "one two", "three", raw)

    def keep_first(turn: ConversationTurn) -> tuple[str, str, list[Any]] | None:
        return (turn.user_prompt, "", turn.raw_messages[:1]) if turn.raw_messages else None

    before = mem.pop_turn("c", keep=keep_first)
    assert before is not None and before.raw_messages == raw
    (turn,) = mem.get_turns("c")
    assert turn.raw_messages == raw[:1] and turn.message_count == 1
    assert mem.get_total_tokens("c") == turn.token_estimate
    assert mem.verify("c") == []
    with pytest.raises(TypeError):
        mem.pop_turn("c", keep="nope")  # type: ignore[arg-type]


def test_verify_and_repair_mend_branch_links() -> None:
    mem = ConversationMemory(max_tokens=None)
    for n in range(3):
        mem.add_turn("c", f"q{n}", "a")
    branch = mem.branch("c", 1, new_conversation_id="b")
    store = mem.store
    parent_ns = conversation_namespace("c")
    store.delete(parent_ns, derived_entry_id(parent_ns, f"branch:{branch}"))  # a torn write
    (issue,) = mem.verify("b")
    assert (issue.field, issue.expected) == ("branch_of", "c")
    assert mem.branches("c") == []
    assert mem.repair("b") == [issue]
    assert [link.conversation_id for link in mem.branches("c")] == ["b"]

    branch_ns = conversation_namespace("b")
    store.delete(branch_ns, derived_entry_id(branch_ns, "branch-parent"))
    (dangling,) = mem.verify("c")
    assert (dangling.field, dangling.found) == ("branches", "b")
    head_before = store.load_by_key(parent_ns, "head")
    assert mem.repair("c") == [dangling]
    assert mem.branches("c") == [] and mem.verify("c") == []
    head_after = store.load_by_key(parent_ns, "head")
    assert head_before is not None and head_after is not None
    assert head_after.version == head_before.version  # the head is not rewritten


# --------------------------------------------------------------------------- races


@pytest.mark.parametrize("layer_backend", RACE_BACKENDS, indirect=True)
def test_appends_racing_branch_rewind_and_pop(layer_backend: OpenedBackend) -> None:
    mem = ConversationMemory(store=layer_backend.store, max_tokens=None)
    for n in range(5):
        mem.add_turn("c", f"base {n}", "a")
    writers, per_writer = 2, 5
    stores = [layer_backend.reopen() for _ in range(writers + 3)]
    branches: list[str] = []
    popped: list[ConversationTurn] = []
    rewound: list[int] = []

    def appender(i: int) -> Callable[[], None]:
        local = ConversationMemory(store=stores[i], max_tokens=None)

        def append() -> None:
            for j in range(per_writer):
                local.add_turn("c", f"w{i} n{j}", "a")

        return append

    def brancher() -> None:
        local = ConversationMemory(store=stores[writers], max_tokens=None)
        branches.extend(local.branch("c", 2) for _ in range(2))

    def rewinder() -> None:
        local = ConversationMemory(store=stores[writers + 1], max_tokens=None)
        rewound.extend(local.rewind("c", 4))

    def popper() -> None:
        local = ConversationMemory(store=stores[writers + 2], max_tokens=None)
        for _ in range(2):
            turn = local.pop_turn("c")
            if turn is not None:
                popped.append(turn)

    race([appender(i) for i in range(writers)] + [brancher, rewinder, popper])

    retained = mem.get_turns("c")
    archived = mem.get_rewound_turns("c")
    assert _ids(archived) == sorted(rewound)
    every = retained + archived + popped
    expected = [f"base {n}" for n in range(5)]
    expected += [f"w{i} n{j}" for i in range(writers) for j in range(per_writer)]
    assert sorted(t.user_prompt for t in every) == sorted(expected)  # none lost, none doubled
    assert sorted(_ids(every)) == list(range(len(expected)))
    assert mem.verify("c") == []
    assert mem.get_total_tokens("c") == sum(t.token_estimate for t in retained)
    for branch in branches:
        assert [t.user_prompt for t in mem.get_turns(branch)] == ["base 0", "base 1", "base 2"]
        assert mem.verify(branch) == []
    assert sorted(link.conversation_id for link in mem.branches("c")) == sorted(branches)


def test_encrypted_store_branches_rewinds_and_erases() -> None:
    """Through ``protect()``: link rows and rewound turns are sealed at rest like every
    content, read back opened, and erased with their user."""
    inner = InMemoryStore()
    sealed = protect(inner, encryption=Encryption(KeyRing({"k1": generate_key()})))
    mem = ConversationMemory(store=sealed, max_tokens=None)
    cid = mem.new_conversation(user_id="u")
    for n in range(4):
        mem.add_turn(cid, f"Secret{n}", "a")
    branch = mem.branch(cid, 1)
    assert mem.rewind(cid, 1) == [2, 3]
    assert [t.user_prompt for t in mem.get_rewound_turns(cid)] == ["Secret2", "Secret3"]
    assert mem.parent_of(branch) is not None and mem.verify(cid) == []
    at_rest = [row.content for ns in inner.namespaces for row in inner.load(ns)]
    assert at_rest and "Secret" not in str(at_rest) and cid not in str(at_rest)
    mem.erase_user("u")
    assert all(not inner.load(ns) for ns in inner.namespaces)


def test_rewound_and_shortened_copies_keep_their_origin() -> None:
    """A branch's copied turn stays marked as a copy when a rewind archives it or a pop
    rewrites it (usage totals count the original turn only)."""
    mem = ConversationMemory(max_tokens=None)
    for n in range(3):
        mem.add_turn("c", f"q{n}", "a", [{"role": "user", "content": "x"}, {"role": "a"}])
    branch = mem.branch("c", 2)
    assert mem.rewind(branch, 1) == [2]
    mem.pop_turn(branch, keep=lambda turn: ("q1", "", turn.raw_messages[:1]))
    live = mem.store.load_by_key(conversation_namespace(branch), turn_key(1))
    rows = [*mem.store.load(f"conversation-archive:{branch}"), live]
    assert len(rows) == 2
    assert all(row is not None and row.to_dict()["metadata"]["copy_of"] == "c" for row in rows)


def test_export_import_and_copy_over_a_branch() -> None:
    """An export names a branch's parent; importing (or copying) over a branch makes it
    a standalone conversation, and an import elsewhere is one from the start."""
    mem = ConversationMemory(max_tokens=None)
    for n in range(4):
        mem.add_turn("c", f"q{n}", "a")
    mem.rewind("c", 2)
    exported = mem.export_conversation("c")
    assert [t["turn_id"] for t in exported["turns"]] == [0, 1, 2]  # rewound turns stay out
    assert "branch_of" not in exported
    first = mem.branch("c", 1, new_conversation_id="b1")
    mem.branch("c", 2, new_conversation_id="b2")
    data = mem.export_conversation(first)
    assert data["branch_of"]["conversation_id"] == "c" and data["branch_of"]["at_turn"] == 1
    assert mem.parent_of(mem.import_conversation(data, conversation_id="elsewhere")) is None
    mem.import_conversation(data)  # over b1 itself
    mem.copy_conversation("c", new_conversation_id="b2")
    assert mem.parent_of("b1") is None and mem.parent_of("b2") is None
    assert mem.branches("c") == []
    assert mem.verify("c") == mem.verify("b1") == mem.verify("b2") == []
    assert mem.get_rewound_turns("c") != []  # an export leaves the source as it is


@pytest.mark.parametrize("layer_backend", backend_params(["memory", "sqlite"]), indirect=True)
def test_evicted_copies_are_counted_once(layer_backend: OpenedBackend) -> None:
    """Copied turns a branch evicts into its archive (``keep_evicted=True``), or that
    ``update_turn`` edits, keep their ``copy_of`` mark, so usage totals count them in the
    source conversation only (the general path on the memory store, the SQL aggregate
    on SQLite)."""

    def usage(n: int) -> dict[str, Any]:
        return {"usage": {"requests": 1, "input_tokens": n, "total_tokens": n}}

    mem = ConversationMemory(store=layer_backend.store, max_tokens=None)
    for n in range(3):
        mem.add_turn("c", f"q{n}", "a", metadata=usage(1), user_id="u")
    branch = mem.branch("c", 2)
    evicting = ConversationMemory(
        store=layer_backend.store, max_tokens=12, summarize_threshold=0, keep_evicted=True
    )
    for n in range(3):
        evicting.add_turn(branch, f"new question {n} " * 3, "answer " * 3, metadata=usage(100))
    archived = mem.get_archived_turns(branch)
    assert [t.turn_id for t in archived][:3] == [0, 1, 2]  # the copies were evicted
    [mine] = mem.usage_totals(branch)
    assert (mine.turns, mine.input_tokens) == (3, 300)
    [everything] = mem.usage_totals(user_id="u")
    assert (everything.turns, everything.input_tokens) == (6, 303)
    # An edited copy, live or archived, stays counted in its source only.
    mem.update_turn(branch, 0, assistant_response="edited in the archive")
    mem.update_turn(mem.branch("c", 0), 0, assistant_response="edited")
    assert mem.usage_totals(user_id="u") == [everything]
