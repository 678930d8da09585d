"""Export/import carry a conversation's title, tags and archived flag (issue 32).

On SQLite, PostgreSQL and the memory store: an export holds the listing fields
that are set (none for a conversation without them, so the object reads as
before); an import restores them, one or several at once, and an older export
without them keeps the conversation's own; a bad field refuses the import with
nothing written.  Then once through ``firefly-orm export`` / ``import`` on
SQLite (a branch included: its ``branch_of`` is accepted and not restored).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import run_cli
from store_backends import OpenedBackend, backend_params

from firefly_orm.conversation import ConversationMemory
from firefly_orm.conversation import _transfer as transfer
from firefly_orm.errors import EntryValidationError
from firefly_orm.sql import SQLiteStore

LISTING = ("title", "tags", "archived")


def _listing(mem: ConversationMemory, cid: str) -> tuple[object, ...]:
    info = mem.conversation_info(cid)
    assert info is not None
    return (info.title, info.tags, info.archived)


@pytest.mark.parametrize(
    "layer_backend", backend_params(["sqlite", "postgres", "memory"]), indirect=True
)
def test_export_import_round_trips_title_tags_archived(layer_backend: OpenedBackend) -> None:
    mem = ConversationMemory(store=layer_backend.store, max_tokens=None)
    cid = mem.new_conversation(user_id="u1")
    mem.add_turn(cid, "q0", "a0")
    mem.add_turn(cid, "q1", "a1")
    mem.update_conversation(cid, title="Trip to Rome", tags=["travel", "it"], archived=True)
    plain = mem.new_conversation(user_id="u1")
    mem.add_turn(plain, "q", "a")

    exported = mem.export_conversation(cid)
    assert {k: exported[k] for k in LISTING} == {
        "title": "Trip to Rome",
        "tags": ["travel", "it"],
        "archived": True,
    }
    older = mem.export_conversation(plain)
    assert LISTING[0] not in older and LISTING[1] not in older and LISTING[2] not in older

    copy = mem.import_conversation(json.loads(json.dumps(exported)), conversation_id="copy")
    assert _listing(mem, copy) == ("Trip to Rome", ["travel", "it"], True)
    assert [t.user_prompt for t in mem.get_turns(copy)] == ["q0", "q1"]

    # Several at once (one unit of work): the listing fields of each are restored.
    mem.update_conversation("copy", title="Renamed", tags=[], archived=False)
    renamed = exported | {"title": "Other", "archived": False}
    assert mem.import_conversations([renamed, older]) == [cid, plain]
    assert _listing(mem, cid) == ("Other", ["travel", "it"], False)
    assert _listing(mem, plain) == (None, [], False)

    # An older export (no listing fields) keeps what the conversation has.
    mem.import_conversation({k: v for k, v in exported.items() if k not in LISTING})
    assert _listing(mem, cid) == ("Other", ["travel", "it"], False)

    # A bad field refuses the import; nothing is written.
    for bad in ({"title": "  "}, {"tags": "travel"}, {"archived": "yes"}):
        with pytest.raises(EntryValidationError):
            mem.import_conversation(exported | bad | {"turns": []})
    assert len(mem.get_turns(cid)) == 2
    assert _listing(mem, cid) == ("Other", ["travel", "it"], False)


def test_cli_export_import_carries_title_tags_archived(tmp_path: Path) -> None:
    dbs = {name: tmp_path / f"{name}.db" for name in ("source", "target")}
    for path in dbs.values():
        assert run_cli("migrate", "--url", f"sqlite:///{path}").returncode == 0
    store = SQLiteStore(dbs["source"])
    try:
        mem = ConversationMemory(store=store, max_tokens=None)
        for n in range(3):
            mem.add_turn("c", f"q{n}", "a")
        mem.update_conversation("c", title="Plans", tags=["work"], archived=True)
        mem.branch("c", 1, new_conversation_id="b")
        mem.update_conversation("b", title="Plans, take two")
    finally:
        store.close()
    out = tmp_path / "export.json"
    exported = run_cli("export", "--all", "-o", str(out), "--url", f"sqlite:///{dbs['source']}")
    assert exported.returncode == 0, exported.stderr
    document = json.loads(out.read_text(encoding="utf-8"))
    assert document["format_version"] == 2  # --all: an (empty) long_term section
    by_id = {c["conversation_id"]: c for c in document["conversations"]}
    assert by_id["b"]["branch_of"]["conversation_id"] == "c"

    imported = run_cli("import", str(out), "--url", f"sqlite:///{dbs['target']}")
    assert imported.returncode == 0, imported.stderr
    target = SQLiteStore(dbs["target"])
    try:
        mem = ConversationMemory(store=target, max_tokens=None)
        assert _listing(mem, "c") == ("Plans", ["work"], True)
        assert _listing(mem, "b") == ("Plans, take two", [], False)  # as branched
        assert mem.parent_of("b") is None  # the link is not restored
    finally:
        target.close()


def test_a_batched_import_restores_them_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """An import written in batches (more than IMPORT_BATCH_TURNS turns) sets them with
    its first batch, and they stay through the later ones."""
    monkeypatch.setattr(transfer, "IMPORT_BATCH_TURNS", 2)
    mem = ConversationMemory(max_tokens=None)
    turns = [{"user_prompt": f"q{n}", "assistant_response": "a"} for n in range(5)]
    data = {"conversation_id": "big", "turns": turns, "title": "Big", "tags": ["x"]}
    assert mem.import_conversation(data) == "big"
    assert len(mem.get_turns("big")) == 5
    assert _listing(mem, "big") == ("Big", ["x"], False)
