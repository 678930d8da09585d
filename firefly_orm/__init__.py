"""firefly_orm: persistent, shared memory for LLM agents on an ORM.

Conversation history trimmed to a token budget (with summaries of what was
dropped), working memory (scoped key-value facts) and long-term entries, behind
one :class:`MemoryManager`, stored in memory, JSON files, SQLite, PostgreSQL
(SQLAlchemy + Alembic), MongoDB (Beanie) or Redis.

Public names are imported lazily, so optional backends (MongoDB, pydantic-ai)
cost nothing until used and a missing extra fails with an error naming it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "MemoryManager": "firefly_orm.manager",
    "Artifacts": "firefly_orm.artifacts",
    "ArtifactWorkspace": "firefly_orm.artifacts",
    "ConversationMemory": "firefly_orm.conversation",
    "ConversationTurn": "firefly_orm.conversation",
    "WorkingMemory": "firefly_orm.working",
    "LongTermMemory": "firefly_orm.long_term",
    "MemoryItem": "firefly_orm.long_term",
    "Recalled": "firefly_orm.long_term",
    "NotFoundError": "firefly_orm.errors",
    "ConversationNotFoundError": "firefly_orm.errors",
    "MemoryEntry": "firefly_orm.entry",
    "MemoryScope": "firefly_orm.entry",
    "MemoryStore": "firefly_orm.store",
    "AsyncMemoryStore": "firefly_orm.store",
    "InMemoryStore": "firefly_orm.store",
    "FileStore": "firefly_orm.file_store",
    "SQLAlchemyStore": "firefly_orm.sql",
    "SQLiteStore": "firefly_orm.sql",
    "PostgreSQLStore": "firefly_orm.sql",
    "MongoDBStore": "firefly_orm.mongo",
    "MemoryDocument": "firefly_orm.mongo",
    "RedisStore": "firefly_orm.redis",
    "TokenEstimator": "firefly_orm.tokens",
    "create_llm_summarizer": "firefly_orm.summarization",
    "FireflyOrmError": "firefly_orm.errors",
    "EntryValidationError": "firefly_orm.errors",
    "StoreError": "firefly_orm.errors",
    "DatabaseConnectionError": "firefly_orm.errors",
    "StoreCorruptedError": "firefly_orm.errors",
    "ConcurrencyError": "firefly_orm.errors",
    "MigrationRequiredError": "firefly_orm.errors",
    "MissingExtraError": "firefly_orm.errors",
    "MissingEngineError": "firefly_orm.errors",
}

__all__ = [
    "ArtifactWorkspace",
    "Artifacts",
    "AsyncMemoryStore",
    "ConcurrencyError",
    "ConversationNotFoundError",
    "ConversationMemory",
    "ConversationTurn",
    "DatabaseConnectionError",
    "EntryValidationError",
    "FileStore",
    "FireflyOrmError",
    "InMemoryStore",
    "LongTermMemory",
    "MemoryDocument",
    "MemoryEntry",
    "MemoryItem",
    "MemoryManager",
    "MemoryScope",
    "MemoryStore",
    "MigrationRequiredError",
    "MissingEngineError",
    "MissingExtraError",
    "MongoDBStore",
    "NotFoundError",
    "PostgreSQLStore",
    "Recalled",
    "RedisStore",
    "SQLAlchemyStore",
    "SQLiteStore",
    "StoreCorruptedError",
    "StoreError",
    "TokenEstimator",
    "WorkingMemory",
    "__version__",
    "create_llm_summarizer",
]
assert set(__all__) == {*_EXPORTS, "__version__"}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'firefly_orm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from firefly_orm.artifacts import Artifacts, ArtifactWorkspace
    from firefly_orm.conversation import ConversationMemory, ConversationTurn
    from firefly_orm.entry import MemoryEntry, MemoryScope
    from firefly_orm.errors import (
        ConcurrencyError,
        ConversationNotFoundError,
        DatabaseConnectionError,
        EntryValidationError,
        FireflyOrmError,
        MigrationRequiredError,
        MissingEngineError,
        MissingExtraError,
        NotFoundError,
        StoreCorruptedError,
        StoreError,
    )
    from firefly_orm.file_store import FileStore
    from firefly_orm.long_term import LongTermMemory, MemoryItem, Recalled
    from firefly_orm.manager import MemoryManager
    from firefly_orm.mongo import MemoryDocument, MongoDBStore
    from firefly_orm.redis import RedisStore
    from firefly_orm.sql import PostgreSQLStore, SQLAlchemyStore, SQLiteStore
    from firefly_orm.store import AsyncMemoryStore, InMemoryStore, MemoryStore
    from firefly_orm.summarization import create_llm_summarizer
    from firefly_orm.tokens import TokenEstimator
    from firefly_orm.working import WorkingMemory
