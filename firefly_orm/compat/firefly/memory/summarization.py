"""Upstream's ``memory.summarization``: firefly_orm's ``create_llm_summarizer``."""

from __future__ import annotations

from firefly_orm.summarization import create_llm_summarizer

__all__ = ["create_llm_summarizer"]
