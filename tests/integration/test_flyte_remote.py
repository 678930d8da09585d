"""DirectoryWorkspace in object storage: save / load through fsspec URLs, on a real S3 server
(moto's, started by the ``s3_url`` fixture) and on local paths."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec  # type: ignore[import-untyped]
import pytest
from s3_server import storage_options

from firefly_orm.artifacts import WorkspaceExistsError
from firefly_orm.artifacts._flyte import DirectoryLayoutError, DirectoryWorkspace, read_directory
from firefly_orm.errors import EntryValidationError


@pytest.fixture
def bucket(s3_url: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """A new bucket on the S3 server: ``(s3://name, storage options)``."""
    options = storage_options(s3_url)
    fs = fsspec.filesystem("s3", **options)
    name = f"firefly-{uuid.uuid4().hex[:12]}"
    fs.mkdir(name)
    yield f"s3://{name}", options
    fs.rm(name, recursive=True)


def _sample(root: Path | None = None, **kwargs: Any) -> DirectoryWorkspace:
    ws = DirectoryWorkspace(root, key="agent-7", keep_versions=True, **kwargs)
    first = ws.write_text("user/notes.md", "draft")
    ws.write_text("user/notes.md", "final", expected_sha=first.sha256, reason="edit")
    ws.write_bytes("bin/x", b"\x00\x01")
    ws.extend([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])
    return ws


def test_remote_path_for_key_uses_flytes_layout() -> None:
    with DirectoryWorkspace(
        key="a/b", remote_base="s3://bkt/memory/", org="acme", project="p", domain="production"
    ) as ws:
        assert ws.remote_path_for_key() == "s3://bkt/memory/acme/p/production/a%2Fb"
        assert ws.remote_path_for_key("k", domain="staging") == "s3://bkt/memory/acme/p/staging/k"
        with pytest.raises(EntryValidationError, match="org"):
            ws.remote_path_for_key("k", org="")
    with DirectoryWorkspace() as ws, pytest.raises(EntryValidationError, match="remote_base"):
        ws.remote_path_for_key("k")


@pytest.mark.s3
def test_save_and_load_through_s3(bucket: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    base, options = bucket
    ws = _sample(remote_base=f"{base}/mem", org="acme", storage_options=options)
    assert not ws.exists("agent-7", "acme", "default", "development")
    url = ws.save()
    assert url == f"{base}/mem/acme/default/development/agent-7"
    assert ws.exists("agent-7", "acme", "default", "development")
    assert not ws.exists("agent-8", "acme", "default", "development")
    fs = fsspec.filesystem("s3", **options)
    stored = {p.rpartition("agent-7/")[2] for p in fs.find(url.removeprefix("s3://"))}
    assert {"messages.json", "user/notes.md", "audit/log.jsonl", "meta/@workspace.json"} <= stored
    assert not any(name.startswith("meta/@live") for name in stored)

    loaded = DirectoryWorkspace.load(url, tmp_path / "copy", storage_options=options)
    assert loaded.key == "agent-7"
    assert loaded.read_text("user/notes.md") == "final"
    assert loaded.read_bytes("bin/x") == b"\x00\x01"
    assert loaded.messages() == ws.messages()
    assert [r.reason for r in loaded.audit_log()] == ["", "edit", ""]
    assert read_directory(tmp_path / "copy").files == ws.export_snapshot().files

    # a second save needs overwrite=True; the objects are then replaced
    with pytest.raises(DirectoryLayoutError, match="overwrite"):
        ws.save()
    ws.delete("bin/x")
    ws.save(overwrite=True)
    again = DirectoryWorkspace.load(url, storage_options=options)
    assert again.list_paths() == ["user/notes.md"]
    again.close()


@pytest.mark.s3
def test_s3_refusals_write_nothing(bucket: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    base, options = bucket
    fs = fsspec.filesystem("s3", **options)
    fs.pipe({f"{base.removeprefix('s3://')}/other/readme.txt": b"not a workspace"})
    ws = _sample()
    with pytest.raises(DirectoryLayoutError, match="no workspace"):
        ws.save(f"{base}/other", overwrite=True, storage_options=options)
    assert fs.cat(f"{base.removeprefix('s3://')}/other/readme.txt") == b"not a workspace"
    with pytest.raises(DirectoryLayoutError, match="no objects"):
        DirectoryWorkspace.load(f"{base}/missing", storage_options=options)
    # a workspace in the target root is not replaced without replace=True
    url = ws.save(f"{base}/ws", storage_options=options)
    DirectoryWorkspace(tmp_path / "busy").write_text("mine.md", "keep")
    with pytest.raises(WorkspaceExistsError):
        DirectoryWorkspace.load(url, tmp_path / "busy", storage_options=options)
    assert DirectoryWorkspace(tmp_path / "busy").list_paths() == ["mine.md"]
    replaced = DirectoryWorkspace.load(
        url, tmp_path / "busy", replace=True, storage_options=options
    )
    assert replaced.list_paths() == ["bin/x", "user/notes.md"]


@pytest.mark.s3
async def test_async_save_load_and_exists(bucket: tuple[str, dict[str, Any]]) -> None:
    base, options = bucket
    ws = _sample(remote_base=base, storage_options=options)
    url = await ws.async_save()
    assert await ws.async_exists("agent-7")
    loaded = await DirectoryWorkspace.async_load(url, storage_options=options)
    assert await loaded.async_read_text("user/notes.md") == "final"
    await loaded.async_close()
    ws.close()


def test_save_and_load_through_a_local_url(tmp_path: Path) -> None:
    ws = _sample(remote_base=f"file://{tmp_path}/remote")
    url = ws.save()
    assert (tmp_path / "remote/default/default/development/agent-7/messages.json").is_file()
    loaded = DirectoryWorkspace.load(url)
    assert loaded.export_snapshot().files == ws.export_snapshot().files
    assert loaded.transcript() == ws.transcript()
    loaded.close()


def test_a_directory_flyte_saved_is_loaded_under_its_key(tmp_path: Path) -> None:
    saved = tmp_path / "remote" / "a%2Fb"  # remote_path_for_key("a/b"), written by Flyte
    (saved / "user").mkdir(parents=True)
    (saved / "user" / "x.md").write_text("flyte")
    (saved / "messages.json").write_text("[]")
    loaded = DirectoryWorkspace.load(f"file://{saved}")
    assert (loaded.key, loaded.read_text("user/x.md")) == ("a/b", "flyte")
    loaded.close()
