"""Long-term memory: remember facts and events, recall them by what they say.

:class:`LongTermMemory` keeps items (text, importance, tags, kind, metadata,
an optional key and owner) as ``LONG_TERM`` entries of one namespace and finds
them with the store's full-text search (:mod:`firefly_orm._search`), ranked by
relevance, then importance, then recency.  ``long_term_limit`` evicts the
least important, oldest items of an owner; episodic items expire after
``episodic_retention_days``.  Every operation is one unit of work, sync or
async.

* :mod:`~firefly_orm.long_term._model`: :class:`MemoryItem`, :class:`Recalled`,
  the entry layout and the input checks;
* :mod:`~firefly_orm.long_term._ops`: the transactions (plain functions over a
  unit of work, so another layer can write items inside its own);
* :mod:`~firefly_orm.long_term._memory`: the :class:`LongTermMemory` class;
* :mod:`~firefly_orm.long_term._daily`: the daily logs of what was remembered
  (:class:`DailyLogLine`);
* :mod:`~firefly_orm.long_term._reembed`: :func:`reembed`, a namespace's vectors
  made again by another embedding model (batches, resumable);
* :mod:`~firefly_orm.long_term.promotion`: promoting evicted conversation turns;
* :mod:`~firefly_orm.long_term.tools`: ``remember`` / ``recall`` tools for a
  pydantic-ai agent (:func:`long_term_toolset`).
"""

from firefly_orm.long_term._daily import DailyLogLine
from firefly_orm.long_term._memory import DEFAULT_NAMESPACE, LongTermMemory
from firefly_orm.long_term._model import EPISODIC, KINDS, SEMANTIC, MemoryItem, Recalled
from firefly_orm.long_term._ops import store_items
from firefly_orm.long_term._reembed import ReembedProgress, ReembedReport, async_reembed, reembed
from firefly_orm.long_term._with_conversations import MemoryHit
from firefly_orm.long_term.promotion import Promotion, Scorer, default_scorer
from firefly_orm.long_term.tools import RecalledMemory, RecalledTurn, long_term_toolset

__all__ = [
    "DEFAULT_NAMESPACE",
    "EPISODIC",
    "KINDS",
    "SEMANTIC",
    "DailyLogLine",
    "LongTermMemory",
    "MemoryHit",
    "MemoryItem",
    "Promotion",
    "Recalled",
    "RecalledMemory",
    "RecalledTurn",
    "ReembedProgress",
    "ReembedReport",
    "Scorer",
    "async_reembed",
    "default_scorer",
    "long_term_toolset",
    "reembed",
    "store_items",
]
