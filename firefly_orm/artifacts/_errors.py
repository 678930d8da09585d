"""The errors of artifact workspaces (each also exported by :mod:`firefly_orm.artifacts`)."""

from __future__ import annotations

from firefly_orm.errors import ConcurrencyError, FireflyOrmError

__all__ = ["ReadOnlyPathError", "ShaMismatchError", "WorkspaceExistsError"]


class ShaMismatchError(ConcurrencyError):
    """A compare-and-set found another content than ``expected_sha``; nothing was written.

    Attributes:
        path: The file.
        expected_sha: What the caller expected (``""``: that the file does not exist).
        current_sha: The file's sha256 now (``""``: it does not exist).  Read it
            again, merge, and retry with this sha.
    """

    def __init__(self, path: str, expected_sha: str, current_sha: str) -> None:
        self.path = path
        self.expected_sha = expected_sha
        self.current_sha = current_sha
        now = current_sha or "absent"
        wanted = expected_sha or "absent"
        super().__init__(
            f"{path!r} changed: its current sha is {now} (expected {wanted}); nothing was written"
        )


class ReadOnlyPathError(FireflyOrmError, PermissionError):
    """A write, delete or promotion under a read-only prefix it has no right to; nothing written.

    A direct write or delete there is refused on every handle holding the
    prefix; a promotion there on such a handle unless it was opened with
    ``reviewer=True`` (an agent cannot approve its own writes).

    Attributes:
        path: The file.
        prefix: The read-only prefix it is under.
    """

    def __init__(
        self, path: str, prefix: str, what: str = "written", *, reviewer_needed: bool = False
    ) -> None:
        """``what``: ``"written"``, ``"deleted"``, ``"moved"``; ``reviewer_needed``: a promotion."""
        self.path = path
        self.prefix = prefix
        if reviewer_needed:
            message = (
                f"this handle cannot promote into {path!r}: it is under the handle's read-only "
                f"prefix {prefix!r}, and promotion there needs a reviewer's handle (opened "
                "without that prefix, or with reviewer=True)"
            )
        else:
            message = (
                f"{path!r} is under the read-only prefix {prefix!r} and cannot be {what} "
                "directly; a trusted reviewer copies files there with promote()"
            )
        super().__init__(message)


class WorkspaceExistsError(FireflyOrmError):
    """``create`` (or an import without ``replace``) found the workspace already there."""
