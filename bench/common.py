"""Shared pieces: sizes, synthetic data, statistics, result rows, Postgres discovery."""

from __future__ import annotations

import os
import random
import string
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from firefly_orm.envnames import ENV_POSTGRES_URL
from firefly_orm.tokens import DEFAULT_TOKENS_PER_WORD

#: Token estimate of the library's default TokenEstimator (words * this, at least 1).
TOKENS_PER_WORD = DEFAULT_TOKENS_PER_WORD
#: "No budget": a max_tokens so large that nothing is ever evicted or trimmed.
UNLIMITED = 10**12
#: Words per message: about 300 characters with the word lengths used below.
WORDS_PER_MESSAGE = 46
#: Turns kept by the W2 "budget" read (2 messages per turn -> 20 messages).
BUDGET_TURNS = 10
#: Turns kept by the W5 writer budget (eviction is active from turn 5 on).
W5_KEPT_TURNS = 5

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
#: Where the Postgres URL is looked up: the test suite's variable, then the library's.
PG_URL_VARS = ("FIREFLY_ORM_TEST_POSTGRES_URL", ENV_POSTGRES_URL)


@dataclass(frozen=True)
class Sizes:
    """How much work each workload does (quick and full presets below)."""

    rounds: int  # W1-W3 (bench.cells): rounds of the comparison, each with:
    conversations: int  # W1: conversations ...
    turns: int  # ... times turns each, added one turn at a time
    reads: int  # W2: reads of each kind (everything, last 20)
    scopes: int  # W3: scopes ...
    keys: int  # ... times keys each are set, then `wm_ops` random operations
    wm_ops: int
    scale_levels: tuple[int, ...]  # W4: total turns in the database at each measurement
    scale_conv_turns: int  # W4: turns per filler conversation
    scale_reads: int  # W4: budget reads per level
    long_turn: int  # W5: the "late" turn measured against turn 10
    settle_turns: int  # W5: untimed turns on another conversation first
    recall_levels: tuple[int, ...]  # W6: long-term entries in the store at each measurement
    recall_reads: int  # W6: timed recalls per level (selective words)
    recall_common_reads: int  # W6b: timed recalls per level (with common words; SQL only)
    artifact_files: int  # W7: files per workspace, written round-robin
    artifact_steps: int  # W7: timed steps of (CAS write, CAS write +versions, read)
    async_artifact_steps: int


QUICK = Sizes(
    rounds=3,
    conversations=3,
    turns=12,
    reads=20,
    scopes=3,
    keys=8,
    wm_ops=50,
    scale_levels=(1_000, 10_000),
    scale_conv_turns=50,
    scale_reads=60,
    long_turn=200,
    settle_turns=30,
    recall_levels=(1_000, 10_000),
    recall_reads=60,
    recall_common_reads=20,
    artifact_files=10,
    artifact_steps=80,
    async_artifact_steps=60,
)

FULL = Sizes(
    rounds=5,
    conversations=10,
    turns=50,
    reads=100,
    scopes=10,
    keys=10,
    wm_ops=300,
    scale_levels=(1_000, 10_000, 100_000),
    scale_conv_turns=50,
    scale_reads=200,
    long_turn=1_000,
    settle_turns=200,
    recall_levels=(1_000, 10_000, 100_000),
    recall_reads=200,
    recall_common_reads=40,
    artifact_files=20,
    artifact_steps=400,
    async_artifact_steps=200,
)


# --------------------------------------------------------------------------- data


def estimate_tokens(user_prompt: str, assistant_response: str) -> int:
    """What the library's default estimator says for one turn."""
    return max(1, int(len(f"{user_prompt}\n{assistant_response}".split()) * TOKENS_PER_WORD))


class TextPool:
    """Deterministic ~300-character messages (fixed word count, random words)."""

    def __init__(self, seed: int, size: int = 64) -> None:
        rng = random.Random(seed)
        self.texts = [
            " ".join(
                "".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 8)))
                for _ in range(WORDS_PER_MESSAGE)
            )
            for _ in range(size)
        ]
        self._next = 0

    def turn(self) -> tuple[str, str, list[dict[str, str]]]:
        """(user prompt, assistant response, raw messages as JSON dicts)."""
        user = self.texts[self._next % len(self.texts)]
        assistant = self.texts[(self._next + 1) % len(self.texts)]
        self._next += 2
        messages = [
            {"role": "user", "content": user},
            {"role": "assistant", "content": assistant},
        ]
        return user, assistant, messages

    @property
    def turn_tokens(self) -> int:
        """Token estimate of every turn (all messages have the same word count)."""
        return estimate_tokens(self.texts[0], self.texts[1])


def budget_for_turns(turn_tokens: int, turns: int) -> int:
    """A max_tokens that keeps exactly ``turns`` turns of ``turn_tokens`` each."""
    return turns * turn_tokens + turn_tokens // 2


# --------------------------------------------------------------------------- timing


def timed(fn: Callable[[], Any]) -> float:
    """Seconds one call of ``fn`` takes."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0-100) of a non-empty sample."""
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[rank]


def median(samples: Sequence[float]) -> float:
    """The 50th percentile."""
    return percentile(samples, 50)


# --------------------------------------------------------------------------- results


@dataclass
class Row:
    """One line of the results table.

    ``kind == "cost"``: ``ratio`` is our cost as a multiple of the raw driver's
    (time per operation, lower is better).  ``kind == "growth"``: ``ours`` and
    ``baseline`` are growth factors and ``ratio`` is ours.  ``kind == "info"``:
    no target.  ``kind == "quality"``: ``ratio`` is ours (a share, higher is
    better, met when at least ``target``).
    """

    workload: str
    backend: str
    unit: str
    ours: float
    baseline: float
    ratio: float
    target: float | None
    kind: str = "cost"
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def met(self) -> bool | None:
        """Whether the target is met (``None`` without a target)."""
        if self.target is None:
            return None
        if self.kind == "quality":  # a share found (W8's recall@10): higher is better
            return self.ratio >= self.target
        return self.ratio <= self.target

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["met"] = self.met
        return data


class Skip(Exception):
    """A backend cannot be benchmarked here (the message says why)."""


def postgres_url() -> tuple[str, str]:
    """The Postgres URL to use and where it came from."""
    for name in PG_URL_VARS:
        value = os.environ.get(name, "").strip()
        if value:
            return value, f"${name}"
    return DEFAULT_PG_URL, "default"
