"""A user's artifact workspaces are theirs alone, on every store (issue 34, section 1).

Two users (and the shared, unbound registry) each drive random operations
through every public entry point of :class:`Artifacts` and
:class:`ArtifactWorkspace`, with the same workspace keys and paths; a model of
what each of them wrote says what every call must return:

* another user's workspace is a missing one: ``open`` and every write raise
  the same :class:`NotFoundError` as for a key never used, ``exists`` is
  false, reads find nothing, ``get_or_create`` / ``create`` / an import make
  the caller's own workspace;
* no read ever returns what another user wrote (every text is tagged with its
  writer), and after each example the raw rows of each owner's workspaces
  carry that owner's ``user_id`` and that owner's texts only.

Then the scenario of the issue on artifacts (user ``b`` probing, writing,
deleting and exporting ``a``'s workspace key), in both API forms; the admin's
forms (``for_user``, ``list_workspaces(all_users=True)``); and rows another
layer writes into a workspace's namespaces for another user, which the
workspace never reads as its own.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from modes import call

from firefly_orm.artifacts import (
    ArtifactFile,
    Artifacts,
    ArtifactWorkspace,
    Layout,
    WorkspaceExistsError,
    WorkspaceSnapshot,
)
from firefly_orm.conversation import ConversationMemory
from firefly_orm.entry import MemoryEntry, new_entry_id
from firefly_orm.errors import EntryValidationError, NotFoundError

#: The owners: two users and the shared workspaces (the unbound registry).
OWNERS: tuple[str | None, ...] = ("ann", "bob", None)
PATHS = ("p.md", "d/q.md")


def tag(owner: str | None) -> str:
    """What every text an owner writes starts with."""
    return f"{owner or 'shared'}:"


@dataclass
class Model:
    """What one owner's workspace holds (``None`` in the model: no workspace)."""

    files: dict[str, str] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)


OPERATIONS = (
    "create",
    "get_or_create",
    "open",
    "exists",
    "info",
    "delete_workspace",
    "list_workspaces",
    "import_snapshot",
    "write_text",
    "delete",
    "promote",
    "read_text",
    "stat",
    "list_paths",
    "append",
    "messages",
    "audit_tail",
    "export_snapshot",
)

steps = st.lists(
    st.tuples(
        st.sampled_from(range(len(OWNERS))),
        st.sampled_from(OPERATIONS),
        st.integers(0, 1),  # the key
        st.integers(0, 1),  # the path
    ),
    min_size=1,
    max_size=12,
)


def missing(key: str, owner: str | None) -> str:
    """The message of a workspace that is not there (the same whoever has that key)."""
    of = "" if owner is None else f" of user {owner!r}"
    return f"artifact workspace {key!r}{of} does not exist"


def run_step(
    registry: Artifacts,
    model: dict[str, Model | None],
    name: str,
    key: str,
    path: str,
    text: str,
) -> None:
    """Perform one operation as ``registry``'s owner and check it against ``model``."""
    owner = registry.user_id
    state = model.get(key)
    handle: ArtifactWorkspace = registry.workspace(key)
    needs_workspace = ("open", "write_text", "delete", "promote", "append", "export_snapshot")
    if name in needs_workspace and state is None:
        with pytest.raises(NotFoundError) as refused:
            if name == "open":
                registry.open(key)
            elif name == "write_text":
                handle.write_text(path, text, actor=tag(owner))
            elif name == "delete":
                handle.delete(path, actor=tag(owner))
            elif name == "promote":
                handle.promote(path, "promoted.md", actor=tag(owner), reason="")
            elif name == "append":
                handle.append(text)
            else:
                handle.export_snapshot()
        assert str(refused.value).startswith(missing(key, owner)), (name, refused.value)
        return
    if name == "create":
        if state is not None:
            with pytest.raises(WorkspaceExistsError):
                registry.create(key)
            return
        assert registry.create(key).user_id == owner
        model[key] = Model()
    elif name == "get_or_create":
        assert registry.get_or_create(key).user_id == owner
        model[key] = state or Model()
    elif name == "open":
        assert registry.open(key).user_id == owner
    elif name == "exists":
        assert registry.exists(key) is (state is not None)
    elif name == "info":
        info = registry.info(key)
        assert (info is None) is (state is None)
        assert info is None or (info.key, info.user_id) == (key, owner)
    elif name == "delete_workspace":
        assert registry.delete_workspace(key) is (state is not None)
        model[key] = None
    elif name == "list_workspaces":
        prefix = key.rsplit("-", 1)[0] + "-"
        found = registry.list_workspaces(prefix=prefix)
        assert [(i.key, i.user_id) for i in found] == [
            (k, owner) for k in sorted(model) if model[k] is not None
        ]
    elif name == "import_snapshot":
        # a snapshot naming another owner is written as the caller's
        other = next(o for o in OWNERS if o != owner)
        snapshot = WorkspaceSnapshot(
            key=key, user_id=other, files=[ArtifactFile.build(path, text, actor=tag(owner))]
        )
        imported = registry.import_snapshot(snapshot, replace=True)
        assert imported.user_id == owner
        model[key] = Model(files={path: text})
    elif name == "write_text":
        assert state is not None
        handle.write_text(path, text, actor=tag(owner))
        state.files[path] = text
    elif name == "delete":
        assert state is not None
        assert handle.delete(path, actor=tag(owner)) is (path in state.files)
        state.files.pop(path, None)
    elif name == "promote":
        assert state is not None
        if path not in state.files:
            with pytest.raises(NotFoundError, match="no such file"):
                handle.promote(path, "promoted.md", actor=tag(owner), reason="")
            return
        handle.promote(path, "promoted.md", actor=tag(owner), reason="")
        state.files["promoted.md"] = state.files[path]
    elif name == "read_text":
        expected = None if state is None else state.files.get(path)
        read = handle.read(path)
        assert (None if read is None else read.text()) == expected
        assert handle.read_text(path, "") == (expected or "")
    elif name == "stat":
        stat = handle.stat(path)
        assert (stat is None) is (state is None or path not in state.files)
    elif name == "list_paths":
        assert handle.list_paths() == ([] if state is None else sorted(state.files))
    elif name == "append":
        assert state is not None
        handle.append(text)
        state.messages.append(text)
    elif name == "messages":
        assert handle.messages() == ([] if state is None else state.messages)
    elif name == "audit_tail":
        records = handle.audit_tail(50)
        assert all(r.actor == tag(owner) for r in records)
        assert state is not None or records == []
    elif name == "export_snapshot":
        assert state is not None
        snapshot = handle.export_snapshot()
        assert snapshot.user_id == owner
        assert {f.path: f.text() for f in snapshot.files} == state.files
        assert [m.message for m in snapshot.messages] == state.messages
        assert all(r.actor == tag(owner) for r in snapshot.audit)
    else:  # pragma: no cover - every name is handled above
        raise AssertionError(name)


def check_stored_truth(store: Any, models: dict[str | None, dict[str, Model | None]]) -> None:
    """Every owner's rows carry its ``user_id``, and its files hold its texts (raw reads)."""
    for owner, model in models.items():
        for key, state in model.items():
            layout = Layout.of(key, owner)
            heads = [e for e in store.load(layout.registry) if e.entry_id == layout.head_id]
            assert len(heads) == (state is not None), (owner, key)
            for namespace in layout.family:
                for entry in store.load(namespace):
                    assert entry.user_id == owner, (namespace, entry)
            if state is None:
                continue
            files = {e.key: e.content["text"] for e in store.load(layout.files)}
            assert files == state.files
            assert all(text.startswith(tag(owner)) for text in files.values())


@pytest.mark.timeout(300)
def test_no_cross_user_read_or_write_ever_succeeds(store: Any) -> None:
    registries = {owner: Artifacts(store=store, user_id=owner) for owner in OWNERS}

    @settings(
        max_examples=8,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(steps=steps)
    def run(steps: list[tuple[int, str, int, int]]) -> None:
        prefix = uuid.uuid4().hex[:8]
        keys = [f"{prefix}-{i}" for i in range(2)]
        models: dict[str | None, dict[str, Model | None]] = {
            owner: dict.fromkeys(keys) for owner in OWNERS
        }
        for n, (who, name, key_index, path_index) in enumerate(steps):
            owner = OWNERS[who]
            text = f"{tag(owner)}{n}"
            run_step(
                registries[owner], models[owner], name, keys[key_index], PATHS[path_index], text
            )
        check_stored_truth(store, models)

    run()


async def test_user_b_cannot_reach_user_a_s_workspace(store: Any, mode: str) -> None:
    """The issue's scenario on artifacts: every entry point of ``b`` on ``a``'s key."""
    a = Artifacts(store=store, user_id="a")
    b = Artifacts(store=store, user_id="b")
    mine = await call(mode, a, "create", "w", keep_versions=True)
    await call(mode, mine, "write_text", "notes.md", "a's secret")
    await call(mode, mine, "append", "a says hi")
    secret = await call(mode, mine, "export_snapshot")

    # probing: a's key and a key never used give the same answers and errors
    for key in ("w", "never-used"):
        assert await call(mode, b, "exists", key) is False
        assert await call(mode, b, "info", key) is None
        with pytest.raises(NotFoundError) as opened:
            await call(mode, b, "open", key)
        assert str(opened.value).startswith(missing(key, "b"))
    theirs = b.workspace("w")
    assert await call(mode, theirs, "read_text", "notes.md", None) is None
    assert await call(mode, theirs, "read", "notes.md") is None
    assert await call(mode, theirs, "stat", "notes.md") is None
    assert await call(mode, theirs, "list_paths") == []
    assert await call(mode, theirs, "messages") == []
    assert await call(mode, theirs, "audit_log") == []
    assert await call(mode, theirs, "history", "notes.md") == []
    assert await call(mode, b, "list_workspaces") == []
    with pytest.raises(NotFoundError):
        await call(mode, theirs, "read_text", "notes.md")
    for method, args, kwargs in (
        ("write_text", ("notes.md", "b was here"), {}),
        ("write_json", ("x.json", {}), {}),
        ("write_bytes", ("x.bin", b"x"), {}),
        ("delete", ("notes.md",), {}),
        ("promote", ("notes.md", "copy.md"), {"actor": "b", "reason": ""}),
        ("append", ("b says hi",), {}),
        ("extend", (["b says hi"],), {}),
        ("export_snapshot", (), {}),
    ):
        with pytest.raises(NotFoundError) as refused:
            await call(mode, theirs, method, *args, **kwargs)
        assert str(refused.value).startswith(missing("w", "b")), method
    assert await call(mode, b, "delete_workspace", "w") is False
    assert await call(mode, mine, "export_snapshot") == secret

    # what b creates or imports under the same key is b's own, beside a's
    own = await call(mode, b, "get_or_create", "w")
    await call(mode, own, "write_text", "notes.md", "b's")
    with pytest.raises(WorkspaceExistsError):
        await call(mode, b, "create", "w")
    await call(mode, b, "import_snapshot", secret, key="copy")  # b holds a copy: b's now
    assert (await call(mode, b, "info", "copy")).user_id == "b"
    assert await call(mode, b, "delete_workspace", "w") is True
    assert await call(mode, mine, "export_snapshot") == secret

    # erasing b leaves a whole
    await call(mode, ConversationMemory(store=store), "erase_user", "b")
    assert await call(mode, b, "list_workspaces") == []
    assert await call(mode, mine, "export_snapshot") == secret


async def test_the_unbound_registry_is_the_admin_s(store: Any, mode: str) -> None:
    admin = Artifacts(store=store)
    ann = admin.for_user("ann")
    assert (ann.user_id, admin.for_user("bob").user_id) == ("ann", "bob")
    assert ann.for_user("ann").user_id == "ann"
    with pytest.raises(EntryValidationError, match="serves user 'ann' only"):
        ann.for_user("bob")
    with pytest.raises(EntryValidationError, match="serves user 'ann' only"):
        await call(mode, ann, "list_workspaces", all_users=True)
    await call(mode, ann, "create", "w")
    await call(mode, admin.for_user("bob"), "create", "w")
    await call(mode, admin, "create", "w")
    assert [i.user_id for i in await call(mode, admin, "list_workspaces")] == [None]
    everyone = await call(mode, admin, "list_workspaces", all_users=True)
    assert sorted((i.key, i.user_id or "") for i in everyone) == [
        ("w", ""),
        ("w", "ann"),
        ("w", "bob"),
    ]
    assert len(await call(mode, admin, "list_workspaces", all_users=True, limit=2)) == 2


async def test_rows_another_layer_writes_in_a_workspace_s_namespaces_are_not_its_own(
    store: Any, mode: str
) -> None:
    """Rows of ``a`` in ``b``'s workspace namespaces change nothing b sees.

    Another layer given one of those namespaces writes them (a long-term
    memory bound to ``a`` with ``namespace=`` set to it); they are saved raw
    here.  Newer, with the same keys, they neither show in b's reads, nor
    shadow b's file, nor break b's listing, writes, versions or export.
    """
    b = Artifacts(store=store, user_id="b")
    ws = await call(mode, b, "create", "w", keep_versions=True)
    first = await call(mode, ws, "write_text", "notes.md", "b's")
    await call(mode, ws, "append", "b says hi")
    before = await call(mode, ws, "export_snapshot")
    layout = ws.layout
    version_key = Layout.version_key("notes.md", first.sha256)
    for namespace, key in (
        (layout.files, "notes.md"),
        (layout.files, "other.md"),
        (layout.audit, "notes.md"),
        (layout.versions, version_key),
        (layout.transcript, "m"),
        (layout.registry, "fake"),
    ):
        intruder = MemoryEntry.from_dict(
            {
                "entry_id": new_entry_id(),
                "namespace": namespace,
                "key": key,
                "content": "a was here",
                "metadata": {"sha256": "0" * 64, "size": 1},
                "user_id": "a",
            }
        )
        store.save(namespace, intruder)
    assert await call(mode, ws, "export_snapshot") == before
    assert await call(mode, ws, "read_text", "notes.md") == "b's"
    assert await call(mode, ws, "stat", "other.md") is None
    assert await call(mode, ws, "list_paths") == ["notes.md"]
    assert [f.path for f in await call(mode, ws, "files", limit=1)] == ["notes.md"]
    assert await call(mode, ws, "messages", last=1) == ["b says hi"]
    assert [r.path for r in await call(mode, ws, "audit_tail", 1)] == ["notes.md"]
    found = await call(mode, ws, "read_version", "notes.md", first.sha256)
    assert found is not None and found.text() == "b's"
    # b's writes go on (compare-and-set included) and find b's own file
    second = await call(mode, ws, "write_text", "notes.md", "b's 2", expected_sha=first.sha256)
    assert second.version == 2
    assert [h.sha256 for h in await call(mode, ws, "history", "notes.md")] == [
        first.sha256,
        second.sha256,
    ]
    assert [i.key for i in await call(mode, b, "list_workspaces")] == ["w"]
