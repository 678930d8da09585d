"""The synthetic turn that carries a conversation's previous summary.

When turns are evicted, a conversation hands its summarizer the previous
summary as a first, synthetic turn marked by these values.  They live in this
leaf module (no imports) so that :mod:`firefly_orm.summarization` can
recognise that turn without loading the conversation package (pydantic,
SQLModel, SQLAlchemy); :mod:`firefly_orm.conversation` re-exports them.
"""

from __future__ import annotations

__all__ = ["SUMMARY_TURN_ID", "SUMMARY_TURN_PROMPT"]

#: ``turn_id`` of the synthetic turn that carries the previous summary.
SUMMARY_TURN_ID = -1
#: ``user_prompt`` of the synthetic turn that carries the previous summary.
SUMMARY_TURN_PROMPT = "Summary of the earlier conversation"
