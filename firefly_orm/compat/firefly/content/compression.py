"""Upstream's ``content.compression.TokenEstimator``: firefly_orm's, with the same
constructor (``tokens_per_word=1.33``, ``encoding_name=None``), ``estimate`` and ``fits``."""

from __future__ import annotations

from firefly_orm.tokens import TokenEstimator

__all__ = ["TokenEstimator"]
