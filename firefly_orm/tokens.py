"""Token counting for conversation budgets: :class:`TokenEstimator`.

By default the estimate is a word-count heuristic,
``max(1, int(len(text.split()) * tokens_per_word))`` (whitespace split, truncation
toward zero, at least 1 even for empty text).  Give an ``encoding_name`` (e.g.
``"cl100k_base"``) and install the ``tiktoken`` extra to count exact tokens
instead; when tiktoken is missing, or the encoding cannot be loaded (tiktoken
downloads encodings on first use), the estimator logs why once and falls back
to the heuristic.
"""

from __future__ import annotations

import logging
import math
import threading
from typing import Any

__all__ = ["DEFAULT_TOKENS_PER_WORD", "TokenEstimator"]

logger = logging.getLogger("firefly_orm")

#: Tokens counted per word by the default heuristic (the one home of this figure).
DEFAULT_TOKENS_PER_WORD = 1.33

_UNLOADED = object()


class TokenEstimator:
    """Estimate how many LLM tokens a text takes.

    Args:
        tokens_per_word: Multiplier of the word-count heuristic (> 0).
        encoding_name: A tiktoken encoding name; when given and tiktoken can load
            it, :meth:`estimate` returns the exact token count.

    Example:
        >>> TokenEstimator().estimate("one two three four five six seven")
        9
    """

    def __init__(
        self, *, tokens_per_word: float = DEFAULT_TOKENS_PER_WORD, encoding_name: str | None = None
    ) -> None:
        if (
            isinstance(tokens_per_word, bool)
            or not isinstance(tokens_per_word, int | float)
            or not math.isfinite(tokens_per_word)
            or tokens_per_word <= 0
        ):
            raise ValueError(f"tokens_per_word must be a positive number, got {tokens_per_word!r}")
        if encoding_name is not None and (not isinstance(encoding_name, str) or not encoding_name):
            raise ValueError("encoding_name must be a non-empty string or None")
        self._tokens_per_word = float(tokens_per_word)
        self._encoding_name = encoding_name
        self._encoding: Any = _UNLOADED
        self._lock = threading.Lock()

    @property
    def tokens_per_word(self) -> float:
        """The multiplier of the word-count heuristic."""
        return self._tokens_per_word

    @property
    def encoding_name(self) -> str | None:
        """The tiktoken encoding asked for, if any."""
        return self._encoding_name

    @property
    def uses_tiktoken(self) -> bool:
        """True when estimates are exact tiktoken counts (loads the encoding)."""
        return self._get_encoding() is not None

    def estimate(self, text: str) -> int:
        """Return the (estimated) number of tokens in ``text``.

        Raises:
            TypeError: ``text`` is not a string.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        encoding = self._get_encoding()
        if encoding is not None:
            return len(encoding.encode(text, disallowed_special=()))
        return max(1, int(len(text.split()) * self._tokens_per_word))

    def fits(self, text: str, max_tokens: int) -> bool:
        """True when ``estimate(text) <= max_tokens``."""
        return self.estimate(text) <= max_tokens

    def _get_encoding(self) -> Any:
        if self._encoding_name is None:
            return None
        if self._encoding is _UNLOADED:
            with self._lock:
                if self._encoding is _UNLOADED:
                    self._encoding = self._load_encoding(self._encoding_name)
        return self._encoding

    @staticmethod
    def _load_encoding(name: str) -> Any:
        try:
            import tiktoken
        except ImportError:
            logger.debug(
                "tiktoken is not installed; TokenEstimator(encoding_name=%r) uses the "
                "word-count heuristic",
                name,
            )
            return None
        try:
            return tiktoken.get_encoding(name)
        except Exception as exc:  # unknown name, no network to fetch the encoding, ...
            logger.warning(
                "tiktoken could not load encoding %r (%s: %s); using the word-count heuristic",
                name,
                type(exc).__name__,
                exc,
            )
            return None

    def __repr__(self) -> str:
        return (
            f"TokenEstimator(tokens_per_word={self._tokens_per_word!r}, "
            f"encoding_name={self._encoding_name!r})"
        )
