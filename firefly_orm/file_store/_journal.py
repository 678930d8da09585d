"""Commit journals: how a ``FileStore`` commit over several files survives a crash.

A commit that changes more than one namespace first writes a journal,
``base_dir/.journal/<commit id>.json`` (temporary file, fsync, rename, fsync of
the directory), holding one *step* per namespace: its snapshot's file name,
the namespace, the exact record line to append to its log (``null``: the
namespace is to be removed) and the state it was in when the commit was
decided (its log's generation and the length of the log's good lines;
``"snapshot:<sha256>"`` and 0 for a namespace without a log; ``null``: it did
not exist).  Only then are the files changed; the journal is removed (and the
removal fsynced) last.  The writer holds the lock of every namespace of the
commit from before the journal is written until it is removed.

So a journal still present when one of its files' locks is taken again belongs
to a writer that is gone (killed, or its machine crashed): the commit was
decided and is *rolled forward* by whoever finds it (see
:meth:`FileStore <firefly_orm.file_store.FileStore>`), holding the locks of
all its files.  Each step is idempotent thanks to the recorded state: a
namespace still in it gets the line appended (or is removed; a new one is
created from the line); one that has moved past it (a longer log, another
generation, created or removed) already has the change.  A single-namespace
commit needs no journal: appending one line is atomic once torn lines are
ignored, and a new namespace's snapshot appears by one rename
(:mod:`firefly_orm.file_store._log`).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from firefly_orm.errors import StoreCorruptedError, StoreError
from firefly_orm.file_store._files import (
    DATA_FILE,
    fsync_dir,
    namespace_file_name,
    open_to_read,
    remove_file,
    write_new_file,
)

__all__ = ["JOURNAL_DIR", "Journal", "Step", "pending", "read", "remove", "write"]

#: The directory (inside ``base_dir``) holding the journals of commits in flight.
JOURNAL_DIR = ".journal"
_FORMAT = "firefly_orm.file_journal"  # the on-disk format's name (the module's former path)
_VERSION = 1


@dataclass(frozen=True)
class Step:
    """What a commit does to one namespace file.

    Attributes:
        name: The name of the namespace's snapshot in ``base_dir``.
        namespace: Its namespace.
        line: The record line to append (newline included), or ``None`` to
            remove the namespace.
        generation: :attr:`NamespaceLog.mark
            <firefly_orm.file_store._log.NamespaceLog.mark>` when the commit was
            decided (its log's generation), or ``None`` if it did not exist.
        offset: The length of its log's good lines then.
    """

    name: str
    namespace: str
    line: bytes | None
    generation: str | None
    offset: int


@dataclass(frozen=True)
class Journal:
    """A commit over several files: its id and one :class:`Step` per file."""

    commit_id: str
    steps: tuple[Step, ...]


def _is_journal_name(name: str) -> bool:
    stem, dot, suffix = name.partition(".")
    return (
        dot == "."
        and suffix == "json"
        and len(stem) == 32
        and all(c in "0123456789abcdef" for c in stem)
    )


def pending(base_dir: Path) -> list[Path]:
    """The journals in ``base_dir`` (commits in flight, or left by dead writers), sorted.

    Raises:
        StoreError: The journal directory exists but cannot be listed.
    """
    directory = base_dir / JOURNAL_DIR
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StoreError(f"cannot list the commit journals in {directory}: {exc}") from exc
    return [directory / name for name in sorted(names) if _is_journal_name(name)]


def write(base_dir: Path, journal: Journal) -> Path:
    """Write ``journal`` durably; return its path.

    Raises:
        StoreError: It could not be written (then it does not exist).
    """
    directory = base_dir / JOURNAL_DIR
    try:
        os.mkdir(directory, 0o755)
    except FileExistsError:
        pass
    except OSError as exc:
        raise StoreError(f"cannot create the commit journal directory {directory}: {exc}") from exc
    else:
        fsync_dir(base_dir)
    try:
        mode = os.lstat(directory).st_mode
    except OSError as exc:
        raise StoreError(f"cannot use the commit journal directory {directory}: {exc}") from exc
    if not stat.S_ISDIR(mode):
        raise StoreError(f"{directory} is not a directory; remove it to let FileStore use it")
    steps = [
        {
            "file": step.name,
            "namespace": step.namespace,
            "line": None if step.line is None else step.line.decode("ascii"),
            "generation": step.generation,
            "offset": step.offset,
        }
        for step in journal.steps
    ]
    document = {"format": _FORMAT, "version": _VERSION, "id": journal.commit_id, "steps": steps}
    path = directory / f"{journal.commit_id}.json"
    write_new_file(path, json.dumps(document, ensure_ascii=True).encode("ascii"))
    return path


def read(path: Path) -> Journal | None:
    """The journal at ``path``, or ``None`` if it is gone (its commit completed).

    Raises:
        StoreCorruptedError: It cannot be read or is not a valid journal (it is
            left in place: the namespace files it names need checking).
    """
    fd = open_to_read(path, "the commit journal")
    if fd is None:
        return None
    try:
        with os.fdopen(fd, "rb") as handle:
            raw = handle.read()
        return _parse(path, json.loads(raw.decode("ascii")))
    except Exception as exc:
        raise StoreCorruptedError(
            f"corrupt commit journal {path}: {exc} (it is left in place; check the files "
            "it names, then remove it)"
        ) from exc


def _parse(path: Path, document: Any) -> Journal:
    if not isinstance(document, dict) or document.get("format") != _FORMAT:
        raise ValueError("not a commit journal")
    if document.get("version") != _VERSION:
        raise ValueError(f"format version {document.get('version')!r} is not supported")
    commit_id = document.get("id")
    raw_steps = document.get("steps")
    if not isinstance(commit_id, str) or f"{commit_id}.json" != path.name:
        raise ValueError("its id does not match its name")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ValueError("it has no steps")
    steps: list[Step] = []
    for raw in raw_steps:
        if not isinstance(raw, dict):
            raise ValueError("a step is not an object")
        name, namespace, line = raw.get("file"), raw.get("namespace"), raw.get("line")
        generation, offset = raw.get("generation"), raw.get("offset")
        if not isinstance(name, str) or not DATA_FILE.fullmatch(name):
            raise ValueError(f"bad file name {name!r}")
        if not isinstance(namespace, str) or namespace_file_name(namespace) != name:
            raise ValueError(f"namespace {namespace!r} does not belong in {name}")
        if line is not None and (
            not isinstance(line, str) or not line.endswith("\n") or "\n" in line[:-1]
        ):
            raise ValueError(f"bad record line for {name}")
        if generation is not None and not isinstance(generation, str):
            raise ValueError(f"bad generation for {name}")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"bad offset for {name}")
        data = None if line is None else line.encode("ascii")
        steps.append(Step(name, namespace, data, generation, offset))
    if len({step.name for step in steps}) != len(steps):
        raise ValueError("a file appears twice")
    return Journal(commit_id, tuple(steps))


def remove(path: Path) -> None:
    """Remove a journal (its commit is complete), durably.

    Raises:
        StoreError: It could not be removed.
    """
    remove_file(path, "the commit journal")
