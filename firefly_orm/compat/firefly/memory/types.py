"""Upstream's ``memory.types``: ``MemoryEntry``, ``MemoryScope``, ``ConversationTurn``.

firefly_orm's classes: ``MemoryEntry`` also has ``namespace``, ``version``,
``user_id`` and search fields (defaults keep upstream's constructor calls
working) and is validated before any store writes it (importance in 0.0-1.0,
timezone-aware datetimes, JSON content).
"""

from __future__ import annotations

from firefly_orm.conversation import ConversationTurn
from firefly_orm.entry import MemoryEntry, MemoryScope

__all__ = ["ConversationTurn", "MemoryEntry", "MemoryScope"]
