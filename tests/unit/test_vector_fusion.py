"""Reciprocal rank fusion, embedding specs and vector search requests (no database)."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from firefly_orm.errors import EntryValidationError
from firefly_orm.vector import (
    RRF_K,
    EmbeddingSpec,
    VectorRequest,
    check_vector,
    fuse_by,
    reciprocal_rank_fusion,
)

rankings = st.lists(st.lists(st.integers(0, 30), max_size=12), max_size=4)


def test_an_item_in_both_lists_beats_one_in_a_single_list_at_the_same_place() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["c", "a", "d"]])
    assert [key for key, _ in fused] == ["a", "c", "b", "d"]
    assert fused[0][1] == pytest.approx(1 / (RRF_K + 1) + 1 / (RRF_K + 2))


@given(rankings)
def test_scores_are_the_sum_of_reciprocal_ranks(lists: list[list[int]]) -> None:
    fused = dict(reciprocal_rank_fusion(lists))
    expected: dict[int, float] = {}
    for ranking in lists:
        for key in dict.fromkeys(ranking):
            expected[key] = expected.get(key, 0.0) + 1 / (RRF_K + ranking.index(key) + 1)
    assert fused.keys() == expected.keys()
    for key, score in expected.items():
        assert math.isclose(fused[key], score)


@given(rankings)
def test_fused_order_is_by_score_then_first_seen(lists: list[list[int]]) -> None:
    fused = reciprocal_rank_fusion(lists)
    scores = [score for _, score in fused]
    assert scores == sorted(scores, reverse=True)
    first_seen = list(dict.fromkeys(key for ranking in lists for key in ranking))
    for (a, sa), (b, sb) in itertools.pairwise(fused):
        if sa == sb:
            assert first_seen.index(a) < first_seen.index(b)


@given(st.lists(st.text(max_size=3), max_size=8), st.lists(st.text(max_size=3), max_size=8))
def test_fuse_by_keeps_the_first_object_of_a_key(first: list[str], second: list[str]) -> None:
    objects = [[(text, "words") for text in first], [(text, "meaning") for text in second]]
    fused = fuse_by(objects, key=lambda pair: pair[0])
    assert [obj[0] for obj, _ in fused] == [
        key for key, _ in reciprocal_rank_fusion([first, second])
    ]
    for (text, origin), _ in fused:
        assert origin == ("words" if text in first else "meaning")


def test_fusion_arguments_are_checked() -> None:
    with pytest.raises(EntryValidationError, match="k"):
        reciprocal_rank_fusion([["a"]], k=0)
    with pytest.raises(EntryValidationError, match="weights"):
        reciprocal_rank_fusion([["a"], ["b"]], weights=[1.0])
    assert reciprocal_rank_fusion([["a"], ["b"]], weights=[0.0, 1.0])[0][0] == "b"


@pytest.mark.parametrize(
    ("model", "dimensions"),
    [("", 3), ("  ", 3), ("m\x00", 3), ("x" * 201, 3), ("m", 0), ("m", True), ("m", 16_001)],
)
def test_bad_specs_are_refused(model: str, dimensions: int) -> None:
    with pytest.raises(EntryValidationError):
        EmbeddingSpec(model, dimensions)


@pytest.mark.parametrize(
    "vector",
    [[1.0, 2.0], [0.0, 0.0, 0.0], [1.0, math.nan, 0.0], [1.0, math.inf, 0.0], "abc", [1, "2", 3]],
)
def test_bad_vectors_are_refused(vector: object) -> None:
    with pytest.raises(EntryValidationError):
        check_vector(vector, EmbeddingSpec("m", 3))


def test_requests_check_their_filters_and_apply_them() -> None:
    spec = EmbeddingSpec("m", 2)
    with pytest.raises(EntryValidationError, match="limit"):
        VectorRequest.build("ns", [1.0, 0.0], spec, limit=-1)
    with pytest.raises(EntryValidationError, match="tags"):
        VectorRequest.build("ns", [1.0, 0.0], spec, tags="vip")
    request = VectorRequest.build("ns", [1, 0], spec, tags=["a", "a"], kind="episodic")
    assert request.tags == ("a",) and request.vector == (1.0, 0.0)
    assert request.similarity([2.0, 0.0]) == pytest.approx(1.0)
    assert request.similarity([0.0, 3.0]) == pytest.approx(0.0)
