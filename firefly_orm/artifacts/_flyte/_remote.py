"""A workspace directory in object storage: saved, loaded and found through ``fsspec`` URLs.

Any URL ``fsspec`` opens works: a local path or ``file://``, ``s3://``
(``s3fs``), ``gs://`` (``gcsfs``), ``az://`` (``adlfs``)...  Install the
``flyte`` extra (``fsspec`` and ``s3fs``; add the package of another scheme).
Credentials and endpoints go in ``storage_options`` (for S3:
``{"key": ..., "secret": ..., "client_kwargs": {"endpoint_url": ...}}``),
or come from the environment as the scheme's package reads it.

**Where a key lives** (:func:`remote_path`): ``<base>/<org>/<project>/<domain>/<key>``,
each segment percent-encoded as Flyte's layout encodes paths (``quote`` with no
safe character), so a key holding ``/`` stays one segment.

**A save** writes every file of the directory (not the live workspace's
``meta/@live/``), ``meta/@workspace.json`` last: object stores have no
rename, so a reader that finds that file finds a complete workspace.  A
destination holding anything must hold a workspace and be given
``overwrite=True``; its objects are then removed first.  **A load** reads
every object under the URL and checks them whole, as an import does
(:mod:`firefly_orm.artifacts._flyte`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from firefly_orm.artifacts._flyte._layout import (
    LIVE_DIR,
    SIDECAR_PATH,
    DirectoryLayoutError,
    encoded_name,
)
from firefly_orm.artifacts._rules import TRANSCRIPT_PATH, check_workspace_key
from firefly_orm.entry import utcnow
from firefly_orm.errors import EntryValidationError

__all__ = ["download", "holds_workspace", "remote_path", "upload"]


def _filesystem(url: str, storage_options: Mapping[str, Any] | None) -> tuple[Any, str]:
    """``(filesystem, path)`` of ``url`` (``fsspec.core.url_to_fs``), its listings fresh."""
    if not isinstance(url, str) or not url:
        raise EntryValidationError("url", f"must be a non-empty fsspec URL, got {url!r}")
    try:
        import fsspec  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - the flyte extra is installed in the tests
        raise ImportError(
            "saving and loading remote workspaces needs fsspec: pip install 'firefly-orm[flyte]'"
        ) from None
    fs, path = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    path = str(path).rstrip("/")
    fs.invalidate_cache(path)
    return fs, path


def remote_path(base: str, org: str, project: str, domain: str, key: str) -> str:
    """``<base>/<org>/<project>/<domain>/<key>``, each part checked and percent-encoded.

    Raises:
        EntryValidationError: A part is empty or holds a control character.
    """
    if not isinstance(base, str) or not base.strip("/"):
        raise EntryValidationError("remote_base", f"must be a non-empty URL, got {base!r}")
    parts = [
        encoded_name(check_workspace_key(value, field))
        for field, value in (("org", org), ("project", project), ("domain", domain), ("key", key))
    ]
    return "/".join([base.rstrip("/"), *parts])


def holds_workspace(url: str, storage_options: Mapping[str, Any] | None = None) -> bool:
    """Whether ``url`` holds a workspace (a ``messages.json`` or ``meta/@workspace.json``)."""
    fs, path = _filesystem(url, storage_options)
    return bool(fs.exists(f"{path}/{SIDECAR_PATH}") or fs.exists(f"{path}/{TRANSCRIPT_PATH}"))


def _listing(fs: Any, path: str) -> list[str]:
    """The relative paths of every object under ``path``."""
    if not fs.exists(path):
        return []
    prefix = path + "/"
    return sorted(
        str(found)[len(prefix) :]
        for found in fs.find(path)
        if str(found).startswith(prefix) and not str(found).endswith("/")
    )


def upload(
    files: Mapping[str, bytes],
    url: str,
    *,
    overwrite: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> None:
    """Write ``files`` (relative path -> bytes) under ``url``, ``meta/@workspace.json`` last.

    Raises:
        DirectoryLayoutError: ``url`` holds objects and is not a workspace, or
            is one and ``overwrite`` is false; nothing is written.
    """
    fs, path = _filesystem(url, storage_options)
    existing = _listing(fs, path)
    if existing:
        if not (SIDECAR_PATH in existing or TRANSCRIPT_PATH in existing):
            raise DirectoryLayoutError(
                url, "holds objects and no workspace; it is not replaced, even with overwrite"
            )
        if not overwrite:
            raise DirectoryLayoutError(url, "holds a workspace; pass overwrite=True to replace it")
        fs.rm(path, recursive=True)
    later = {rel: data for rel, data in files.items() if rel == SIDECAR_PATH}
    for batch in ({r: d for r, d in files.items() if r not in later}, later):
        for folder in sorted({f"{path}/{rel}".rpartition("/")[0] for rel in batch}):
            fs.makedirs(folder, exist_ok=True)
        if batch:
            fs.pipe({f"{path}/{rel}": data for rel, data in sorted(batch.items())})


def download(url: str, storage_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every object under ``url`` (relative path -> ``(bytes, time read)``).

    Raises:
        DirectoryLayoutError: Nothing is there.
    """
    fs, path = _filesystem(url, storage_options)
    names = [rel for rel in _listing(fs, path) if not rel.startswith(f"{LIVE_DIR}/")]
    if not names:
        raise DirectoryLayoutError(url, "holds no workspace (no objects under it)")
    contents = fs.cat([f"{path}/{rel}" for rel in names])
    now = utcnow()
    return {rel: (contents[f"{path}/{rel}"], now) for rel in names}
