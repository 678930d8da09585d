"""Upstream's ``FileStore`` shape, refusing (or importing) upstream files it finds."""

from __future__ import annotations

import os

from firefly_orm._interop._upstream_once import (
    IMPORT_MARK_NAMESPACE,
    check_upstream_data,
    import_upstream_once,
)
from firefly_orm._interop._upstream_sources import find_upstream_files
from firefly_orm.file_store import FileStore as _FileStore

__all__ = ["FileStore"]


class FileStore(_FileStore):
    """:class:`firefly_orm.FileStore` that does not start empty beside upstream's files.

    ``FileStore(base_dir=".firefly_memory")`` as upstream.  firefly_orm's files
    (``<prefix>-<hash>.json``) differ from upstream's (``<namespace>.json``,
    one JSON object per namespace), and each store ignores the other's, so a
    directory upstream wrote would look empty.  When ``base_dir`` holds
    upstream files that were never imported into this store, the constructor
    raises :class:`~firefly_orm.upstream_import.UpstreamDataFoundError` before
    anything is written.  With ``import_upstream=True`` it imports them: every
    namespace in ONE unit of work with the mark that says it is done
    (:func:`~firefly_orm.upstream_import.import_upstream_once`), so it happens
    once; an invalid record raises
    :class:`~firefly_orm.upstream_import.UpstreamImportError` and nothing is
    imported.  Upstream's files are left as they were.

    Args:
        base_dir: The directory.
        import_upstream: Import upstream's files found in it (see above).
        lock_timeout: As for :class:`firefly_orm.FileStore`.

    Raises:
        UpstreamDataFoundError: Upstream files never imported, and
            ``import_upstream`` false.
        UpstreamImportError: ``import_upstream`` and an invalid record.
    """

    def __init__(
        self,
        base_dir: str | os.PathLike[str] = ".firefly_memory",
        *,
        import_upstream: bool = False,
        lock_timeout: float | None = None,
    ) -> None:
        super().__init__(base_dir, lock_timeout=lock_timeout)
        pending = check_upstream_data(
            self,
            find_upstream_files(self.base_dir),
            import_upstream=import_upstream,
            may_hold_mark=self.path_for(IMPORT_MARK_NAMESPACE).exists(),
            opened_as=f"FileStore({os.fspath(base_dir)!r}, import_upstream=True)",
            commands=(),
        )
        if pending is not None:
            import_upstream_once(pending, self)
