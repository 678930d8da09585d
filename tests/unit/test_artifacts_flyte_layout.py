"""Flyte's directory layout without a store: any snapshot survives a write and a read (issue 12).

Property-based: random workspaces (paths of any printable characters, text,
JSON and binary files, audit records, kept versions including two of one
content at one instant, JSON messages, microsecond times) are written with
:func:`write_directory`, read back with :func:`read_directory` into the same
snapshot, and written again into the same bytes.  Then the small rules: a
version's file name, and error locations that are not UTF-8.
"""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from firefly_orm.artifacts import (
    RESERVED_DIRS,
    TRANSCRIPT_PATH,
    ArtifactFile,
    AuditRecord,
    TranscriptMessage,
    WorkspaceSnapshot,
    json_text,
)
from firefly_orm.artifacts._flyte import DirectoryLayoutError, read_directory, write_directory

#: Bidirectional formatting characters, refused in names as control characters are.
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
NAME_CHARS = st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"), blacklist_characters=BIDI)
SEGMENT = st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"), blacklist_characters="/\\" + BIDI),
    min_size=1,
    max_size=10,
).map(lambda s: unicodedata.normalize("NFC", s))
TEXT_CHARS = st.characters(codec="utf-8")
TIMES = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def paths(draw: st.DrawFn) -> str:
    segments = draw(st.lists(SEGMENT, min_size=1, max_size=4))
    assume(all(s not in (".", "..") for s in segments))
    path = "/".join(segments)
    assume(
        segments[0].casefold() not in RESERVED_DIRS and segments[0].casefold() != TRANSCRIPT_PATH
    )
    assume(len(quote(path, safe="").encode()) <= 250)
    return path


@st.composite
def files(draw: st.DrawFn, path: str) -> ArtifactFile:
    kind = draw(st.sampled_from(["text", "json", "bytes"]))
    data: bytes | str
    if kind == "text":
        data = draw(st.text(TEXT_CHARS, max_size=40))
    elif kind == "json":
        data = json_text(draw(JSON))
    else:
        data = draw(st.binary(max_size=40))
    return ArtifactFile.build(
        path,
        data,
        kind=kind,
        actor=draw(st.sampled_from(["agent", "reviewer", "Zoë ✓"])),
        reason=draw(
            st.text(st.characters(codec="utf-8", blacklist_characters="\x00"), max_size=20)
        ),
        updated_at=draw(TIMES),
        version=draw(st.integers(1, 50)),
    )


@st.composite
def snapshots(draw: st.DrawFn) -> WorkspaceSnapshot:
    chosen = draw(st.lists(paths(), max_size=5, unique_by=str.casefold))
    # a directory cannot hold a file that is also a folder
    assume(not any(b.startswith(a + "/") for a in chosen for b in chosen))
    current = [draw(files(p)) for p in chosen]
    kept = [draw(files(draw(paths()))) for _ in range(draw(st.integers(0, 4)))]
    twice = draw(st.booleans())
    if kept and twice:
        kept.append(kept[0])  # the same content kept twice at one instant
    kept.sort(key=lambda f: f.info.updated_at)
    audit: list[AuditRecord] = []
    for file in current + kept:
        op = draw(st.sampled_from(["create", "update", "delete", "promote"]))
        source = draw(paths()) if op == "promote" else None
        audit.append(
            AuditRecord(
                at=file.info.updated_at,
                op=op,
                path=file.path,
                old_sha=draw(st.sampled_from(["", "0" * 64])),
                new_sha="" if op == "delete" else file.info.sha256,
                actor=file.info.actor,
                reason=file.info.reason,
                source=source,
                moved=source is not None and draw(st.booleans()),
            )
        )
    start = draw(TIMES)
    messages = [
        TranscriptMessage(start + timedelta(microseconds=i), value)
        for i, value in enumerate(draw(st.lists(JSON.filter(lambda v: v is not None), max_size=4)))
    ]
    return WorkspaceSnapshot(
        key=draw(st.text(NAME_CHARS, min_size=1, max_size=20)),
        created_at=draw(TIMES),
        files=sorted(current, key=lambda f: f.path),
        audit=audit,
        versions=kept,
        messages=messages,
    )


def tree(root: Path) -> dict[str, bytes | None]:
    return {
        p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(snapshot=snapshots())
def test_any_snapshot_survives_the_directory(
    snapshot: WorkspaceSnapshot, tmp_path_factory: pytest.TempPathFactory
) -> None:
    base = tmp_path_factory.mktemp("layout")
    write_directory(snapshot, base / "one")
    back = read_directory(base / "one")
    assert (back.key, back.created_at) == (snapshot.key, snapshot.created_at)
    assert back.files == snapshot.files
    assert back.versions == snapshot.versions
    assert [r.to_dict() for r in back.audit] == [r.to_dict() for r in snapshot.audit]
    assert back.messages == snapshot.messages
    write_directory(back, base / "two")
    assert tree(base / "two") == tree(base / "one")


@pytest.mark.parametrize(
    ("name", "at"),
    [
        ("2025-03-01T09-30-00+00-00", datetime(2025, 3, 1, 9, 30, tzinfo=UTC)),
        ("2025-03-01T09-30-00.000250+00-00", datetime(2025, 3, 1, 9, 30, 0, 250, tzinfo=UTC)),
        ("2025-03-01T10-30-00+01-00", datetime(2025, 3, 1, 9, 30, tzinfo=UTC)),
        ("2025-03-01T09-30-00Z", datetime(2025, 3, 1, 9, 30, tzinfo=UTC)),
    ],
)
def test_version_names_as_flyte_writes_them(name: str, at: datetime, tmp_path: Path) -> None:
    data = b"kept"
    sha = ArtifactFile.build("a.md", data).info.sha256
    root = tmp_path / "store"
    (root / "versions" / "a.md").mkdir(parents=True)
    (root / "versions" / "a.md" / f"{name}_{sha}.txt").write_bytes(data)
    (root / "versions" / "a.md" / f"{name}_{sha}_0123abcd.txt").write_bytes(data)  # Flyte's salt
    snapshot = read_directory(root)
    assert [(v.path, v.info.updated_at, v.info.version) for v in snapshot.versions] == [
        ("a.md", at, 1),
        ("a.md", at, 2),
    ]
    assert snapshot.key == "store" and snapshot.files == []


@pytest.mark.parametrize("name", ["2025-03-01T09:30:00+00:00", "2025-03-01T09-30-00", "x"])
def test_badly_named_versions_are_refused(name: str, tmp_path: Path) -> None:
    root = tmp_path / "store"
    (root / "versions" / "a.md").mkdir(parents=True)
    sha = ArtifactFile.build("a.md", b"kept").info.sha256
    (root / "versions" / "a.md" / f"{name}_{sha}.txt").write_bytes(b"kept")
    with pytest.raises(DirectoryLayoutError, match=r"is not named <time>_<sha256>\.txt"):
        read_directory(root)


def test_error_locations_are_printable() -> None:
    error: Any = DirectoryLayoutError("user/bad-\udcff.md", "is refused")
    assert error.where == "user/bad-\\xff.md"
    assert str(error) == "user/bad-\\xff.md: is refused"
    str(error).encode("utf-8")  # printable anywhere
    lone: Any = DirectoryLayoutError("x\ud800", "is refused")
    lone.where.encode("utf-8")
