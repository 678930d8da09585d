"""Reading one regular file that a hostile directory may hold: no link, FIFO or device.

Both importers that read files they did not write (the upstream ``FileStore``
import and the Flyte directory import) look at an entry with ``lstat`` first,
then read it here: the path is opened with ``O_NOFOLLOW`` and ``O_NONBLOCK``
(opening a FIFO never blocks, a final symbolic link is not followed), the open
file must still be the regular file that was looked at (a file swapped in
between is refused), and at most ``limit`` bytes are read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

__all__ = ["read_regular_file"]

#: Open for reading, never following a final symbolic link nor blocking on a FIFO.
_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_BINARY", 0)
)
_CHUNK = 1 << 20


def read_regular_file(
    path: Path, seen: os.stat_result, limit: int, refuse: Callable[[str], Exception]
) -> tuple[bytes, os.stat_result]:
    """The bytes of regular file ``path`` and its ``fstat``, if it is still ``seen``.

    Args:
        path: The file, looked at with ``lstat`` (giving ``seen``) by the caller.
        seen: What ``lstat`` said before the file was opened.
        limit: The most bytes accepted.
        refuse: Builds the caller's error from a reason (``"changed while it
            was read"``, ``"is larger than <limit> bytes"``).

    Raises:
        Exception: ``refuse(reason)``: the open file is not the regular file
            ``seen`` describes, or it is larger than ``limit``.
        OSError: The file cannot be opened or read (the caller words it).
    """
    fd = os.open(path, _FLAGS)
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino):
            raise refuse("changed while it was read")
        chunks: list[bytes] = []
        size = 0
        while chunk := handle.read(_CHUNK):
            size += len(chunk)
            if size > limit:
                raise refuse(f"is larger than {limit} bytes")
            chunks.append(chunk)
    return b"".join(chunks), st
