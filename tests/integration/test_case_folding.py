"""Recall finds a word by itself on every store, whatever its capitals (issue 34).

``recall("İstanbul")`` never found "İstanbul city" on SQLite or PostgreSQL:
the query was lower-cased in Python (``"i̇stanbul"``, with a combining dot)
while SQLite's ``unicode61`` tokenizer leaves ``"İ"`` as it is and
PostgreSQL's ``lower()`` under a libc locale makes it ``"i"``.  The SQL
stores now also receive each word as the query spelled it, which the database
folds exactly as it folded the stored text
(:attr:`firefly_orm._search.SearchRequest.spellings`).

Also: a word's in-process form no longer depends on its neighbours (a whole
text lower-cased picks a capital sigma's form from the characters around it).
A Hypothesis property stores random words and recalls each by itself.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from firefly_orm._search import query_terms, query_words, text_terms
from firefly_orm.long_term import LongTermMemory

#: Words whose lower case changes length, differs between Python and the
#: databases, or depends on context.
AWKWARD = ["İstanbul", "İZMİR", "Straße", "STRASSE", "ΣΟΦΟΣ", "ǅemal", "ﬁle", "ΔΣ", "Ωμέγα"]
#: Words holding combining marks beyond U+0300-U+036F (vowel signs, harakat):
#: SQLite's tokenizer keeps them inside the word.
MARKED = ["हिन्दी", "العَرَبِيَّة", "x\u1ab0y"]


def _recalled(ltm: LongTermMemory, query: str) -> list[str]:
    return [found.item.text for found in ltm.recall(query, limit=50)]


@pytest.mark.parametrize("word", AWKWARD + MARKED)
def test_a_word_finds_itself(store: Any, word: str) -> None:
    ltm = LongTermMemory(store=store, namespace="folding")
    ltm.remember(f"{word} city")
    ltm.remember("unrelated text")
    assert _recalled(ltm, word) == [f"{word} city"]
    assert _recalled(ltm, f"{word}!") == [f"{word} city"]


def test_istanbul_the_issue_repro(store: Any) -> None:
    ltm = LongTermMemory(store=store, namespace="folding")
    ltm.remember("İstanbul city")
    assert _recalled(ltm, "İstanbul") == ["İstanbul city"]
    # The same word in other capitals: the whole word upper-cased.
    assert _recalled(ltm, "İSTANBUL") == ["İstanbul city"]


def test_a_capital_sigma_folds_the_same_wherever_it_stands(store: Any) -> None:
    # "ΔΣ.Δ".lower() has a small sigma (a letter follows), "ΔΣ".lower() is "δς".
    assert "ΔΣ.Δ".lower() == "δ\N{GREEK SMALL LETTER SIGMA}.δ"
    assert query_terms("ΔΣ") == ("δς",)
    assert text_terms("ΔΣ.Δ") == {"δς", "δ"}
    ltm = LongTermMemory(store=store, namespace="folding")
    ltm.remember("ΔΣ.Δ")
    assert _recalled(ltm, "ΔΣ") == ["ΔΣ.Δ"]


def test_spellings_carry_the_query_and_its_fold() -> None:
    terms, spellings = query_words("İstanbul istanbul İSTANBUL")
    assert terms == ("i̇stanbul", "istanbul")
    # The first spelling of each term, and the term itself; no duplicates.
    assert spellings == ("İstanbul", "i̇stanbul", "istanbul")


_LETTERS = st.characters(categories=("Lu", "Ll", "Lt", "Lo", "Nd", "Mn", "Mc"))
_WORDS = st.one_of(
    st.text(_LETTERS, min_size=1, max_size=10),
    st.sampled_from(AWKWARD + MARKED),
).filter(lambda w: bool(query_terms(w)) and set(query_terms(w)) == text_terms(w))


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(words=st.lists(_WORDS, min_size=1, max_size=3, unique=True))
def test_any_stored_word_is_recalled_by_itself(store: Any, words: list[str]) -> None:
    ltm = LongTermMemory(store=store, namespace="folding-property")
    ltm.clear()
    ids = {word: ltm.remember(f"{word} marker") for word in words}
    for word in words:
        found = {r.item.id for r in ltm.recall(word, limit=50)}
        assert ids[word] in found, (word, [hex(ord(c)) for c in word])
