"""DirectoryWorkspace: a live workspace in Flyte's directory layout, on real directories."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from unittest.mock import ANY

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from firefly_orm.artifacts import Artifacts, ReadOnlyPathError, ShaMismatchError
from firefly_orm.artifacts._flyte import (
    AUDIT_LOG_PATH,
    SIDECAR_PATH,
    DirectoryLayoutError,
    DirectoryWorkspace,
    export_directory,
    import_directory,
    read_directory,
)
from firefly_orm.errors import EntryValidationError, NotFoundError


def _files_on_disk(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.relative_to(root).as_posix().startswith("meta/@live/")
    }


def _audit_lines(root: Path) -> list[dict[str, object]]:
    text = (root / AUDIT_LOG_PATH).read_text()
    return [json.loads(line) for line in text.splitlines() if line]


def test_temporary_directory_is_laid_out_and_removed_on_close() -> None:
    ws = DirectoryWorkspace(messages=[{"role": "user", "content": "hi"}])
    root = ws.root
    assert ws.temporary and root.is_dir()
    ws.write_text("user/notes.md", "hello", actor="ann", reason="first")
    assert (root / "user" / "notes.md").read_bytes() == b"hello"
    assert json.loads((root / "messages.json").read_text()) == [{"content": "hi", "role": "user"}]
    meta = json.loads((root / "meta" / "user%2Fnotes.md.json").read_text())
    assert list(meta) == ["path", "sha256", "updated_at", "updated_by", "reason", "bytes"]
    assert (meta["path"], meta["updated_by"], meta["reason"], meta["bytes"]) == (
        "user/notes.md",
        "ann",
        "first",
        5,
    )
    assert [line["op"] for line in _audit_lines(root)] == ["create"]
    ws.close()
    assert not root.exists()
    with pytest.raises(RuntimeError, match="closed"):
        ws.read_text("user/notes.md")


def test_a_given_root_is_loaded_again_and_kept(tmp_path: Path) -> None:
    root = tmp_path / "ws-key"
    with DirectoryWorkspace(root, keep_versions=True) as ws:
        assert ws.key == "ws-key" and not ws.temporary
        first = ws.write_json("memory/profile.json", {"name": "Ann"})
        ws.write_json("memory/profile.json", {"name": "Bea"}, expected_sha=first.sha256)
        ws.append({"role": "assistant", "content": "ok"})
    assert root.is_dir()
    again = DirectoryWorkspace(root, keep_versions=True)
    assert again.read_json("memory/profile.json") == {"name": "Bea"}
    assert again.stat("memory/profile.json").version == 2  # type: ignore[union-attr]
    assert [v.sha256 for v in again.history("memory/profile.json")] == [first.sha256, ANY]
    assert again.messages() == [{"role": "assistant", "content": "ok"}]
    # the directory is an export: the reader and the database import agree with it
    assert read_directory(root).files == again.export_snapshot().files
    imported = import_directory(Artifacts(), root)
    assert imported.read_json("memory/profile.json") == {"name": "Bea"}


def test_a_directory_flyte_wrote_is_loaded(tmp_path: Path) -> None:
    root = tmp_path / "flyte-ws"
    (root / "user").mkdir(parents=True)
    (root / "user" / "a.md").write_text("from flyte")
    (root / "messages.json").write_text('[{"role": "user", "content": "q"}]')
    ws = DirectoryWorkspace(root, messages=[{"role": "assistant", "content": "a"}])
    assert ws.read_text("user/a.md") == "from flyte"
    assert ws.messages() == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
    ]
    assert (root / SIDECAR_PATH).is_file()  # the appended message wrote the metadata


def test_compare_and_set_read_only_and_bad_input_write_nothing(tmp_path: Path) -> None:
    ws = DirectoryWorkspace(tmp_path / "w", read_only_prefixes=("memory/",))
    info = ws.write_text("user/a.md", "one")
    before = _files_on_disk(ws.root)
    with pytest.raises(ShaMismatchError):
        ws.write_text("user/a.md", "two", expected_sha="0" * 64)
    with pytest.raises(ShaMismatchError):
        ws.write_text("user/a.md", "two", expected_sha="")
    with pytest.raises(ReadOnlyPathError):
        ws.write_text("memory/x.md", "no")
    with pytest.raises(ReadOnlyPathError):
        ws.promote("user/a.md", "memory/a.md", actor="agent", reason="self-approval")
    with pytest.raises(EntryValidationError):
        ws.write_text("../escape", "no")
    with pytest.raises(EntryValidationError):
        ws.write_text("meta/x.json", "no")
    assert _files_on_disk(ws.root) == before
    # a reviewer's handle on the same directory promotes; the agent's sees it at once
    reviewer = DirectoryWorkspace(ws.root, read_only_prefixes=("memory/",), reviewer=True)
    reviewer.promote("user/a.md", "memory/a.md", actor="rev", reason="ok", src_sha=info.sha256)
    assert ws.read_text("memory/a.md") == "one"
    assert _audit_lines(ws.root)[-1]["op"] == "promote"
    assert ws.delete("user/a.md", expected_sha=info.sha256)
    assert not (ws.root / "user").exists()  # the emptied folder goes too
    with pytest.raises(NotFoundError):
        ws.read_text("user/a.md")


def test_a_path_the_layout_cannot_hold_is_refused_and_nothing_written(tmp_path: Path) -> None:
    ws = DirectoryWorkspace(tmp_path / "w")
    ws.write_text("notes", "a file")
    before = _files_on_disk(ws.root)
    with pytest.raises(DirectoryLayoutError, match="also the folder"):
        ws.write_text("notes/a.md", "inside")
    assert _files_on_disk(ws.root) == before
    assert ws.list_paths() == ["notes"]  # the mirror was reloaded from the directory


def test_a_root_that_is_not_a_workspace_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "bad"
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "stray.json").write_text("{}")
    with pytest.raises(DirectoryLayoutError, match="describes no file"):
        DirectoryWorkspace(root)
    with pytest.raises(EntryValidationError):
        DirectoryWorkspace(tmp_path / "ok", max_bytes=0)
    assert not (tmp_path / "ok").exists()  # options are checked before the directory is made


def test_writes_of_another_process_are_seen(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    ws = DirectoryWorkspace(root)
    ws.write_text("user/a.md", "mine")
    script = textwrap.dedent(
        f"""
        from firefly_orm.artifacts._flyte import DirectoryWorkspace
        ws = DirectoryWorkspace({str(root)!r})
        sha = ws.current_sha("user/a.md")
        ws.write_text("user/a.md", "theirs", expected_sha=sha, actor="other")
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert ws.read_text("user/a.md") == "theirs"
    assert [r.actor for r in ws.audit_log()] == ["agent", "other"]
    with pytest.raises(ShaMismatchError):
        ws.write_text("user/a.md", "stale", expected_sha=ws.audit_log()[0].new_sha)


def test_export_of_the_mirror_is_the_directory(tmp_path: Path) -> None:
    ws = DirectoryWorkspace(tmp_path / "live", keep_versions=True)
    ws.write_bytes("bin/blob", b"\x00\xff")
    ws.write_text("user/a.md", "a")
    ws.extend([{"n": 1}, {"n": 2}])
    ws.delete("user/a.md")
    store_ws = import_directory(Artifacts(), ws.root)
    export_directory(store_ws, tmp_path / "exported")
    assert _files_on_disk(tmp_path / "exported") == _files_on_disk(ws.root)


async def test_async_twins(tmp_path: Path) -> None:
    ws = await DirectoryWorkspace.async_open(tmp_path / "aw", messages=[{"m": 0}])
    info = await ws.async_write_text("user/a.md", "x")
    assert await ws.async_read_text("user/a.md") == "x"
    assert await ws.async_current_sha("user/a.md") == info.sha256
    assert await ws.async_file_exists("user/a.md")
    assert await ws.async_list_paths() == ["user/a.md"]
    await ws.async_append({"m": 1})
    assert await ws.async_messages() == [{"m": 0}, {"m": 1}]
    assert [r.op for r in await ws.async_audit_tail(5)] == ["create"]
    await ws.async_close()


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["write", "delete"]),
        st.sampled_from(["a.md", "user/b.md", "user/c/d.txt", "x"]),
        st.text(max_size=20),
    ),
    max_size=8,
)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=_OPS)
def test_any_sequence_matches_the_database_workspace(
    tmp_path: Path, ops: list[tuple[str, str, str]]
) -> None:
    root = tmp_path / uuid.uuid4().hex  # one directory per example
    live = DirectoryWorkspace(root, key="k", keep_versions=True)
    model = Artifacts().create("k", keep_versions=True)
    for op, path, text in ops:
        if op == "write":
            live.write_text(path, text)
            model.write_text(path, text)
        else:
            assert live.delete(path) == model.delete(path)
    reopened = DirectoryWorkspace(root)
    assert reopened.list_paths() == model.list_paths()
    for path in model.list_paths():
        assert reopened.read_text(path) == model.read_text(path)
    assert [(r.op, r.path, r.new_sha) for r in reopened.audit_log()] == [
        (r.op, r.path, r.new_sha) for r in model.audit_log()
    ]
    assert len(read_directory(root).versions) == len(model.export_snapshot().versions)


_INCREMENTER = textwrap.dedent(
    """
    import sys
    from firefly_orm.artifacts import ShaMismatchError
    from firefly_orm.artifacts._flyte import DirectoryWorkspace

    ws = DirectoryWorkspace(sys.argv[1])
    done = 0
    while done < int(sys.argv[2]):
        found = ws.read("counter.json")
        try:
            ws.write_json(
                "counter.json", found.json() + 1, expected_sha=found.info.sha256, actor=sys.argv[3]
            )
        except ShaMismatchError:
            continue  # another process won: read again
        done += 1
    """
)


def test_compare_and_set_holds_across_processes(tmp_path: Path) -> None:
    root = tmp_path / "counter"
    DirectoryWorkspace(root).write_json("counter.json", 0)
    procs = [
        subprocess.Popen([sys.executable, "-c", _INCREMENTER, str(root), "8", f"p{i}"])
        for i in range(2)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    ws = DirectoryWorkspace(root)
    assert ws.read_json("counter.json") == 16  # no lost update
    records = ws.audit_log()
    assert [r.op for r in records] == ["create"] + ["update"] * 16
    assert all(a.new_sha == b.old_sha for a, b in itertools.pairwise(records))
    assert sorted({r.actor for r in records[1:]}) == ["p0", "p1"]
    assert read_directory(root).files[0].info.version == 17
