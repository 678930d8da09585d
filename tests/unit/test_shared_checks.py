"""The checks several modules share since their copies were merged (issue 27).

``check_unit_interval`` (an entry's, a fact's and an item's importance, the
promotion threshold), ``check_bound_user`` (a layer bound to one user) and
``read_regular_file`` (the upstream and Flyte directory imports): each is tested
here once, and through every caller that used to hold a copy.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from firefly_orm.entry._rules import check_bound_user, check_unit_interval
from firefly_orm.errors import EntryValidationError
from firefly_orm.file_store._regular import read_regular_file
from firefly_orm.long_term.promotion import check_threshold
from firefly_orm.working import WorkingMemory

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------- check_unit_interval


@SETTINGS
@given(
    hs.one_of(
        hs.floats(allow_nan=True, allow_infinity=True),
        hs.integers(min_value=-(10**400), max_value=10**400),
        hs.booleans(),
        hs.text(max_size=3),
        hs.none(),
    )
)
def test_unit_interval_accepts_exactly_the_numbers_from_0_to_1(value: Any) -> None:
    ok = (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and not (isinstance(value, float) and math.isnan(value))
        and 0 <= value <= 1
    )
    if ok:
        assert check_unit_interval(value, "importance") == float(value)
        assert check_threshold(value) == float(value)
    else:
        with pytest.raises(EntryValidationError) as caught:
            check_unit_interval(value, "importance")
        assert caught.value.field == "importance"
        assert str(caught.value).endswith(f"must be a number from 0.0 to 1.0, got {value!r}")


def test_each_caller_keeps_its_field_and_message() -> None:
    with pytest.raises(EntryValidationError, match=r"^importance_threshold: must be a number from"):
        check_threshold(1.5)
    with pytest.raises(
        EntryValidationError, match=r"must be a number between 0\.0 and 1\.0, got 2"
    ):
        WorkingMemory().set("k", "v", importance=2)


# --------------------------------------------------------------------------- check_bound_user


def test_bound_user_accepts_its_own_and_any_when_unbound() -> None:
    assert check_bound_user("ada", "ada", "memory") == "ada"
    assert check_bound_user("bob", None, "memory") == "bob"


def test_bound_user_refuses_another_user_naming_the_caller() -> None:
    with pytest.raises(
        EntryValidationError, match=r"^user_id: this registry serves user 'ada' only$"
    ):
        check_bound_user("bob", "ada", "registry")


@pytest.mark.parametrize("bad", ["", 7, None, "x" * 300])
def test_bound_user_refuses_a_bad_user_id(bad: Any) -> None:
    with pytest.raises(EntryValidationError):
        check_bound_user(bad, None, "memory")


# --------------------------------------------------------------------------- read_regular_file


class _Refused(Exception):
    pass


def _refuse(reason: str) -> Exception:
    return _Refused(reason)


def test_reads_a_regular_file_within_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    data, st = read_regular_file(path, os.lstat(path), 10, _refuse)
    assert data == b"x" * 10
    assert st.st_size == 10


def test_refuses_a_file_over_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 11)
    with pytest.raises(_Refused, match=r"^is larger than 10 bytes$"):
        read_regular_file(path, os.lstat(path), 10, _refuse)


def test_refuses_a_file_swapped_after_it_was_looked_at(tmp_path: Path) -> None:
    path, other = tmp_path / "f", tmp_path / "g"
    path.write_bytes(b"old")
    other.write_bytes(b"new")
    seen = os.lstat(path)
    os.replace(other, path)
    with pytest.raises(_Refused, match=r"^changed while it was read$"):
        read_regular_file(path, seen, 10, _refuse)


@pytest.mark.skipif(not hasattr(os, "O_NOFOLLOW"), reason="needs O_NOFOLLOW")
def test_does_not_follow_a_symbolic_link(tmp_path: Path) -> None:
    target, link = tmp_path / "target", tmp_path / "link"
    target.write_bytes(b"secret")
    link.symlink_to(target)
    with pytest.raises(OSError):
        read_regular_file(link, os.lstat(target), 10, _refuse)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(_Refused, match=r"^changed while it was read$"):
        read_regular_file(fifo, os.lstat(fifo), 10, _refuse)
