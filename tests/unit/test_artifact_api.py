"""The artifact API's declared types, derived signatures and examples (issue 12).

``mypy --strict`` over ``tests/`` pins the types of the sync and async forms
(:func:`typing.assert_type`); pytest runs the same calls on an
:class:`InMemoryStore`, checks that every public operation has both forms
with the operation's signature and docstring, and runs the docstring examples.
"""

from __future__ import annotations

import doctest
import inspect
from typing import Any, assert_type

import pytest

import firefly_orm.artifacts._handle as handle_module
import firefly_orm.artifacts._registry as registry_module
from firefly_orm.artifacts import (
    ArtifactFile,
    Artifacts,
    ArtifactWorkspace,
    AuditRecord,
    FileInfo,
    TranscriptMessage,
    WorkspaceInfo,
    WorkspaceSnapshot,
)
from firefly_orm.store import InMemoryStore


def test_sync_types() -> None:
    artifacts = Artifacts(store=InMemoryStore())
    ws = assert_type(artifacts.create("t"), ArtifactWorkspace)
    assert_type(artifacts.get_or_create("t"), ArtifactWorkspace)
    assert_type(artifacts.open("t"), ArtifactWorkspace)
    assert_type(artifacts.exists("t"), bool)
    assert_type(artifacts.info("t"), WorkspaceInfo | None)
    assert_type(artifacts.list_workspaces(), list[WorkspaceInfo])
    assert_type(artifacts.list_workspaces(all_users=True), list[WorkspaceInfo])
    assert_type(artifacts.for_user("ann"), Artifacts)
    assert_type(artifacts.workspace("t", reviewer=True).reviewer, bool)
    info = assert_type(ws.write_text("a.md", "x"), FileInfo)
    assert_type(ws.write_json("b.json", [1]), FileInfo)
    assert_type(ws.write_bytes("c.bin", b"\x00"), FileInfo)
    assert_type(ws.read_text("a.md"), str)
    assert_type(ws.read_json("b.json"), Any)
    assert_type(ws.read_bytes("c.bin"), bytes)
    assert_type(ws.read("a.md"), ArtifactFile | None)
    assert_type(ws.stat("a.md"), FileInfo | None)
    assert_type(ws.current_sha("a.md"), str)
    assert_type(ws.exists("a.md"), bool)
    assert_type(ws.list_paths(), list[str])
    assert_type(ws.files(), list[FileInfo])
    promoted = ws.promote("a.md", "d.md", actor="r", reason="")
    assert_type(promoted, FileInfo)
    assert_type(ws.audit_tail(), list[AuditRecord])
    assert_type(ws.audit_log(), list[AuditRecord])
    assert_type(ws.history("a.md"), list[FileInfo])
    assert_type(ws.read_version("a.md", info.sha256), ArtifactFile | None)
    assert_type(ws.append("m"), None)
    assert_type(ws.extend(["m"]), int)
    assert_type(ws.messages(), list[Any])
    assert_type(ws.transcript(), list[TranscriptMessage])
    snapshot = assert_type(ws.export_snapshot(), WorkspaceSnapshot)
    assert_type(artifacts.import_snapshot(snapshot, key="u"), ArtifactWorkspace)
    assert_type(ws.delete("a.md"), bool)
    assert_type(artifacts.delete_workspace("t"), bool)


async def test_async_types() -> None:
    artifacts = Artifacts(store=InMemoryStore())
    ws = assert_type(await artifacts.async_create("t"), ArtifactWorkspace)
    info = assert_type(await ws.async_write_text("a.md", "x"), FileInfo)
    assert_type(await ws.async_read_text("a.md"), str)
    assert_type(await ws.async_stat("a.md"), FileInfo | None)
    assert_type(await ws.async_list_paths(), list[str])
    assert_type(await ws.async_read_version("a.md", info.sha256), ArtifactFile | None)
    assert_type(await ws.async_audit_tail(1), list[AuditRecord])
    assert_type(await ws.async_messages(), list[Any])
    assert_type(await artifacts.async_delete_workspace("t"), bool)


def _public_operations(cls: type) -> list[str]:
    return sorted(
        name[1:]
        for name, value in vars(cls).items()
        if name.startswith("_")
        and not name.startswith("__")
        and inspect.isgeneratorfunction(value)
        and name[1:] in vars(cls)
    )


@pytest.mark.parametrize("cls", [ArtifactWorkspace, Artifacts])
def test_every_operation_has_both_forms(cls: type) -> None:
    names = _public_operations(cls)
    assert len(names) >= 8
    for name in names:
        operation = vars(cls)[f"_{name}"]
        sync, async_ = vars(cls)[name], vars(cls)[f"async_{name}"]
        assert inspect.iscoroutinefunction(async_), name
        assert sync.__doc__ == operation.__doc__ and sync.__doc__, name
        assert list(inspect.signature(sync).parameters) == list(
            inspect.signature(operation).parameters
        )
        assert inspect.signature(sync).return_annotation is not inspect.Signature.empty, name


def test_docstring_examples_run() -> None:
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    modules = (handle_module, registry_module)  # ArtifactWorkspace, Artifacts
    tests = [t for module in modules for t in finder.find(module) if t.examples]
    assert len(tests) >= 2
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
