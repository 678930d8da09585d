"""A deterministic embedding model for tests that still means something.

Recall by meaning cannot be tested with constant vectors (pydantic-ai's
``TestEmbeddingModel`` returns ones for every text): every item would tie with
every other.  :class:`ConceptEmbeddingModel` is a pydantic-ai
:class:`~pydantic_ai.embeddings.EmbeddingModel` that needs no network, no
weights and no randomness, and whose vectors are close for texts that share
words, word stems, spellings or *concepts*:

* each content word (lower-cased, stop words dropped, a light suffix stemmer
  applied: ``calls``/``called``/``calling`` -> ``call``) adds a hashed feature;
* each word's character trigrams add smaller hashed features, so inflections
  and typos still land near each other (``e-mails`` ~ ``email``);
* a small built-in lexicon (:data:`CONCEPTS`) maps words to concepts
  (``email``, ``phone``, ``call`` and ``reach`` all belong to ``contact``;
  ``live``, ``move`` and city names to ``home``; ...), and each concept a text
  touches adds a feature of its own, so a paraphrase without a shared word
  still ranks close: "the customer prefers email over phone calls" and "how
  should we contact her?" share ``contact``.

The features are hashed (BLAKE2b, signed) into :attr:`ConceptEmbeddingModel.dimensions`
buckets and the vector is scaled to unit length, so cosine similarity is a dot
product.  The same text always gives the same vector, in every process and on
every machine.  A text with no content word (``""``, ``"the"``) gets the vector
of a reserved feature, never the zero vector (whose cosine is undefined).

Usage::

    from pydantic_ai import Embedder
    from firefly_orm.testing.embeddings import ConceptEmbeddingModel

    embedder = Embedder(ConceptEmbeddingModel())
    result = embedder.embed_documents_sync(["the customer prefers email over phone calls"])

This is a test double: it knows a few hundred words and no grammar.  Use a
real model (OpenAI, Cohere, sentence-transformers, ...) in production.
"""

from __future__ import annotations

import hashlib
import math
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pydantic_ai.embeddings import EmbeddingModel, EmbeddingResult, EmbeddingSettings
from pydantic_ai.embeddings.result import EmbedInputType
from pydantic_ai.usage import RequestUsage

__all__ = [
    "CONCEPTS",
    "DEFAULT_DIMENSIONS",
    "MODEL_NAME",
    "ConceptEmbeddingModel",
    "concept_vector",
]

#: The name every :class:`ConceptEmbeddingModel` reports (bump the suffix when the
#: features change, so vectors stored by an older version are not mixed with new ones).
MODEL_NAME = "firefly-concept-v1"
#: The provider name it reports (pydantic-ai's ``system``).
SYSTEM = "firefly_orm"
#: Dimensions of the vectors when neither the model nor the call's settings say.
DEFAULT_DIMENSIONS = 256
#: The longest text the model reads, in words (the rest is ignored, like a model's context).
MAX_INPUT_WORDS = 8192

#: Relative weights of the three kinds of feature (before the vector is normalized).
WORD_WEIGHT = 1.0
TRIGRAM_WEIGHT = 0.5
CONCEPT_WEIGHT = 1.5
#: The feature of a text without content words.
_EMPTY_FEATURE = "\0empty"


def _split(words: str) -> frozenset[str]:
    """The set of the space-separated words of ``words``."""
    return frozenset(words.split())


#: Concepts and the words that evoke them (any inflection: words are stemmed on both sides).
CONCEPTS: Mapping[str, frozenset[str]] = {
    "contact": _split(
        "contact contacted contacting email emails e-mail mail mailed phone phoned phones "
        "telephone call calls called calling reach reached reachable text texted texting "
        "message messaged sms number ring rang voicemail inbox whatsapp"
    ),
    "home": _split(
        "home live lives lived living move moved moving relocate relocated reside resides "
        "address house apartment flat city town hometown neighborhood based located "
        "paris london berlin tokyo madrid rome lisbon boston chicago seattle amsterdam "
        "dublin vienna prague sydney toronto york austin denver munich"
    ),
    "food": _split(
        "food eat eats ate eating diet vegetarian vegan allergy allergic meal lunch dinner "
        "breakfast restaurant cook cooking cuisine peanut peanuts gluten dairy meat fish "
        "spicy dish dishes"
    ),
    "work": _split(
        "job jobs work works worked working employer employed company office career "
        "colleague colleagues boss manager role position team salary hired profession"
    ),
    "family": _split(
        "family wife husband spouse partner child children kid kids son daughter mother "
        "father mom dad parent parents sister brother baby married"
    ),
    "schedule": _split(
        "meeting meetings schedule scheduled calendar appointment available availability "
        "monday tuesday wednesday thursday friday saturday sunday morning afternoon evening "
        "tomorrow today tonight weekend deadline due"
    ),
    "pet": _split("pet pets dog dogs cat cats puppy kitten animal vet"),
    "travel": _split(
        "travel travels traveling trip trips flight flights fly flying vacation holiday "
        "hotel airport abroad journey visit visiting"
    ),
    "money": _split(
        "pay paid payment payments invoice invoices bill billing price cost costs budget "
        "money refund card cash expensive cheap subscription"
    ),
    "language": _split(
        "language languages speak speaks spoken english french german spanish italian "
        "japanese chinese fluent translate"
    ),
    "health": _split(
        "doctor sick ill illness health healthy medicine medication hospital pain "
        "symptom symptoms allergy"
    ),
    "preference": _split(
        "prefer prefers preferred preference like likes liked love loves favorite "
        "favourite enjoy enjoys rather dislike dislikes hate hates"
    ),
    "weather": _split("weather rain raining sunny snow snowing cold hot temperature forecast"),
    "software": _split(
        "code coding program programming software bug bugs python database server deploy "
        "computer laptop app application"
    ),
}

#: Words that carry no meaning of their own here.
STOP_WORDS = _split(
    "a an the and or but if of to in on at by for with from into over under about as is "
    "are was were be been being am do does did doing have has had having i me my we us our "
    "you your he him his she her they them their it its this that these those what which "
    "who whom how why when where there here should would could can will shall may might "
    "must not no so than then too very just also some any all each both more most other "
    "such only own same s t"
)

_WORD = re.compile(r"[^\W_]+(?:[-'][^\W_]+)*")


def _stem(word: str) -> str:
    """A light suffix stemmer: enough that inflections of a word share one feature."""
    word = word.replace("-", "").replace("'", "")
    for suffix, replacement, shortest in (
        ("ies", "y", 5),
        ("ing", "", 6),
        ("ed", "", 5),
        ("es", "", 6),
        ("s", "", 4),
    ):
        if word.endswith(suffix) and len(word) >= shortest and not word.endswith("ss"):
            return word[: len(word) - len(suffix)] + replacement
    return word


def _words(text: str) -> list[str]:
    """The stemmed content words of ``text``, in order (at most :data:`MAX_INPUT_WORDS`)."""
    found: list[str] = []
    for match in _WORD.finditer(text.lower()):
        word = match.group()
        if word in STOP_WORDS:
            continue
        found.append(_stem(word))
        if len(found) >= MAX_INPUT_WORDS:
            break
    return found


def _build_lexicon(concepts: Mapping[str, Iterable[str]]) -> dict[str, frozenset[str]]:
    lexicon: dict[str, set[str]] = {}
    for concept, words in concepts.items():
        for word in words:
            for stem in _words(word) or [_stem(word)]:
                lexicon.setdefault(stem, set()).add(concept)
        # the concept's own name evokes it too ("contact", "home", ...)
        lexicon.setdefault(_stem(concept), set()).add(concept)
    return {stem: frozenset(names) for stem, names in lexicon.items()}


_LEXICON = _build_lexicon(CONCEPTS)


def _bucket(feature: str, dimensions: int) -> tuple[int, float]:
    """The bucket and sign of a feature (stable across processes: BLAKE2b, not ``hash``)."""
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "big")
    return value % dimensions, 1.0 if (value >> 63) & 1 else -1.0


def _features(text: str) -> dict[str, float]:
    """Every feature of ``text`` with its weight (before hashing)."""
    features: dict[str, float] = {}

    def add(name: str, weight: float) -> None:
        features[name] = features.get(name, 0.0) + weight

    words = _words(text)
    for word in words:
        add("w:" + word, WORD_WEIGHT)
        padded = f"<{word}>"
        grams = [padded[i : i + 3] for i in range(len(padded) - 2)]
        for gram in grams:
            add("c:" + gram, TRIGRAM_WEIGHT / math.sqrt(len(grams)))
    for concept in sorted({c for word in words for c in _LEXICON.get(word, ())}):
        add("k:" + concept, CONCEPT_WEIGHT)
    if not features:
        add(_EMPTY_FEATURE, 1.0)
    return features


def concept_vector(text: str, dimensions: int = DEFAULT_DIMENSIONS) -> list[float]:
    """The unit-length vector :class:`ConceptEmbeddingModel` gives ``text``.

    Args:
        text: Any text; case, punctuation and stop words do not matter.
        dimensions: The vector's length (at least 8).

    Raises:
        ValueError: ``dimensions`` is below 8.
    """
    if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 8:
        raise ValueError(f"dimensions must be an integer of at least 8, got {dimensions!r}")
    vector = [0.0] * dimensions
    for feature, weight in _features(text).items():
        index, sign = _bucket(feature, dimensions)
        vector[index] += sign * weight
    norm = math.sqrt(sum(value * value for value in vector))
    if norm == 0.0:  # features cancelled out in their buckets: fall back to the reserved one
        index, sign = _bucket(_EMPTY_FEATURE, dimensions)
        vector[index], norm = sign, 1.0
    return [value / norm for value in vector]


@dataclass(init=False)
class ConceptEmbeddingModel(EmbeddingModel):
    """A deterministic pydantic-ai embedding model whose vectors mean something.

    See the module docstring for the features.  Queries and documents are
    embedded alike (``input_type`` is recorded in the result, nothing more).
    The ``dimensions`` embedding setting, when given, overrides the model's.

    Args:
        dimensions: The length of the vectors (default :data:`DEFAULT_DIMENSIONS`).
        model_name: The name the model reports (and vector rows record); the
            default, :data:`MODEL_NAME`, changes only when the features do.
        settings: Default pydantic-ai embedding settings of this model.

    Raises:
        ValueError: ``dimensions`` is below 8.
    """

    # Not a test class, for pytest's collection.
    __test__ = False

    _model_name: str
    _dimensions: int

    def __init__(
        self,
        *,
        dimensions: int = DEFAULT_DIMENSIONS,
        model_name: str = MODEL_NAME,
        settings: EmbeddingSettings | None = None,
    ) -> None:
        concept_vector("", dimensions)  # the one check of ``dimensions``
        self._model_name = model_name
        self._dimensions = dimensions
        super().__init__(settings=settings)

    @property
    def model_name(self) -> str:
        """The model's name (recorded beside every stored vector)."""
        return self._model_name

    @property
    def system(self) -> str:
        """The provider name: ``"firefly_orm"``."""
        return SYSTEM

    @property
    def dimensions(self) -> int:
        """The length of the vectors when the call's settings name none."""
        return self._dimensions

    async def embed(
        self,
        inputs: str | Sequence[str],
        *,
        input_type: EmbedInputType,
        settings: EmbeddingSettings | None = None,
    ) -> EmbeddingResult:
        """Embed ``inputs`` (one text or several), one unit vector per text, in order.

        Args:
            inputs: The texts.
            input_type: ``"query"`` or ``"document"`` (both are embedded alike).
            settings: Per-call settings; ``dimensions`` overrides the model's.
        """
        texts, merged = self.prepare_embed(inputs, settings)
        dimensions = merged.get("dimensions") or self._dimensions
        return EmbeddingResult(
            embeddings=[concept_vector(text, dimensions) for text in texts],
            inputs=texts,
            input_type=input_type,
            usage=RequestUsage(input_tokens=sum(len(_WORD.findall(text)) for text in texts)),
            model_name=self._model_name,
            provider_name=SYSTEM,
            provider_response_id=str(uuid.uuid4()),
        )

    async def max_input_tokens(self) -> int | None:
        """The most words read from one text (:data:`MAX_INPUT_WORDS`)."""
        return MAX_INPUT_WORDS

    async def count_tokens(self, text: str) -> int:
        """The number of words in ``text`` (this model's tokens)."""
        return len(_WORD.findall(text))
