"""DirectoryWorkspace killed with SIGKILL half way through a write: whole files, a consistent
audit log, the lock released, and the change either absent or finished by the next opener.

The writer is a real subprocess.  It makes the first change, then kills itself (``SIGKILL``,
which no handler sees) just before the ``n``-th ``os.replace`` (or ``os.ftruncate``, the audit
log's append) of its second change: before the journal is in place, or at each step of applying it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import filelock
import pytest

from firefly_orm.artifacts._flyte import AUDIT_LOG_PATH, DirectoryWorkspace, read_directory
from firefly_orm.artifacts._results import Body

OLD = "old " * 4000
NEW = "new " * 5000

_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    from firefly_orm.artifacts._flyte import DirectoryWorkspace

    root, name, nth = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ws = DirectoryWorkspace(root, keep_versions=True)
    ws.write_text("user/a.md", {old!r}, actor="w", reason="first")
    real = getattr(os, name)
    calls = 0

    def dying(*args, **kwargs):
        global calls
        calls += 1
        if calls == nth:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)

    setattr(os, name, dying)
    ws.write_text("user/a.md", {new!r}, actor="w", reason="second")
    ws.append({{"role": "user", "content": "after"}})
    sys.exit(3)  # never reached: the kill comes first
    """
).format(old=OLD, new=NEW)


def _killed_writer(root: Path, name: str, nth: int) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _WRITER, str(root), name, str(nth)], timeout=60, check=False
    )
    assert proc.returncode == -signal.SIGKILL


def _whole_files(root: Path) -> None:
    """Every file is complete: the JSON ones parse, the written file is one whole content."""
    for path in root.rglob("*"):
        rel = path.relative_to(root).as_posix()
        if not path.is_file() or rel.startswith("meta/@live/"):
            continue
        data = path.read_bytes()
        if rel.endswith(".json"):
            json.loads(data)
        elif rel == AUDIT_LOG_PATH:
            assert data.endswith(b"\n")
            for line in data.splitlines():
                json.loads(line)
        else:
            assert data.decode() in (OLD, NEW), rel


@pytest.mark.parametrize(
    ("name", "nth"),
    [("replace", 1), ("replace", 3), ("ftruncate", 1)],
)
def test_killed_mid_write(tmp_path: Path, name: str, nth: int) -> None:
    root = tmp_path / "ws"
    _killed_writer(root, name, nth)
    _whole_files(root)  # before any recovery: no torn file
    with filelock.FileLock(str(root / "meta" / "@live" / "lock"), timeout=0):
        pass  # the kernel released the dead writer's lock
    finished = (root / "meta" / "@live" / "journal.json").exists()
    ws = DirectoryWorkspace(root, keep_versions=True)  # finishes the journal, if any
    assert not (root / "meta" / "@live" / "journal.json").exists()
    _whole_files(root)
    snapshot = read_directory(root)  # metadata shas and sizes match the bytes
    text = ws.read_text("user/a.md")
    expected = NEW if finished or (name, nth) != ("replace", 1) else OLD
    assert text == expected
    records = ws.audit_log()
    assert [r.reason for r in records] == (["first", "second"] if text == NEW else ["first"])
    assert records[-1].new_sha == Body.of_text(text).sha256
    assert [f.info.sha256 for f in snapshot.files] == [Body.of_text(text).sha256]
    assert len(snapshot.versions) == len(records)
    ws.write_text("user/a.md", "next", expected_sha=records[-1].new_sha)  # usable again
    assert ws.messages() == []
