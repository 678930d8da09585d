"""Upstream data where a compatible store opens: refused with the import to run, or imported once.

``firefly_orm.compat.firefly``'s ``SQLiteStore`` and ``FileStore`` (and
``MemoryManager.from_config`` on the ``sqlite`` and ``file`` backends) look for
data upstream wrote where they open.  Data never imported into the store is
refused before anything is written, with a message naming the commands (run
here, as written in the message) or the ``import_upstream=True`` option; with
the option it is imported in one unit of work with a mark, so once.  The data
is built from the documented layouts (``tests/helpers/upstream_layouts.py``).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import shlex
import sqlite3
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli
from helpers.upstream_layouts import (
    create_sqlite_table,
    sample_namespaces,
    upstream_entry,
    write_file_store,
    write_sqlite_store,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_backends import OpenedBackend, backend_params, open_backend

import firefly_orm
from firefly_orm.compat.firefly.memory import FileStore, MemoryManager, SQLiteStore
from firefly_orm.config import load_settings
from firefly_orm.upstream_import import (
    IMPORT_MARK_NAMESPACE,
    UpstreamDataFoundError,
    UpstreamFileSource,
    UpstreamImportError,
    async_import_upstream_once,
    find_upstream_files,
    find_upstream_sqlite,
    import_upstream_once,
)

NOW = datetime.now(UTC)
#: The live entries of the sample (one is expired), by namespace.
SAMPLE = sample_namespaces(NOW)
LIVE = {
    ns: [e for e in entries if e["expires_at"] is None or e["expires_at"] > NOW.isoformat()]
    for ns, entries in SAMPLE.items()
}


def _fingerprint(path: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``path`` (or ``path`` itself) with its size and content hash."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    found = {str(p): (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest()) for p in files}
    for extra in (Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")):
        assert not extra.exists(), f"{extra} was created"
    return found


def _commands(message: str) -> list[list[str]]:
    """The ``firefly-orm`` command lines a refusal names, as argument lists."""
    return [shlex.split(line) for line in re.findall(r"`firefly-orm ([^`]*)`", message)]


def _invalid_namespaces() -> dict[str, list[dict[str, Any]]]:
    """The sample plus a namespace with one valid record and one invalid (importance 2.0)."""
    bad = {
        "working:broken": [
            upstream_entry(created_at=NOW, key="fine", content=1),
            upstream_entry(created_at=NOW, key="bad", content=2, importance=2.0),
        ]
    }
    return {**SAMPLE, **bad}


# --------------------------------------------------------------------------- SQLite file


@pytest.fixture
def upstream_db(tmp_path: Path) -> Path:
    path = tmp_path / "memory.sqlite3"
    write_sqlite_store(path, SAMPLE)
    return path


@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_refuses_upstream_data_and_writes_nothing(tmp_path: Path, kind: str) -> None:
    where = tmp_path / ("memory.sqlite3" if kind == "sqlite" else ".firefly_memory")
    (write_sqlite_store if kind == "sqlite" else write_file_store)(where, SAMPLE)
    before = _fingerprint(where)
    with pytest.raises(UpstreamDataFoundError) as caught:
        SQLiteStore(where) if kind == "sqlite" else FileStore(where)
    message = str(caught.value)
    assert str(where) in message and "import_upstream=True" in message
    # a SQLite file gets the commands to run; a directory has none (the CLI writes databases)
    expected = ["migrate", "import-upstream"] if kind == "sqlite" else []
    assert [args[0] for args in _commands(message)] == expected
    assert isinstance(caught.value, firefly_orm.StoreError)  # upstream's DatabaseStoreError
    assert _fingerprint(where) == before
    if kind == "file":
        assert sorted(p.name for p in where.iterdir()) == sorted(Path(p).name for p in before)


def test_sqlite_commands_named_in_the_refusal_import_it(upstream_db: Path) -> None:
    with pytest.raises(UpstreamDataFoundError) as caught:
        SQLiteStore(upstream_db)
    for args in _commands(str(caught.value)):
        result = run_cli(*args)
        assert result.returncode == 0, result.stderr
    store = SQLiteStore(upstream_db)  # the import's mark: no refusal now
    try:
        assert store.load_by_key("working:session-42", "doc_type").content == "invoice"  # type: ignore[union-attr]
        assert {e.entry_id for e in store.load("notes/2025")} == {
            e["entry_id"] for e in LIVE["notes/2025"]
        }
    finally:
        store.__exit__(None, None, None)


def test_a_failed_cli_import_leaves_no_mark(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite3"
    write_sqlite_store(path, _invalid_namespaces())
    with pytest.raises(UpstreamDataFoundError) as caught:
        SQLiteStore(path)
    migrate, import_upstream = _commands(str(caught.value))
    assert run_cli(*migrate).returncode == 0
    assert run_cli(*import_upstream).returncode == 2  # a namespace failed
    with pytest.raises(UpstreamDataFoundError):
        SQLiteStore(path)


def test_sqlite_import_upstream_option_imports_once(upstream_db: Path) -> None:
    store = SQLiteStore(upstream_db, import_upstream=True)
    try:
        assert [e.key for e in store.load("working:delegation:agent_a")] == ["task", "lang"]
        mark = store.load(IMPORT_MARK_NAMESPACE)
        assert [m.key for m in mark] == ["sqlite:firefly_memory"]
        assert mark[0].content["imported"] == sum(len(v) for v in LIVE.values())
        store.delete(
            "working:delegation:agent_a", LIVE["working:delegation:agent_a"][0]["entry_id"]
        )
    finally:
        store.__exit__(None, None, None)
    again = SQLiteStore(upstream_db, import_upstream=True)  # once: the deleted one stays deleted
    try:
        assert [e.key for e in again.load("working:delegation:agent_a")] == ["lang"]
    finally:
        again.__exit__(None, None, None)
    SQLiteStore(upstream_db).__exit__(None, None, None)  # and no refusal without the option


def test_first_uses_in_threads_all_see_the_imported_data(upstream_db: Path) -> None:
    store = SQLiteStore(upstream_db, import_upstream=True)
    try:
        with ThreadPoolExecutor(4) as pool:
            seen = list(pool.map(lambda _: len(store.load("working:session-42")), range(4)))
        assert seen == [len(LIVE["working:session-42"])] * 4
        assert len(store.load(IMPORT_MARK_NAMESPACE)) == 1
    finally:
        store.__exit__(None, None, None)


async def test_first_uses_in_tasks_all_see_the_imported_data(upstream_db: Path) -> None:
    store = SQLiteStore(upstream_db, import_upstream=True)
    try:

        async def load_after(turns: int) -> int:  # first uses that start while others import
            for _ in range(turns):
                await asyncio.sleep(0)
            return len(await store.async_load("working:session-42"))

        seen = await asyncio.gather(*(load_after(turns) for turns in range(0, 40, 4)))
        assert seen == [len(LIVE["working:session-42"])] * 10
        mark = await store.async_load(IMPORT_MARK_NAMESPACE)
        assert len(mark) == 1 and mark[0].content["imported"] == sum(len(v) for v in LIVE.values())
    finally:
        await store.close()


async def test_sqlite_import_upstream_option_on_the_event_loop(upstream_db: Path) -> None:
    store = SQLiteStore(upstream_db, import_upstream=True)
    await store.initialize()
    try:
        fact = await store.async_load_by_key("working:session-42", "vendor")
        assert fact is not None and fact.content["name"] == "Acme Corp"
        assert len(await store.async_load("working:session-42")) == len(LIVE["working:session-42"])
    finally:
        await store.close()


def test_sqlite_invalid_record_imports_nothing(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite3"
    write_sqlite_store(path, _invalid_namespaces())
    store = SQLiteStore(path, import_upstream=True)
    try:
        with pytest.raises(UpstreamImportError, match="importance") as caught:
            store.load("working:session-42")
        assert not caught.value.summary.ok
        with pytest.raises(UpstreamImportError):  # every use tries again, and refuses again
            store.load("working:session-42")
    finally:
        store.__exit__(None, None, None)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM memory_entries").fetchone() == (0,)
    with pytest.raises(UpstreamDataFoundError):
        SQLiteStore(path)


def test_tables_an_earlier_open_made_do_not_hide_upstream_data(upstream_db: Path) -> None:
    # What opening it with an earlier firefly_orm did: our tables, empty, beside upstream's.
    with firefly_orm.SQLiteStore(upstream_db) as earlier:
        earlier.initialize()
    with pytest.raises(UpstreamDataFoundError):
        SQLiteStore(upstream_db)


def test_sqlite_without_upstream_rows_opens(tmp_path: Path) -> None:
    create_sqlite_table(tmp_path / "empty.sqlite3").close()
    assert find_upstream_sqlite(tmp_path / "empty.sqlite3") is None
    assert find_upstream_sqlite(tmp_path / "missing.sqlite3") is None
    (tmp_path / "text.sqlite3").write_text("not a database")
    assert find_upstream_sqlite(tmp_path / "text.sqlite3") is None
    for name in ("empty.sqlite3", "fresh.sqlite3"):
        store = SQLiteStore(tmp_path / name)
        try:
            store.save("n", firefly_orm.MemoryEntry(key="k", content=1))
            assert store.load_by_key("n", "k") is not None
        finally:
            store.__exit__(None, None, None)


# --------------------------------------------------------------------------- FileStore directory


@pytest.fixture
def upstream_dir(tmp_path: Path) -> Path:
    path = tmp_path / ".firefly_memory"
    write_file_store(path, SAMPLE)
    return path


def test_file_store_import_upstream_option_imports_once(upstream_dir: Path) -> None:
    store = FileStore(upstream_dir, import_upstream=True)
    assert store.load_by_key("working:session-42", "doc_type").content == "invoice"  # type: ignore[union-attr]
    assert "firefly_orm:upstream-import" in store.namespaces
    # upstream's FileStore wrote "notes/2025" as notes_2025.json: that name is what stays
    assert [e.entry_id for e in store.load("notes_2025")] == [
        e["entry_id"] for e in LIVE["notes/2025"]
    ]
    first = LIVE["working:session-42"][0]["entry_id"]
    store.delete("working:session-42", first)
    again = FileStore(upstream_dir, import_upstream=True)
    assert first not in {e.entry_id for e in again.load("working:session-42")}
    FileStore(upstream_dir)  # no refusal any more
    assert (upstream_dir / "working:session-42.json").exists()  # upstream's files kept


def test_file_store_invalid_record_imports_nothing(tmp_path: Path) -> None:
    path = tmp_path / "dir"
    write_file_store(path, _invalid_namespaces())
    with pytest.raises(UpstreamImportError, match="importance"):
        FileStore(path, import_upstream=True)
    assert firefly_orm.FileStore(path).namespaces == []
    with pytest.raises(UpstreamDataFoundError):
        FileStore(path)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    namespaces=st.sets(
        st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=60),
        min_size=1,
        max_size=4,
    )
)
def test_firefly_orm_files_are_never_taken_for_upstream_ones(
    tmp_path_factory: pytest.TempPathFactory, namespaces: set[str]
) -> None:
    path = tmp_path_factory.mktemp("ours")
    ours = firefly_orm.FileStore(path)
    for namespace in namespaces:
        ours.save(namespace, firefly_orm.MemoryEntry(key="k", content=namespace))
    assert find_upstream_files(path) is None
    FileStore(path)  # opens, no refusal
    write_file_store(path, {"working:s": [upstream_entry(created_at=NOW, key="k")]})
    found = find_upstream_files(path)
    assert found is not None and found.namespaces() == ["working:s"]


# --------------------------------------------------------------------------- from_config


@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_from_config_refuses_then_imports_on_request(tmp_path: Path, backend: str) -> None:
    directory = tmp_path / "memory"
    if backend == "file":
        write_file_store(directory, SAMPLE)
        where = directory
    else:
        directory.mkdir()
        where = directory / "memory.sqlite3"
        write_sqlite_store(where, SAMPLE)
    configured = load_settings(backend=backend, file_dir=str(directory))
    before = _fingerprint(where)
    with pytest.raises(UpstreamDataFoundError):
        MemoryManager.from_config(configured)
    assert _fingerprint(where) == before
    manager = MemoryManager.from_config(
        configured, working_scope_id="session-42", import_upstream=True
    )
    assert manager.get_fact("doc_type") == "invoice"
    _close(manager)
    _close(MemoryManager.from_config(configured))  # no refusal any more


def _close(manager: MemoryManager) -> None:
    if isinstance(manager.store, SQLiteStore):
        manager.store.__exit__(None, None, None)


async def test_async_from_config_imports_on_request(tmp_path: Path) -> None:
    write_sqlite_store(tmp_path / "memory.sqlite3", SAMPLE)
    configured = load_settings(backend="sqlite", file_dir=str(tmp_path))
    with pytest.raises(UpstreamDataFoundError):
        await MemoryManager.async_from_config(configured)
    manager = await MemoryManager.async_from_config(
        configured, working_scope_id="delegation:agent_a", import_upstream=True
    )
    assert await manager.async_get_fact("lang") == "fr"
    assert isinstance(manager.store, SQLiteStore)
    await manager.store.close()


# --------------------------------------------------------------------------- at once, every store


@pytest.fixture(params=backend_params(["memory", "file", "sqlite", "postgres", "mongo"]))
def target(request: pytest.FixtureRequest) -> Iterator[OpenedBackend]:
    opened = open_backend(request, str(request.param))
    try:
        yield opened
    finally:
        opened.close()


def test_import_at_once_is_all_or_nothing_and_once(target: OpenedBackend, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    write_file_store(broken, _invalid_namespaces())
    with pytest.raises(UpstreamImportError):
        import_upstream_once(UpstreamFileSource(broken), target.store)
    for namespace in [*SAMPLE, "working:broken", IMPORT_MARK_NAMESPACE]:
        assert target.store.load(namespace.replace("/", "_")) == []

    source = tmp_path / "fine"
    write_file_store(source, SAMPLE)
    summary = import_upstream_once(UpstreamFileSource(source), target.store)
    assert summary.ok and summary.imported == sum(len(v) for v in LIVE.values())
    assert summary.skipped_expired == 1
    store = target.reopen()
    assert store.load_by_key("working:session-42", "doc_type").content == "invoice"
    assert import_upstream_once(UpstreamFileSource(source), store).namespaces == 0  # once


async def test_async_import_at_once_on_every_store(target: OpenedBackend, tmp_path: Path) -> None:
    source = tmp_path / "fine"
    write_file_store(source, SAMPLE)
    first = await async_import_upstream_once(UpstreamFileSource(source), target.store)
    assert first.imported == sum(len(v) for v in LIVE.values())
    again = await async_import_upstream_once(UpstreamFileSource(source), target.store)
    assert again.namespaces == 0
    fact = await target.store.async_load_by_key("working:delegation:agent_a", "lang")
    assert fact is not None and fact.content == "fr"


def test_skip_invalid_imports_the_valid_records_at_once(tmp_path: Path) -> None:
    source = tmp_path / "broken"
    write_file_store(source, _invalid_namespaces())
    store = firefly_orm.InMemoryStore()
    summary = import_upstream_once(UpstreamFileSource(source), store, skip_invalid=True)
    assert summary.ok and summary.skipped_invalid == 1
    assert [e.key for e in store.load("working:broken")] == ["fine"]


def test_expired_entries_are_skipped(tmp_path: Path) -> None:
    source = tmp_path / "old"
    write_file_store(
        source,
        {"w": [upstream_entry(created_at=NOW, key="k", expires_at=NOW - timedelta(seconds=1))]},
    )
    store = firefly_orm.InMemoryStore()
    summary = import_upstream_once(UpstreamFileSource(source), store)
    assert (summary.imported, summary.skipped_expired) == (0, 1)
    assert [e.key for e in store.load(IMPORT_MARK_NAMESPACE)] == ["file"]
