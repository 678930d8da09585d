"""``firefly-orm artifacts export|import`` against SQLite and PostgreSQL.

The commands move an artifact workspace to and from a directory in Flyte's
layout (:mod:`firefly_orm.artifacts._flyte`): the directory the command writes
is the one the library writes, an import reads it back losslessly, and every
refusal is one line on stderr with the documented exit status and nothing
written.  The commands run in this process (``cli_runner.run_cli``: what the
installed script would return, without a Python process per call).
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cli_runner import run_cli as run
from dbutil import drop_schema

from firefly_orm.artifacts import Artifacts, ArtifactWorkspace, WorkspaceSnapshot
from firefly_orm.artifacts._flyte import SIDECAR_PATH, export_directory
from firefly_orm.sql import SQLAlchemyStore

EXIT_NOT_FOUND, EXIT_USAGE = 1, 2


def one_line_error(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("firefly-orm: ")
    return lines[0]


@dataclass
class Target:
    url: str
    args: list[str] = field(default_factory=list)
    schema: str | None = None

    def store(self) -> SQLAlchemyStore:
        return SQLAlchemyStore(self.url, schema_name=self.schema)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    """A migrated SQLite file or a fresh, migrated PostgreSQL schema."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'db' / 'artifacts.sqlite3'}"
        made = Target(url, ["--url", url])
    else:
        url = request.getfixturevalue("postgres_url")
        schema = "cli_art_" + uuid.uuid4().hex[:10]
        made = Target(url, ["--url", url, "--schema", schema], schema)
    migrated = run("migrate", *made.args)
    assert migrated.returncode == 0, migrated.stderr
    try:
        yield made
    finally:
        if made.schema is not None:
            drop_schema(made.url, made.schema)


def seed(target: Target, key: str = "session-42", user: str | None = None) -> WorkspaceSnapshot:
    store = target.store()
    try:
        artifacts = Artifacts(store=store, user_id=user)
        ws = artifacts.create(key, keep_versions=True)
        ws.write_text("user/profile.md", "likes tea", actor="agent", reason="learned")
        ws.write_json("memory/facts.json", {"tea": True})
        ws.write_bytes("blobs/b.bin", b"\x00\xff")
        ws.promote("user/profile.md", "memory/profile.md", actor="reviewer", reason="ok")
        ws.append({"role": "user", "content": "hello"})
        return ws.export_snapshot()
    finally:
        store.close()


def snapshot_of(target: Target, key: str, user: str | None = None) -> WorkspaceSnapshot | None:
    store = target.store()
    try:
        artifacts = Artifacts(store=store, user_id=user)
        if not artifacts.exists(key):
            return None
        ws: ArtifactWorkspace = artifacts.open(key)
        return ws.export_snapshot()
    finally:
        store.close()


def tree(root: Path) -> dict[str, bytes | None]:
    return {
        p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def same(a: WorkspaceSnapshot | None, b: WorkspaceSnapshot) -> None:
    assert a is not None
    assert (a.files, a.versions, a.messages, a.created_at) == (
        b.files,
        b.versions,
        b.messages,
        b.created_at,
    )
    assert [r.to_dict() for r in a.audit] == [r.to_dict() for r in b.audit]


def test_export_then_import_round_trip(target: Target, tmp_path: Path) -> None:
    original = seed(target)
    out = tmp_path / "exported" / "session-42"
    exported = run("artifacts", "export", "session-42", str(out), *target.args)
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout == ""
    assert "exported artifact workspace 'session-42'" in exported.stderr
    assert "4 file(s)" in exported.stderr and "1 message(s)" in exported.stderr
    # the command writes what the library writes
    store = target.store()
    try:
        reference = tmp_path / "reference"
        export_directory(Artifacts(store=store).open("session-42"), reference)
    finally:
        store.close()
    assert tree(out) == tree(reference)

    imported = run("artifacts", "import", str(out), "--key", "copy", *target.args)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip() == "copy"
    same(snapshot_of(target, "copy"), original)

    # without --key, the key the directory records
    (target_dir := tmp_path / "again").mkdir()
    again = run("artifacts", "export", "copy", str(target_dir), *target.args)
    assert again.returncode == 0, again.stderr
    delete = target.store()
    try:
        Artifacts(store=delete).delete_workspace("copy")
    finally:
        delete.close()
    back = run("artifacts", "import", str(target_dir), *target.args)
    assert back.returncode == 0, back.stderr
    assert back.stdout.strip() == "copy"
    same(snapshot_of(target, "copy"), original)


def test_per_user_workspaces(target: Target, tmp_path: Path) -> None:
    original = seed(target, "notes", user="ann")
    out = tmp_path / "ann-notes"
    shared = run("artifacts", "export", "notes", str(out), *target.args)
    assert "does not exist" in one_line_error(shared, EXIT_NOT_FOUND)
    assert not out.exists()
    ok = run("artifacts", "export", "notes", str(out), "--user", "ann", *target.args)
    assert ok.returncode == 0, ok.stderr
    bob = run("artifacts", "import", str(out), "--user", "bob", *target.args)
    assert bob.returncode == 0, bob.stderr
    same(snapshot_of(target, "notes", user="bob"), original)
    assert snapshot_of(target, "notes") is None


def test_import_refuses_existing_workspace_without_replace(target: Target, tmp_path: Path) -> None:
    original = seed(target)
    out = tmp_path / "out"
    assert run("artifacts", "export", "session-42", str(out), *target.args).returncode == 0
    store = target.store()
    try:
        Artifacts(store=store).open("session-42").write_text("user/new.md", "after the export")
    finally:
        store.close()
    changed = snapshot_of(target, "session-42")
    assert changed is not None
    refused = run("artifacts", "import", str(out), *target.args)
    line = one_line_error(refused, EXIT_USAGE)
    assert "'session-42' already exists" in line and "--replace" in line
    same(snapshot_of(target, "session-42"), changed)
    replaced = run("artifacts", "import", str(out), "--replace", *target.args)
    assert replaced.returncode == 0, replaced.stderr
    same(snapshot_of(target, "session-42"), original)


def test_export_target_needs_force(target: Target, tmp_path: Path) -> None:
    seed(target)
    out = tmp_path / "out"
    assert run("artifacts", "export", "session-42", str(out), *target.args).returncode == 0
    before = tree(out)
    refused = run("artifacts", "export", "session-42", str(out), *target.args)
    assert "not empty" in one_line_error(refused, EXIT_USAGE)
    assert tree(out) == before
    forced = run("artifacts", "export", "session-42", str(out), "--force", *target.args)
    assert forced.returncode == 0, forced.stderr
    assert tree(out) == before  # the same workspace, written again byte for byte
    other = tmp_path / "documents"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    never = run("artifacts", "export", "session-42", str(other), "--force", *target.args)
    assert "holds no workspace" in one_line_error(never, EXIT_USAGE)
    assert tree(other) == {"keep.txt": b"mine"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".firefly-")]


@pytest.mark.parametrize(
    ("spoil", "expected"),
    [
        (lambda root: (root / "user" / "profile.md").write_text("tampered"), "does not match"),
        (lambda root: (root / "audit" / "extra.txt").write_text("x"), "only audit/log.jsonl"),
        (lambda root: (root / "messages.json").write_text("[{"), "not JSON"),
        (
            lambda root: (root / "user" / "link.md").symlink_to(root.parent / "outside.txt"),
            "symbolic link",
        ),
        (lambda root: (root / SIDECAR_PATH).write_text("{}"), "lacks"),
    ],
    ids=["sha-mismatch", "reserved-place", "bad-json", "symlink", "bad-sidecar"],
)
def test_hostile_directory_is_one_line_and_writes_nothing(
    target: Target, tmp_path: Path, spoil: Callable[[Path], object], expected: str
) -> None:
    seed(target)
    out = tmp_path / "out"
    assert run("artifacts", "export", "session-42", str(out), *target.args).returncode == 0
    (tmp_path / "outside.txt").write_text("secret")
    spoil(out)
    refused = run("artifacts", "import", str(out), "--key", "hostile", *target.args)
    line = one_line_error(refused, EXIT_USAGE)
    assert expected in line and "nothing imported" in line
    assert snapshot_of(target, "hostile") is None


def test_usage_errors(target: Target, tmp_path: Path) -> None:
    missing = run("artifacts", "import", str(tmp_path / "nope"), *target.args)
    assert "not a directory" in one_line_error(missing, EXIT_USAGE)
    no_action = run("artifacts", *target.args)
    assert no_action.returncode == EXIT_USAGE
    bad_user = run("artifacts", "export", "k", str(tmp_path / "x"), "--user", "", *target.args)
    assert "user_id" in one_line_error(bad_user, EXIT_USAGE)
    assert not (tmp_path / "x").exists()
