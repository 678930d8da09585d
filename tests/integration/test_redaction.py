"""Redaction end to end (issue 34, section 4): what is redacted never reaches any table.

Every layer writes through ``protect(store, redaction=Redactor())`` values
holding an e-mail address, a phone number, a card number and an IBAN:
conversation turns (prompt, answer, raw messages, turn metadata, the
idempotency marker) and the summary, working facts (value and metadata),
long-term items (text, search text, metadata) and artifacts (text, JSON, the
write's reason).  The backend is then read around the library
(``tests/raw_storage.py``: raw SQL over every table of SQLite and PostgreSQL,
MongoDB's documents, FileStore's files, the in-memory rows) and must hold none
of the values, in any form, nor any of their parts in the full-text index's
own terms; a control value written past the redactor is found there (so the
raw read can fail).  Each saved entry's ``metadata["redactions"]`` holds the
kind, field, path and count of what was replaced, never the value, and the
layers read the redacted text back (search included).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from modes import call
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
from raw_storage import raw_text, search_terms
from store_backends import OpenedBackend, layer_mode_params

from firefly_orm.artifacts import Artifacts
from firefly_orm.conversation import ConversationMemory
from firefly_orm.entry import MemoryEntry
from firefly_orm.long_term import LongTermMemory
from firefly_orm.privacy import REDACTIONS_KEY, Redactor, protect
from firefly_orm.privacy._detectors import iban_valid, luhn_valid
from firefly_orm.working import WorkingMemory

EMAIL = "ada.lovelace@example.org"
PHONE = "+44 20 7946 0958"
CARD = "4539 1488 0343 6467"
IBAN = "GB82 WEST 1234 5698 7654 32"
VALUES = {"email": EMAIL, "phone": PHONE, "card": CARD, "iban": IBAN}
TEXT = f"mail {EMAIL}, call {PHONE}, card {CARD}, iban {IBAN}"
REDACTED = (
    "mail [REDACTED:email], call [REDACTED:phone], card [REDACTED:card], iban [REDACTED:iban]"
)
ANSWER = f"noted, I will call {PHONE}"
#: What must not be found at rest: each value as written and without spaces,
#: and parts of them that could survive a tokenizer.
NEEDLES = sorted(
    {
        form
        for value in VALUES.values()
        for form in (value, value.replace(" ", ""), value.lower(), value.replace(" ", "").lower())
    }
    | {"lovelace", "example.org", "7946 0958", "1488 0343", "west 1234", "west1234"}
)
#: No full-text term may hold one of these (every part of the values of 4+ characters).
TERM_PARTS = (
    *("lovelace", "example", "7946", "0958", "4539", "1488", "0343", "6467"),
    *("gb82", "west", "1234", "5698", "7654"),
)
#: Written past the redactor, so it must be found at rest.
CONTROL = "grace.hopper@navy.mil"


def test_the_values_are_what_the_detectors_check() -> None:
    assert luhn_valid(CARD.replace(" ", "")) and iban_valid(IBAN)
    assert Redactor().redact(TEXT)[0] == REDACTED


def _summarize(turns: Any) -> str:
    return f"the user wrote from {EMAIL} about {len(turns)} things"


def _messages(prompt: str, answer: str) -> list[Any]:
    return [
        ModelRequest(parts=[UserPromptPart(content=prompt)]),
        ModelResponse(parts=[TextPart(content=answer)]),
    ]


async def _add_turn(
    mode: str, conversation: ConversationMemory, messages: list[Any], key: str
) -> Any:
    return await call(
        mode,
        conversation,
        "add_turn",
        "c1",
        TEXT,
        ANSWER,
        messages,
        metadata={"contact": EMAIL},
        idempotency_key=key,
    )


async def _write_every_layer(store: Any, mode: str, messages: list[Any]) -> ConversationMemory:
    conversation = ConversationMemory(
        store=store, max_tokens=60, summarize_threshold=0, summarizer=_summarize
    )
    for i in range(3):
        await _add_turn(mode, conversation, messages, f"k{i}")
    working = WorkingMemory(store=store, scope_id="s1")
    await call(
        mode, working, "set", "contact", {"email": EMAIL, "phones": [PHONE]}, metadata={"by": EMAIL}
    )
    long_term = LongTermMemory(store=store, namespace="long-term")
    await call(mode, long_term, "remember", TEXT, tags=["billing"], metadata={"card": CARD})
    workspace = await call(mode, Artifacts(store=store), "get_or_create", "w")
    await call(mode, workspace, "write_text", "notes.md", TEXT, reason=f"asked by {EMAIL}")
    await call(mode, workspace, "write_json", "payee.json", {"iban": IBAN, "amount": 120})
    return conversation


# The hook is one code path for both forms: async runs on SQLite and PostgreSQL.
@pytest.mark.parametrize(
    ("layer_backend", "mode"), layer_mode_params({"sqlite", "postgres"}), indirect=True
)
async def test_no_redacted_value_reaches_any_table(layer_backend: OpenedBackend, mode: str) -> None:
    store = layer_backend.store
    protected = protect(store, redaction=Redactor())
    messages = _messages(TEXT, ANSWER)
    conversation = await _write_every_layer(protected, mode, messages)
    # The control goes past the redactor: the raw read must see it.
    await call(mode, store, "save", "control", MemoryEntry(key="c", content={"mail": CONTROL}))
    control = LongTermMemory(store=store, namespace="control")
    await call(mode, control, "remember", f"Grace Hopper {CONTROL}")

    raw = raw_text(layer_backend)
    assert CONTROL in raw
    assert "[REDACTED:email]" in raw
    folded = raw.lower()
    assert [n for n in NEEDLES if n.lower() in folded] == []

    terms = search_terms(layer_backend)
    if terms is not None:
        assert any("hopper" in t for t in terms)  # the control's text is indexed
        assert any("redact" in t for t in terms)  # and so is the redacted item's
        assert sorted(t for t in terms if any(p in t.lower() for p in TERM_PARTS)) == []

    # The layers read back the redacted text, search included.
    summary = await call(mode, conversation, "get_summary", "c1")
    assert summary is not None and summary.startswith("the user wrote from [REDACTED:email]")
    turns = await call(mode, conversation, "get_turns", "c1")
    assert {(t.user_prompt, t.assistant_response) for t in turns} == {
        (REDACTED, "noted, I will call [REDACTED:phone]")
    }
    assert {t.metadata["contact"] for t in turns} == {"[REDACTED:email]"}
    request, response = (await call(mode, conversation, "get_context", "c1"))[-2:]
    assert request.parts[-1].content == REDACTED
    assert response.parts[0].content == "noted, I will call [REDACTED:phone]"
    working = WorkingMemory(store=protected, scope_id="s1")
    assert await call(mode, working, "get", "contact") == {
        "email": "[REDACTED:email]",
        "phones": ["[REDACTED:phone]"],
    }
    long_term = LongTermMemory(store=protected, namespace="long-term")
    found = await call(mode, long_term, "recall", "iban")
    assert [r.item.text for r in found] == [REDACTED]
    assert found[0].item.metadata["card"] == "[REDACTED:card]"
    workspace = await call(mode, Artifacts(store=protected), "get_or_create", "w")
    assert await call(mode, workspace, "read_text", "notes.md") == REDACTED
    assert await call(mode, workspace, "read_json", "payee.json") == {
        "iban": "[REDACTED:iban]",
        "amount": 120,
    }

    # A retry of an idempotent append is still recognised: it returns the stored turn.
    turn = await _add_turn(mode, conversation, messages, "k2")
    assert turn.user_prompt == REDACTED
    turns = await call(mode, conversation, "get_turns", "c1")
    assert [t.turn_id for t in turns][-1] == turn.turn_id  # nothing added


def _records(entry: MemoryEntry) -> list[dict[str, Any]]:
    records = entry.metadata_.get(REDACTIONS_KEY)
    assert isinstance(records, list), (entry.namespace, entry.key)
    return records


def _summary(records: list[dict[str, Any]]) -> set[tuple[str, str, str, int]]:
    return {(r["field"], r["kind"], r["path"], r["count"]) for r in records}


def test_each_entry_records_what_was_redacted_never_the_value(
    layer_backend: OpenedBackend,
) -> None:
    store = layer_backend.store
    protected = protect(store, redaction=Redactor())
    WorkingMemory(store=protected, scope_id="s1").set(
        "contact", {"email": EMAIL, "phones": [PHONE, PHONE]}, metadata={"by": EMAIL}
    )
    LongTermMemory(store=protected, namespace="long-term").remember(
        TEXT, key="payment", metadata={"card": CARD}
    )
    workspace = Artifacts(store=protected).get_or_create("w")
    workspace.write_text("notes.md", f"{IBAN} / {IBAN}", reason=f"asked by {EMAIL}")
    conversation = ConversationMemory(store=protected)
    conversation.add_turn("c1", f"I am {EMAIL}", "hello", idempotency_key="k1")

    (fact,) = store.load("working:s1")
    assert _summary(_records(fact)) == {
        ("content", "email", "$.email", 1),
        ("content", "phone", "$.phones[0]", 1),
        ("content", "phone", "$.phones[1]", 1),
        ("metadata", "email", "$.by", 1),
    }
    item = store.load_by_key("long-term", "payment")
    assert item is not None
    assert _summary(_records(item)) == {
        *(("content", kind, "$.text", 1) for kind in VALUES),
        *(("search_text", kind, "$", 1) for kind in VALUES),
        ("metadata", "card", "$.card", 1),
    }
    file = store.load_by_key("artifacts:w", "notes.md")
    assert file is not None
    assert _summary(_records(file)) == {
        ("content", "iban", "$.text", 2),
        ("metadata", "email", "$.reason", 1),
    }
    rows = {entry.key: entry for entry in store.load("conversation:c1")}
    turn = next(entry for key, entry in rows.items() if (key or "").startswith("turn:"))
    marker = rows["idempotency:k1"]
    # A turn's search_text (its prompt and answer, what conversation search reads) too.
    for entry, fields in ((turn, {"content", "search_text"}), (marker, {"content"})):
        records = _records(entry)
        assert {r["kind"] for r in records} == {"email"}
        assert {r["field"] for r in records} == fields
        assert all(r["count"] == 1 for r in records)
        assert all(r["path"] == "$" for r in records if r["field"] == "search_text")
        assert all(r["path"].startswith("$.") for r in records if r["field"] == "content")

    everything = [fact, item, file, turn, marker]
    dumped = json.dumps([_records(entry) for entry in everything])
    assert [n for n in NEEDLES if n.lower() in dumped.lower()] == []
    assert set(json.loads(dumped)[0][0]) == {"field", "kind", "path", "count"}
