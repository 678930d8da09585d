"""Upstream's ``memory`` package: the names of its ``__all__``, on firefly_orm.

``from firefly_orm.compat.firefly.memory import MemoryManager, WorkingMemory, ...``
replaces ``from fireflyframework_agentic.memory import ...``.  See
:mod:`firefly_orm.compat.firefly` for the module map and what behaves better.
"""

from __future__ import annotations

from firefly_orm.compat.firefly.memory.conversation import ConversationMemory
from firefly_orm.compat.firefly.memory.manager import MemoryManager
from firefly_orm.compat.firefly.memory.store import (
    FileStore,
    InMemoryStore,
    MemoryStore,
    SQLiteStore,
)
from firefly_orm.compat.firefly.memory.summarization import create_llm_summarizer
from firefly_orm.compat.firefly.memory.types import ConversationTurn, MemoryEntry, MemoryScope
from firefly_orm.compat.firefly.memory.working import WorkingMemory

__all__ = [
    "ConversationMemory",
    "ConversationTurn",
    "FileStore",
    "InMemoryStore",
    "MemoryEntry",
    "MemoryManager",
    "MemoryScope",
    "MemoryStore",
    "SQLiteStore",
    "WorkingMemory",
    "create_llm_summarizer",
]
