"""ConceptEmbeddingModel: deterministic vectors that rank paraphrases above unrelated texts."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai import Embedder

from firefly_orm.testing.embeddings import (
    DEFAULT_DIMENSIONS,
    MODEL_NAME,
    ConceptEmbeddingModel,
    concept_vector,
)

UNRELATED = [
    "the quarterly report is due on friday",
    "our dog is named Rex",
    "the build failed on the python server",
    "he is allergic to peanuts",
    "she moved to Berlin last year",
    "the invoice was paid by card",
]


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def ranking(query: str, texts: list[str]) -> list[str]:
    """``texts`` by decreasing cosine similarity to ``query``."""
    q = concept_vector(query)
    return sorted(texts, key=lambda text: cosine(q, concept_vector(text)), reverse=True)


def test_the_issue_example_ranks_first_by_a_shared_concept() -> None:
    memory = "the customer prefers email over phone calls"
    ranked = ranking("how should we contact her?", [*UNRELATED, memory])
    assert ranked[0] == memory
    # a concept, not luck: the best unrelated text is far below
    q = concept_vector("how should we contact her?")
    best = cosine(q, concept_vector(memory))
    assert best > 0.2
    assert all(cosine(q, concept_vector(text)) < best / 3 for text in UNRELATED)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("where does she live now?", "she moved to Berlin last year"),
        ("does she have any pets", "our dog is named Rex"),
        ("what food should he avoid", "he is allergic to peanuts"),
        ("when is the deadline", "the quarterly report is due on friday"),
        ("how did she pay", "the invoice was paid by card"),
        ("a deployment bug in the code", "the build failed on the python server"),
    ],
)
def test_paraphrases_sharing_a_concept_rank_first(query: str, expected: str) -> None:
    assert ranking(query, UNRELATED)[0] == expected


def test_shared_words_and_inflections_rank_above_unrelated() -> None:
    texts = [*UNRELATED, "Calling the supplier takes ages"]
    assert ranking("she called the supplier", texts)[0] == "Calling the supplier takes ages"
    # a misspelling still shares most character trigrams
    assert ranking("the quartely reprt", UNRELATED)[0] == UNRELATED[0]


def test_the_concept_features_carry_a_paraphrase_without_shared_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the concept features the issue's example shares nothing with its query."""
    from firefly_orm.testing import embeddings

    memory, query = "the customer prefers email over phone calls", "how should we contact her?"
    with_concepts = cosine(concept_vector(query), concept_vector(memory))
    monkeypatch.setattr(embeddings, "CONCEPT_WEIGHT", 0.0)
    without = cosine(concept_vector(query), concept_vector(memory))
    assert abs(without) < 0.1 < with_concepts


def test_vectors_are_unit_length_and_deterministic() -> None:
    a, b = concept_vector("Email me tomorrow"), ConceptEmbeddingModel()
    assert len(a) == DEFAULT_DIMENSIONS
    assert math.isclose(math.fsum(x * x for x in a), 1.0, rel_tol=1e-9)
    assert Embedder(b).embed_query_sync("Email me tomorrow").embeddings[0] == a
    # case, punctuation and stop words do not change the vector
    assert concept_vector("EMAIL me, tomorrow!") == a


def test_text_without_content_words_gets_one_fixed_unit_vector() -> None:
    empty, stop = concept_vector(""), concept_vector("the of and")
    assert empty == stop
    assert math.isclose(math.fsum(x * x for x in empty), 1.0)
    assert cosine(empty, concept_vector("email")) < 0.5


def test_the_model_reports_its_name_dimensions_and_usage() -> None:
    model = ConceptEmbeddingModel(dimensions=64)
    result = Embedder(model).embed_documents_sync(["one two", "three"])
    assert (model.model_name, model.system, model.dimensions) == (MODEL_NAME, "firefly_orm", 64)
    assert (result.model_name, result.provider_name) == (MODEL_NAME, "firefly_orm")
    assert [len(v) for v in result.embeddings] == [64, 64]
    assert list(result.inputs) == ["one two", "three"]
    assert result.input_type == "document"
    assert result.usage.input_tokens == 3
    assert ConceptEmbeddingModel(model_name="other-v2").model_name == "other-v2"


async def test_async_embedding_and_the_dimensions_setting() -> None:
    model = ConceptEmbeddingModel(dimensions=32)
    result = await model.embed("reach me by phone", input_type="query", settings={"dimensions": 48})
    assert len(result.embeddings[0]) == 48
    assert list(result.embeddings[0]) == concept_vector("reach me by phone", 48)
    assert await model.count_tokens("reach me by phone") == 4
    assert await model.max_input_tokens() is not None


@pytest.mark.parametrize("bad", [0, 7, -1, True, 2.5, "16"])
def test_bad_dimensions_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="dimensions"):
        ConceptEmbeddingModel(dimensions=bad)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200), st.integers(min_value=8, max_value=300))
def test_any_text_gets_a_finite_unit_vector(text: str, dimensions: int) -> None:
    vector = concept_vector(text, dimensions)
    assert len(vector) == dimensions
    assert all(math.isfinite(x) for x in vector)
    assert math.isclose(math.fsum(x * x for x in vector), 1.0, rel_tol=1e-9)
    assert concept_vector(text, dimensions) == vector
