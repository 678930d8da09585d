"""The rules of field-level encryption, on SQLite read and altered with raw SQL.

* A row altered at rest (a flipped bit, a ciphertext moved to another row,
  a row given to another user, plain content slipped in, a key id the
  provider lacks) is refused with one
  clear error that names the row, never the plaintext or the key.
* ``allow_plaintext=True`` reads rows written before encryption was turned on,
  and a rotation encrypts them (dropping their clear search text).
* Keys: the text format, the environment, a file, a callable; every refusal
  names its source and never holds the key.
* The redactor runs before encryption on every save (the SQL one-statement
  append is bypassed); what it replaced never reaches the table, and the entry's
  metadata records the kind, field and path.
* ``firefly-orm rotate-keys``.
* Envelopes are bound to their row (a hypothesis property).
"""

from __future__ import annotations

import base64
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st
from store_backends import OpenedBackend, open_backend

from firefly_orm.conversation import ConversationMemory
from firefly_orm.entry import MemoryEntry
from firefly_orm.envnames import ENV_ENCRYPTION_KEYS
from firefly_orm.errors import EntryValidationError
from firefly_orm.long_term import LongTermMemory
from firefly_orm.privacy import (
    REDACTIONS_KEY,
    CallbackKeys,
    DecryptionError,
    Encryption,
    EncryptionConfigError,
    KeyRing,
    UnknownKeyError,
    envelope_key_id,
    generate_key,
    protect,
    rotate_keys,
)
from firefly_orm.privacy._redaction import Redactor
from firefly_orm.store import InMemoryStore
from firefly_orm.working import WorkingMemory

SECRET = "Okapi5521Secret"
K1, K2 = generate_key(), generate_key()


@pytest.fixture
def sqlite_backend(request: pytest.FixtureRequest) -> Iterator[OpenedBackend]:
    opened = open_backend(request, "sqlite")
    try:
        yield opened
    finally:
        opened.close()


def _path(backend: OpenedBackend) -> str:
    return str(backend.store.engine.url.database)


def _sql(backend: OpenedBackend, statement: str, *params: Any) -> list[Any]:
    with sqlite3.connect(_path(backend)) as conn:
        return conn.execute(statement, params).fetchall()


def _raw(backend: OpenedBackend) -> str:
    with sqlite3.connect(_path(backend)) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return "\n".join(repr(row) for t in tables for row in conn.execute(f'SELECT * FROM "{t}"'))


def _encryption(*ring: tuple[str, str], **options: Any) -> Encryption:
    return Encryption(KeyRing(dict(ring)), **options)


def _conversation(store: Any) -> ConversationMemory:
    return ConversationMemory(store=store, max_tokens=1000, summarize_threshold=1000)


# --------------------------------------------------------------------------- tampering


def test_a_row_altered_at_rest_is_refused(sqlite_backend: OpenedBackend) -> None:
    store = protect(sqlite_backend.store, encryption=_encryption(("k1", K1)))
    memory = _conversation(store)
    memory.add_turn("c", f"first {SECRET}", "one")
    memory.add_turn("c", f"second {SECRET}", "two")
    turns = _sql(
        sqlite_backend,
        "SELECT entry_id, content FROM memory_entries WHERE key LIKE 'turn:%' ORDER BY key",
    )
    (first_id, first), (second_id, second) = turns
    assert memory.get_context("c")[0]["content"] == f"first {SECRET}"

    # The second turn's ciphertext copied over the first: bound to its own row, refused.
    _sql(
        sqlite_backend, "UPDATE memory_entries SET content = ? WHERE entry_id = ?", second, first_id
    )
    with pytest.raises(DecryptionError, match=first_id) as moved:
        memory.get_context("c")
    assert SECRET not in str(moved.value) and K1 not in str(moved.value)

    # One bit of the ciphertext flipped.
    envelope = json.loads(first)
    raw = bytearray(base64.b64decode(envelope["$enc"]["ct"]))
    raw[0] ^= 1
    envelope["$enc"]["ct"] = base64.b64encode(bytes(raw)).decode()
    _sql(
        sqlite_backend,
        "UPDATE memory_entries SET content = ? WHERE entry_id = ?",
        json.dumps(envelope),
        first_id,
    )
    with pytest.raises(DecryptionError, match="altered"):
        memory.get_context("c")

    # Plain content slipped into an encrypted namespace.
    plain = json.dumps({"turn_id": 0, "user_prompt": "injected", "assistant_response": "x"})
    _sql(
        sqlite_backend, "UPDATE memory_entries SET content = ? WHERE entry_id = ?", plain, first_id
    )
    with pytest.raises(DecryptionError, match="not encrypted"):
        memory.get_context("c")

    # The first row put back as it was, but given to another user.
    _sql(
        sqlite_backend, "UPDATE memory_entries SET content = ? WHERE entry_id = ?", first, first_id
    )
    _sql(
        sqlite_backend, "UPDATE memory_entries SET user_id = 'mallory' WHERE entry_id = ?", first_id
    )
    with pytest.raises(DecryptionError, match="owner"):
        memory.get_context("c")

    # A key id the provider does not have (the first row's owner put back).
    _sql(sqlite_backend, "UPDATE memory_entries SET user_id = NULL WHERE entry_id = ?", first_id)
    assert [t.user_prompt for t in memory.get_turns("c")] == [f"first {SECRET}", f"second {SECRET}"]
    envelope = json.loads(second)
    envelope["$enc"]["kid"] = "gone"
    _sql(
        sqlite_backend,
        "UPDATE memory_entries SET content = ? WHERE entry_id = ?",
        json.dumps(envelope),
        second_id,
    )
    with pytest.raises(UnknownKeyError, match="gone"):
        _conversation(store).get_turns("c")


def test_plain_rows_are_read_when_allowed_and_encrypted_by_a_rotation(
    sqlite_backend: OpenedBackend,
) -> None:
    inner = sqlite_backend.store
    before = LongTermMemory(store=inner, namespace="notes")  # written before encryption
    before.remember(f"Hedy Lamarr {SECRET}")
    assert SECRET in _raw(sqlite_backend)

    strict = LongTermMemory(
        store=protect(inner, encryption=_encryption(("k1", K1))), namespace="notes"
    )
    with pytest.raises(DecryptionError, match="allow_plaintext"):
        strict.list()
    lenient = _encryption(("k1", K1), allow_plaintext=True)
    assert [
        i.text
        for i in LongTermMemory(store=protect(inner, encryption=lenient), namespace="notes").list()
    ] == [f"Hedy Lamarr {SECRET}"]

    report = rotate_keys(inner, lenient)
    # the item, its daily-log line and the day's row of the log (remember writes all three)
    assert (report.encrypted, report.rotated) == (3, 0)
    assert SECRET not in _raw(sqlite_backend)  # content sealed, clear search text dropped
    assert [i.text for i in strict.list()] == [f"Hedy Lamarr {SECRET}"]


def test_a_bad_entry_is_refused_before_anything_is_redacted_or_written(
    sqlite_backend: OpenedBackend,
) -> None:
    calls: list[Any] = []

    class Spy:
        def redact(self, content: Any) -> tuple[Any, list[Any]]:
            calls.append(content)
            return content, []

    store = protect(sqlite_backend.store, encryption=_encryption(("k1", K1)), redaction=Spy())
    bad = MemoryEntry(key="k", content={"a": 1})
    bad.importance = 7.0
    with pytest.raises(EntryValidationError):
        store.save("ns", bad)
    assert calls == [] and _sql(sqlite_backend, "SELECT count(*) FROM memory_entries") == [(0,)]


# --------------------------------------------------------------------------- redaction


def test_redaction_runs_before_encryption_and_is_recorded(sqlite_backend: OpenedBackend) -> None:
    email = "ada.lovelace@example.org"
    store = protect(
        sqlite_backend.store,
        encryption=_encryption(("k1", K1), namespaces=["conversation", "working"]),
        redaction=Redactor(),
    )
    memory = _conversation(store)
    memory.add_turn("c", f"mail me at {email}", "sure")
    WorkingMemory(store=store, scope_id="s").set("contact", {"mail": email})
    # Not encrypted, searchable: the redacted text is what the index holds.
    notes = LongTermMemory(store=store, namespace="notes")
    notes.remember(f"Ada writes from {email}")

    raw = _raw(sqlite_backend)
    assert email not in raw and "example.org" not in raw
    assert "[REDACTED:email]" in raw  # the long-term item is in clear, redacted
    assert memory.get_context("c")[0]["content"] == "mail me at [REDACTED:email]"
    assert [r.item.text for r in notes.recall("Ada")] == ["Ada writes from [REDACTED:email]"]

    turn = next(e for e in store.load("conversation:c") if (e.key or "").startswith("turn:"))
    records = turn.metadata_[REDACTIONS_KEY]
    assert records and all(r["kind"] == "email" and r["count"] == 1 for r in records)
    # The turn's search_text is redacted too (then not stored: the namespace is encrypted).
    assert {r["field"] for r in records} == {"content", "search_text"}
    assert email not in json.dumps(records)
    (item,) = store.load("notes")
    assert {r["field"] for r in item.metadata_[REDACTIONS_KEY]} == {"content", "search_text"}


def test_redaction_alone_bypasses_the_one_statement_append(sqlite_backend: OpenedBackend) -> None:
    store = protect(sqlite_backend.store, redaction=Redactor())
    memory = _conversation(store)
    for _ in range(2):
        memory.add_turn("c", "call +44 20 7946 0958 now", "ok")
    assert "7946" not in _raw(sqlite_backend)
    assert [m["content"] for m in memory.get_context("c")][::2] == ["call [REDACTED:phone] now"] * 2


# --------------------------------------------------------------------------- keys


def test_key_ring_text_format_and_its_refusals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_ENCRYPTION_KEYS, f" k2:{K2} ,\n k1:{K1}")
    ring = KeyRing.from_env()
    assert ring.current_key_id() == "k2" and ring.key_ids == ["k2", "k1"]
    assert ring.key("k1") == base64.b64decode(K1)
    with pytest.raises(UnknownKeyError):
        ring.key("k3")

    file = tmp_path / "keys"
    file.write_text(f"# rotated in May\nk3:{K1.replace('+', '-').replace('/', '_')}\n", "utf-8")
    assert KeyRing.from_file(file).key("k3") == base64.b64decode(K1)

    short = base64.b64encode(b"x" * 16).decode()
    for text, message in [
        ("", "not set"),
        (f"k1{K1}", "no ':'"),
        (f"k1:{K1},k1:{K2}", "twice"),
        (f"k1:{short}", "16 bytes"),
        ("k1:!!notbase64", "base64"),
        (f"bad id:{K1}", "key id"),
    ]:
        monkeypatch.setenv(ENV_ENCRYPTION_KEYS, text)
        with pytest.raises(EncryptionConfigError, match=message) as refused:
            KeyRing.from_env()
        assert K1 not in str(refused.value) and K2 not in str(refused.value)
    with pytest.raises(EncryptionConfigError, match="cannot read"):
        KeyRing.from_file(tmp_path / "missing")
    with pytest.raises(EncryptionConfigError, match="not in the ring"):
        KeyRing({"k1": K1}, current="k2")


def test_callback_keys_fetch_each_key_once() -> None:
    fetched: list[str] = []
    vault = {"a": K1, "b": K2}

    def fetch(kid: str) -> str | None:
        fetched.append(kid)
        return vault.get(kid)

    current = ["a"]
    keys = CallbackKeys(lambda: current[0], fetch)
    store = protect(InMemoryStore(), encryption=Encryption(keys))
    working = WorkingMemory(store=store)
    working.set("x", 1)
    current[0] = "b"  # the current key changes without a restart
    working.set("y", 2)
    assert (working.get("x"), working.get("y")) == (1, 2)
    assert fetched == ["a", "b"]
    kids = {envelope_key_id(e.content) for e in store.inner.load(working.namespace)}
    assert kids == {"a", "b"}
    with pytest.raises(UnknownKeyError, match="no key 'c'"):
        keys.key("c")


def test_options_are_checked() -> None:
    ring = KeyRing({"k1": K1})
    with pytest.raises(EncryptionConfigError, match="list of namespace prefixes"):
        Encryption(ring, namespaces="conversation:")
    with pytest.raises(EncryptionConfigError, match="key provider"):
        Encryption("k1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs encryption"):
        protect(InMemoryStore())
    with pytest.raises(TypeError, match="protected already"):
        protect(protect(InMemoryStore(), encryption=Encryption(ring)), encryption=Encryption(ring))


# --------------------------------------------------------------------------- the envelope

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
ENCRYPTION = Encryption(KeyRing({"k1": K1}))


@settings(max_examples=60, deadline=None)
@given(
    content=JSON, namespace=st.text(min_size=1, max_size=12), other=st.text(min_size=1, max_size=12)
)
def test_an_envelope_opens_only_in_its_own_row(content: Any, namespace: str, other: str) -> None:
    sealed = ENCRYPTION.seal(namespace, "id1", content, user_id="u1")
    assert envelope_key_id(sealed) == "k1"
    assert ENCRYPTION.open(namespace, "id1", sealed, user_id="u1") == content
    with pytest.raises(DecryptionError):
        ENCRYPTION.open(namespace, "id2", sealed, user_id="u1")
    with pytest.raises(DecryptionError):
        ENCRYPTION.open(namespace, "id1", sealed, user_id="u2")
    if other != namespace:
        with pytest.raises(DecryptionError):
            ENCRYPTION.open(other, "id1", sealed, user_id="u1")


# --------------------------------------------------------------------------- the command


def test_rotate_keys_command(sqlite_backend: OpenedBackend) -> None:
    url = f"sqlite:///{_path(sqlite_backend)}"
    store = protect(sqlite_backend.store, encryption=_encryption(("k1", K1)))
    for i in range(5):
        _conversation(store).add_turn("c", f"q{i} {SECRET}", "a")
    sqlite_backend.store.close()

    both = {ENV_ENCRYPTION_KEYS: f"k2:{K2},k1:{K1}"}
    done = run_cli("--url", url, "rotate-keys", "--batch-size", "2", "--json", env=both)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["key_id"] == "k2" and summary["rotated"] == summary["examined"] == 7
    assert summary["batches"] == 4
    again = run_cli("--url", url, "rotate-keys", env=both)
    assert again.returncode == 0 and again.stdout.startswith("0 row(s) now under key 'k2'")
    kids = _sql(
        sqlite_backend,
        "SELECT DISTINCT json_extract(content, '$.\"$enc\".kid') FROM memory_entries",
    )
    assert kids == [("k2",)]

    missing = run_cli("--url", url, "rotate-keys")
    assert missing.returncode == 2 and ENV_ENCRYPTION_KEYS in missing.stderr
    bad = run_cli("--url", url, "rotate-keys", env={ENV_ENCRYPTION_KEYS: "k2:short"})
    assert bad.returncode == 2 and "short" not in bad.stderr
    only_old = run_cli("--url", url, "rotate-keys", env={ENV_ENCRYPTION_KEYS: f"k1:{K1}"})
    assert only_old.returncode == 3 and "no key 'k2'" in only_old.stderr


# --------------------------------------------------------------------------- the app's session


def test_a_protected_session_bound_store_joins_the_callers_session(
    sqlite_backend: OpenedBackend,
) -> None:
    from sqlalchemy.orm import Session

    from firefly_orm.bridges._release import SessionHold

    inner = sqlite_backend.store
    with Session(inner.engine) as session:
        store = protect(inner.bind_session(session), encryption=_encryption(("k1", K1)))
        assert store.session is session  # an agent run releases it before a model call
        assert SessionHold.of(store).joined
        _conversation(store).add_turn("c", f"hello {SECRET}", "hi")
        session.commit()
    assert protect(inner, encryption=_encryption(("k1", K1))).session is None
    assert SECRET not in _raw(sqlite_backend)
    assert _conversation(protect(inner, encryption=_encryption(("k1", K1)))).get_turns("c")
