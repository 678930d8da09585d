"""Hostile inputs on every store: refused with the documented error, nothing written, not poisoned.

The contract suite checks ``save`` with the sample bad entries
(:data:`firefly_orm.testing._samples.BAD_ENTRIES`); ``tests/unit/test_hostile_values.py``
checks the rules without a database.  Here a table of hostile values goes through
the three doors an application uses (``store.save``, ``ConversationMemory.add_turn``,
``WorkingMemory.set``), in every slot (content, metadata, raw messages, value;
namespace, key, user id, conversation id, prompt, scope; version, dates,
importance), on every store of ``tests/store_backends.py``:

* a value the documentation refuses must raise :class:`EntryValidationError`
  (``TypeError`` too for raw messages that are not JSON, as documented), and the
  entries, the conversation (turns, archive, summary, index) and the facts must be
  exactly as before;
* values that must be accepted (NUL inside strings, the deepest allowed nesting,
  big numbers, long names, astral characters, the largest version) must round-trip;
* one value larger than MongoDB's document limit may be refused, but only with a
  firefly_orm error and nothing written;
* afterwards every namespace still loads and takes a good write (not poisoned).

Printed per store: tried / accepted wrongly / wrong error / written / poisoned.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from store_backends import LAYER_BACKENDS, OpenedBackend, backend_params, open_backend

from firefly_orm import MemoryEntry
from firefly_orm.conversation import ConversationMemory
from firefly_orm.entry import MAX_ENTRY_VERSION, MAX_JSON_DEPTH, MAX_USER_ID_LENGTH
from firefly_orm.errors import EntryValidationError, FireflyOrmError
from firefly_orm.testing._samples import nested_list
from firefly_orm.working import WorkingMemory

REFUSED, ACCEPTED, EITHER = "refused", "accepted", "either"
NS, MAX_NS, CID, SCOPE = "hostile", "hostile-max-version", "hostile-conversation", "hostile"


def _nested_dict(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"k": value}
    return value


def _cycle() -> list[Any]:
    cycle: list[Any] = []
    cycle.append(cycle)
    return cycle


#: JSON-value slots get these; every one is refused.
BAD_JSON: dict[str, Callable[[], Any]] = {
    "nested-list-10000": lambda: nested_list(10_000),
    "nested-dict-10000": lambda: _nested_dict(10_000),
    "one-level-too-deep": lambda: nested_list(MAX_JSON_DEPTH + 1),
    "keys-1-and-'1'": lambda: {1: "a", "1": "b"},
    "keys-True-and-'true'-nested": lambda: {"x": [{True: 1, "true": 2}]},
    "nan": lambda: math.nan,
    "inf-nested": lambda: [1, {"x": math.inf}],
    "-inf": lambda: -math.inf,
    "lone-surrogate": lambda: "a\ud800b",
    "lone-surrogate-key": lambda: {"\udfff": 1},
    "bytes": lambda: b"x",
    "set": lambda: {1, 2},
    "cycle": _cycle,
    "object": object,
}
#: Name slots get these; each is refused where the slot is listed below.
BAD_NAMES: dict[str, Any] = {
    "nul": "a\x00b",
    "lone-surrogate": "a\udc00",
    "empty": "",
    "not-a-string": 7,
}


@dataclass
class Arena:
    """One store with a seeded entry, conversation and fact, and what they hold."""

    store: Any
    conv: ConversationMemory = field(init=False)
    work: WorkingMemory = field(init=False)
    good_id: str = field(init=False)
    max_id: str = field(init=False)

    def __post_init__(self) -> None:
        self.conv = ConversationMemory(
            store=self.store, max_tokens=12, summarize_threshold=0, keep_evicted=True
        )
        self.work = WorkingMemory(store=self.store, scope_id=SCOPE)
        good = MemoryEntry(key="k", content={"v": "original"}, metadata={"m": 1})
        self.good_id = good.entry_id
        self.store.save(NS, good)
        top = MemoryEntry(key="top", content="at the largest version", version=MAX_ENTRY_VERSION)
        self.max_id = top.entry_id
        self.store.save(MAX_NS, top)
        for n in range(3):  # evicts: an archive and a summary-less head
            self.conv.add_turn(CID, f"prompt {n}", "answer " * 4, [{"n": n}], metadata={"n": n})
        self.work.set("fact", {"v": 1}, importance=0.7)

    def snapshot(self) -> Any:
        """Everything the hostile calls must leave alone (raises if it cannot be read)."""
        entries = [
            (e.entry_id, e.key, e.version, e.content, e.metadata, e.created_at, e.importance)
            for ns in (NS, MAX_NS)
            for e in self.store.load(ns)
        ]
        conversation = self.conv.export_conversation(CID)
        archive = [t.model_dump() for t in self.conv.get_archived_turns(CID)]
        facts = [
            (e.key, e.version, e.content, e.metadata) for e in self.store.load(self.work.namespace)
        ]
        return entries, conversation, archive, self.conv.conversation_ids, facts

    def heal_check(self) -> None:
        """Every namespace still takes a good write and reads it back."""
        self.store.save(NS, MemoryEntry(key="after", content="ok"))
        assert self.store.load_by_key(NS, "after") is not None
        self.conv.add_turn(CID, "after", "ok")
        assert self.conv.get_turns(CID)[-1].user_prompt == "after"
        self.work.set("after", "ok")
        assert self.work.get("after") == "ok"
        assert len(self.store.load(MAX_NS)) == 1


@dataclass(frozen=True)
class Case:
    """One hostile call: what it does, what must happen, and (accepted) how to check it."""

    name: str
    expect: str
    run: Callable[[Arena], Any]
    #: For accepted values: True when what was written reads back right.
    verify: Callable[[Arena], bool] | None = None
    #: The error types the documentation gives for a refusal.
    errors: tuple[type[BaseException], ...] = (EntryValidationError,)


def _json_cases() -> list[Case]:
    slots: dict[str, tuple[Callable[[Arena, Any], Any], tuple[type[BaseException], ...]]] = {
        "save content (update)": (
            lambda a, v: a.store.save(NS, MemoryEntry(entry_id=a.good_id, key="k", content=v)),
            (EntryValidationError,),
        ),
        "save content (new)": (
            lambda a, v: a.store.save(NS, MemoryEntry(key="k2", content=v)),
            (EntryValidationError,),
        ),
        "save metadata": (
            lambda a, v: a.store.save(NS, MemoryEntry(key="k2", content=1, metadata={"m": v})),
            (EntryValidationError,),
        ),
        "add_turn raw_messages": (
            lambda a, v: a.conv.add_turn(CID, "p", "r", [{"role": "user", "content": v}]),
            (EntryValidationError, TypeError),  # README: raw messages not JSON -> TypeError
        ),
        "add_turn metadata": (
            lambda a, v: a.conv.add_turn(CID, "p", "r", metadata={"m": v}),
            (EntryValidationError,),
        ),
        "working value (update)": (lambda a, v: a.work.set("fact", v), (EntryValidationError,)),
        "working metadata": (
            lambda a, v: a.work.set("f2", 1, metadata={"m": v}),
            (EntryValidationError,),
        ),
    }
    return [
        Case(f"{slot}: {name}", REFUSED, _with(call, make), errors=errors)
        for slot, (call, errors) in slots.items()
        for name, make in BAD_JSON.items()
    ]


def _with(call: Callable[[Arena, Any], Any], make: Callable[[], Any]) -> Callable[[Arena], Any]:
    return lambda arena: call(arena, make())


def _name_cases() -> list[Case]:
    slots: dict[str, tuple[Callable[[Arena, Any], Any], tuple[str, ...]]] = {
        "save namespace": (
            lambda a, v: a.store.save(v, MemoryEntry(content=1)),
            ("nul", "lone-surrogate", "empty", "not-a-string"),
        ),
        "save key": (
            lambda a, v: a.store.save(NS, MemoryEntry(key=v, content=1)),
            ("nul", "lone-surrogate", "not-a-string"),
        ),
        "save user_id": (
            lambda a, v: a.store.save(NS, MemoryEntry(content=1, user_id=v)),
            ("nul", "lone-surrogate", "empty", "not-a-string"),
        ),
        "add_turn conversation_id": (
            lambda a, v: a.conv.add_turn(v, "p", "r"),
            ("nul", "lone-surrogate", "empty", "not-a-string"),
        ),
        "add_turn user_prompt": (
            lambda a, v: a.conv.add_turn(CID, v, "r"),
            ("lone-surrogate", "not-a-string"),
        ),
        "working key": (
            lambda a, v: a.work.set(v, 1),
            ("nul", "lone-surrogate", "not-a-string"),
        ),
        "working scope_id": (
            lambda a, v: WorkingMemory(store=a.store, scope_id=v).set("k", 1),
            ("nul", "lone-surrogate", "not-a-string"),
        ),
    }
    return [
        Case(f"{slot}: {name}", REFUSED, _with(call, _const(BAD_NAMES[name])))
        for slot, (call, names) in slots.items()
        for name in names
    ]


def _const(value: Any) -> Callable[[], Any]:
    return lambda: value


def _save(**fields: Any) -> Callable[[Arena], Any]:
    return lambda a: a.store.save(NS, MemoryEntry(**{"key": "k3", "content": 1, **fields}))


NOT_A_DICT: Any = ["x"]
NOT_A_LIST: Any = "abc"
PLUS_ONE, MINUS_ONE = timezone(timedelta(hours=1)), timezone(timedelta(hours=-1))
SINGLE_CASES = [
    Case("version 2**31 (one above the column)", REFUSED, _save(version=MAX_ENTRY_VERSION + 1)),
    Case("version 2**63", REFUSED, _save(version=2**63)),
    Case("version -1", REFUSED, _save(version=-1)),
    Case("created_at naive", REFUSED, _save(created_at=datetime(2024, 1, 1))),
    Case(
        "created_at out of range in UTC",
        REFUSED,
        _save(created_at=datetime(1, 1, 1, 0, 30, tzinfo=PLUS_ONE)),
    ),
    Case(
        "expires_at out of range in UTC",
        REFUSED,
        _save(expires_at=datetime(9999, 12, 31, 23, 59, tzinfo=MINUS_ONE)),
    ),
    Case("importance nan", REFUSED, _save(importance=math.nan)),
    Case("importance inf", REFUSED, _save(importance=math.inf)),
    Case("importance 1.5", REFUSED, _save(importance=1.5)),
    Case("metadata not a dict", REFUSED, _save(metadata=["x"])),
    Case("user_id too long", REFUSED, _save(user_id="u" * (MAX_USER_ID_LENGTH + 1))),
    Case(
        "add_turn metadata not a dict",
        REFUSED,
        lambda a: a.conv.add_turn(CID, "p", "r", metadata=NOT_A_DICT),
    ),
    Case(
        "add_turn raw_messages not a list",
        REFUSED,
        lambda a: a.conv.add_turn(CID, "p", "r", NOT_A_LIST),
        errors=(EntryValidationError, TypeError),
    ),
    Case("working importance nan", REFUSED, lambda a: a.work.set("fact", 2, importance=math.nan)),
    Case("working importance 2.0", REFUSED, lambda a: a.work.set("fact", 2, importance=2.0)),
    Case(
        "working metadata with another scope_id",
        REFUSED,
        lambda a: a.work.set("fact", 2, metadata={"scope_id": "other"}),
    ),
]


# --------------------------------------------------------------------------- accepted values


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _accepted_save(ns: str, key: str, content: Any, **fields: Any) -> Case:
    def run(a: Arena) -> None:
        a.store.save(ns, MemoryEntry(key=key, content=content, **fields))

    def verify(a: Arena) -> bool:
        stored = a.store.load_by_key(ns, key)
        if stored is None or stored.content != _json(content):
            return False
        created = fields.get("created_at")
        return created is None or abs(stored.created_at - created) < timedelta(milliseconds=1)

    return Case(f"save {key}", ACCEPTED, run, verify)


def _accepted_turn(cid: str, prompt: str, raw: list[Any]) -> Case:
    def run(a: Arena) -> None:
        a.conv.add_turn(cid, prompt, "r", raw)

    def verify(a: Arena) -> bool:
        turns = a.conv.get_turns(cid)
        return bool(turns) and turns[-1].user_prompt == prompt and turns[-1].raw_messages == raw

    return Case(f"add_turn {cid}", ACCEPTED, run, verify)


def _accepted_fact(key: str, value: Any) -> Case:
    def run(a: Arena) -> None:
        WorkingMemory(store=a.store, scope_id="accepted").set(key, value)

    def verify(a: Arena) -> bool:
        return bool(WorkingMemory(store=a.store, scope_id="accepted").get(key) == _json(value))

    return Case(f"working {key}", ACCEPTED, run, verify)


ACCEPTED_CASES = [
    _accepted_save("accepted", "nul-inside-strings", {"a\x00b": ["c\x00d", "\x00"]}),
    _accepted_save("accepted", "deepest-allowed", nested_list(MAX_JSON_DEPTH)),
    _accepted_save("accepted", "big-numbers", {"n": 2**70, "f": 1e308, "neg": -(2**64)}),
    _accepted_save("accepted", "string-5MB", "x" * 5_000_000),
    _accepted_save("accepted", "astral-and-invisible", "😀\u2028\u202e\ufeff\U0010ffff"),
    _accepted_save("accepted", "k" * 10_000, "long key"),
    _accepted_save("n" * 10_000, "long-namespace", "long namespace"),
    _accepted_save("accepted", "largest-version", 1, version=MAX_ENTRY_VERSION),
    _accepted_save(
        "accepted", "year-9999", 1, created_at=datetime(9999, 12, 31, 23, 0, tzinfo=UTC)
    ),
    _accepted_turn("accepted-nul", "a\x00prompt", [{"content": "x\x00y"}]),
    _accepted_turn("accepted-deep", "deep", [nested_list(MAX_JSON_DEPTH // 2)]),
    _accepted_fact("nul-value", "a\x00b"),
    _accepted_fact("astral", "😀\U0010ffff"),
]
#: Larger than MongoDB's 16 MB document limit: refusing it is fine, with a firefly_orm
#: error and nothing written; a raw driver exception is not.
EITHER_CASES = [
    Case(
        "save string-20MB",
        EITHER,
        _save(content="x" * 20_000_000),
        lambda a: a.store.load_by_key(NS, "k3") is not None,
        errors=(FireflyOrmError,),
    )
]

#: Last: on some stores it poisons its namespace, and the cases after it could not run.
MAX_VERSION_CASE = Case(
    "update of an entry at the largest version (would store 2**31)",
    REFUSED,
    lambda a: a.store.save(
        MAX_NS, MemoryEntry(entry_id=a.max_id, key="top", content="bumped", version=0)
    ),
)

CASES = [
    *_json_cases(),
    *_name_cases(),
    *SINGLE_CASES,
    *ACCEPTED_CASES,
    *EITHER_CASES,
    MAX_VERSION_CASE,
]


# --------------------------------------------------------------------------- the test


#: Every backend of the registry but the shared default schema (same store class as
#: "postgres", and this test leaves entries behind in its namespaces).
HOSTILE_BACKENDS = [*LAYER_BACKENDS, "five_method"]


@pytest.fixture(params=backend_params(HOSTILE_BACKENDS))
def backend(request: pytest.FixtureRequest) -> Iterator[OpenedBackend]:
    opened = open_backend(request, str(request.param))
    try:
        yield opened
    finally:
        opened.close()


@dataclass
class Verdicts:
    tried: int = 0
    accepted_wrongly: list[str] = field(default_factory=list)
    wrong_error: list[str] = field(default_factory=list)
    refused_wrongly: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    poisoned: list[str] = field(default_factory=list)


def _judge(arena: Arena, case: Case, verdicts: Verdicts) -> bool:
    """Run one case and judge it; ``False`` when the store can no longer be read."""
    verdicts.tried += 1
    try:
        before = arena.snapshot()
    except Exception as exc:
        verdicts.poisoned.append(f"before {case.name}: {type(exc).__name__}: {str(exc)[:200]}")
        return False
    error: BaseException | None = None
    try:
        case.run(arena)
    except Exception as exc:
        error = exc
    try:
        after = arena.snapshot()
    except Exception as exc:
        verdicts.poisoned.append(f"{case.name}: {type(exc).__name__}: {str(exc)[:200]}")
        return False
    if error is None:
        if case.expect == REFUSED:
            verdicts.accepted_wrongly.append(case.name)
            if after != before:
                verdicts.written.append(case.name)
        elif case.verify is not None and not case.verify(arena):
            verdicts.refused_wrongly.append(f"{case.name}: accepted but reads back wrong")
        return True
    shown = f"{type(error).__module__}.{type(error).__name__}: {str(error)[:160]}"
    if case.expect == ACCEPTED:
        verdicts.refused_wrongly.append(f"{case.name}: {shown}")
        return True
    if not isinstance(error, case.errors):
        verdicts.wrong_error.append(f"{case.name}: {shown}")
    if after != before:
        verdicts.written.append(case.name)
    return True


def test_hostile_inputs_are_refused_and_write_nothing(backend: OpenedBackend) -> None:
    arena = Arena(backend.store)
    verdicts = Verdicts()
    readable = all(_judge(arena, case, verdicts) for case in CASES)
    try:
        arena.heal_check()
    except Exception as exc:
        verdicts.poisoned.append(f"a good write afterwards: {type(exc).__name__}: {exc}")
    if not readable and verdicts.tried < len(CASES):
        verdicts.poisoned.append(f"{len(CASES) - verdicts.tried} case(s) could not run")
    print(
        f"\n[hostile / {backend.name}] tried={verdicts.tried} "
        f"accepted-wrongly={len(verdicts.accepted_wrongly)} "
        f"wrong-error={len(verdicts.wrong_error)} refused-wrongly={len(verdicts.refused_wrongly)} "
        f"written={len(verdicts.written)} poisoned={len(verdicts.poisoned)}"
    )
    problems = {
        "accepted wrongly": verdicts.accepted_wrongly,
        "refused with an undocumented error": verdicts.wrong_error,
        "refused or mangled though valid": verdicts.refused_wrongly,
        "something written by a refused call": verdicts.written,
        "namespace poisoned": verdicts.poisoned,
    }
    report = "\n".join(f"{title}: {item}" for title, items in problems.items() for item in items)
    assert not report, report


# --------------------------------------------------------------------------- store names

BAD_SCHEMAS = ["abc\n", "\nabc", "a\nb", "abc ", "a-b", "x" * 64, "1abc", "a\x00b", ""]
BAD_MONGO_NAMES: list[dict[str, str]] = [
    {"database": "a\x00b"},
    {"database": "a.b"},
    {"database": "a/b"},
    {"database": "x" * 64},
    {"collection": "$x"},
    {"collection": "a\x00b"},
    {"collection": ""},
    {"collection": "system.x"},
]


@pytest.mark.postgres
def test_hostile_schema_names_are_refused_and_create_nothing(postgres_admin_engine: Any) -> None:
    import sqlalchemy as sa

    from firefly_orm import migrate
    from firefly_orm.sql import PostgreSQLStore

    def schemas() -> set[str]:
        with postgres_admin_engine.connect() as conn:
            return set(sa.inspect(conn).get_schema_names())

    url = postgres_admin_engine.url.render_as_string(hide_password=False)
    before, wrong = schemas(), []
    for name in BAD_SCHEMAS:
        calls: dict[str, Callable[[str], Any]] = {
            "PostgreSQLStore": lambda n: PostgreSQLStore(url, schema_name=n).initialize(),
            "migrate.upgrade": lambda n: migrate.upgrade(url, schema_name=n),
        }
        for surface, call in calls.items():
            try:
                call(name)
                wrong.append(f"{surface}({name!r}) accepted")
            except EntryValidationError as exc:
                if exc.field != "schema_name":
                    wrong.append(f"{surface}({name!r}): names {exc.field!r}")
            except Exception as exc:
                wrong.append(f"{surface}({name!r}): {type(exc).__name__}: {exc}")
    created = schemas() - before
    print(
        f"\n[hostile / postgres schema names] tried={2 * len(BAD_SCHEMAS)} "
        f"accepted-or-wrong-error={len(wrong)} schemas-created={len(created)}"
    )
    assert not wrong, wrong
    assert not created, created


@pytest.mark.mongo
def test_hostile_mongo_names_are_refused_and_create_nothing(mongo_url: str) -> None:
    import pymongo

    from firefly_orm.mongo import MongoDBStore

    client: Any = pymongo.MongoClient(mongo_url, serverSelectionTimeoutMS=5000)
    try:
        before, wrong = set(client.list_database_names()), []
        for names in BAD_MONGO_NAMES:
            try:
                store = MongoDBStore(
                    mongo_url,
                    database=names.get("database", "t_names"),
                    collection=names.get("collection", "entries"),
                )
                try:
                    store.initialize()
                finally:
                    store.close()
                wrong.append(f"{names!r} accepted")
            except EntryValidationError as exc:
                if exc.field not in names:
                    wrong.append(f"{names!r}: names {exc.field!r}")
            except Exception as exc:
                wrong.append(f"{names!r}: {type(exc).__name__}: {exc}")
        created = set(client.list_database_names()) - before
    finally:
        client.close()
    print(
        f"\n[hostile / mongo names] tried={len(BAD_MONGO_NAMES)} "
        f"accepted-or-wrong-error={len(wrong)} databases-created={len(created)}"
    )
    assert not wrong, wrong
    assert not created, created
