"""TokenEstimator: the word heuristic, tiktoken counting and the fallback."""

from __future__ import annotations

import logging
import sys
import types
from typing import Any

import pytest

from firefly_orm.tokens import TokenEstimator


def words(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n))


@pytest.mark.parametrize(
    ("n_words", "expected"), [(7, 9), (30, 39), (6, 7), (10, 13), (60, 79), (1, 1), (3, 3)]
)
def test_worked_values_of_the_default_heuristic(n_words: int, expected: int) -> None:
    assert TokenEstimator().estimate(words(n_words)) == expected


@pytest.mark.parametrize("text", ["", "\n", "   \t  "])
def test_empty_text_counts_one_token(text: str) -> None:
    assert TokenEstimator().estimate(text) == 1


def test_whitespace_split_counts_any_whitespace() -> None:
    assert TokenEstimator().estimate("a\nb\tc  d") == TokenEstimator().estimate("a b c d") == 5


def test_tokens_per_word_multiplier_truncates() -> None:
    est = TokenEstimator(tokens_per_word=2.5)
    assert est.estimate(words(3)) == 7
    assert est.tokens_per_word == 2.5
    assert TokenEstimator(tokens_per_word=0.1).estimate(words(5)) == 1


def test_fits() -> None:
    est = TokenEstimator()
    assert est.fits(words(7), 9)
    assert not est.fits(words(7), 8)
    assert est.fits("", 1)
    assert not est.fits("", 0)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "1"])
def test_bad_tokens_per_word(bad: Any) -> None:
    with pytest.raises(ValueError, match="tokens_per_word"):
        TokenEstimator(tokens_per_word=bad)


def test_non_string_text_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        TokenEstimator().estimate(None)  # type: ignore[arg-type]


class _FakeEncoding:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def encode(self, text: str, disallowed_special: Any = ()) -> list[int]:
        self.calls.append(text)
        return [ord(c) for c in text]  # one token per character


def _install_fake_tiktoken(monkeypatch: pytest.MonkeyPatch, get_encoding: Any) -> None:
    module = types.ModuleType("tiktoken")
    module.get_encoding = get_encoding  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tiktoken", module)


def test_encoding_name_uses_tiktoken_exact_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    encoding = _FakeEncoding()
    names: list[str] = []

    def get_encoding(name: str) -> _FakeEncoding:
        names.append(name)
        return encoding

    _install_fake_tiktoken(monkeypatch, get_encoding)
    est = TokenEstimator(encoding_name="fake_base")
    assert est.estimate("hello world") == len("hello world")
    assert est.estimate("") == 0  # exact count, no floor of 1
    assert est.uses_tiktoken
    assert names == ["fake_base"]  # loaded once
    assert encoding.calls == ["hello world", ""]


def test_missing_tiktoken_falls_back_with_a_debug_log(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # import raises ImportError
    est = TokenEstimator(encoding_name="cl100k_base")
    with caplog.at_level(logging.DEBUG, logger="firefly_orm"):
        assert est.estimate(words(7)) == 9
    assert not est.uses_tiktoken
    assert any("tiktoken is not installed" in r.getMessage() for r in caplog.records)


def test_unloadable_encoding_falls_back_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def get_encoding(name: str) -> Any:
        raise ValueError(f"Unknown encoding {name}")

    _install_fake_tiktoken(monkeypatch, get_encoding)
    est = TokenEstimator(encoding_name="nope")
    with caplog.at_level(logging.WARNING, logger="firefly_orm"):
        assert est.estimate(words(10)) == 13
        assert est.estimate(words(10)) == 13
    warnings = [r for r in caplog.records if "could not load encoding" in r.getMessage()]
    assert len(warnings) == 1  # logged once, not on every call


def test_repr() -> None:
    assert repr(TokenEstimator(encoding_name="x")) == (
        "TokenEstimator(tokens_per_word=1.33, encoding_name='x')"
    )
