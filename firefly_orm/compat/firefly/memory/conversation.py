"""Upstream's ``memory.conversation``: firefly_orm's ``ConversationMemory``.

Same keyword-only constructor (``max_tokens``, ``summarize_threshold``,
``estimator``, ``summarizer``) plus ``store=`` and the conversation policies.
Turns and summaries live in the store, so a new process resumes them; turn ids
stay unique after evictions; a new summary covers the previous one.
"""

from __future__ import annotations

from firefly_orm.conversation import ConversationMemory, ConversationTurn

__all__ = ["ConversationMemory", "ConversationTurn"]
