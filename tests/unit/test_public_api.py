"""The public import paths keep every name they exported before the renovation (issue 9).

``BASELINE_ALL`` is each public module's ``__all__`` as of commit 07dc8ba (before
the wings); ``BASELINE_PUBLIC`` adds the public names those modules defined
outside ``__all__`` that callers may have imported.  Moving code into packages
must keep all of them importable from the old paths; new modules are checked
for an ``__all__`` whose every name resolves.
"""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from types import ModuleType

import pytest

import firefly_orm

BASELINE_ALL: dict[str, tuple[str, ...]] = {
    "firefly_orm": (
        "AsyncMemoryStore",
        "ConcurrencyError",
        "ConversationMemory",
        "ConversationTurn",
        "DatabaseConnectionError",
        "EntryValidationError",
        "FileStore",
        "FireflyOrmError",
        "InMemoryStore",
        "MemoryDocument",
        "MemoryEntry",
        "MemoryManager",
        "MemoryScope",
        "MemoryStore",
        "MigrationRequiredError",
        "MissingExtraError",
        "MongoDBStore",
        "PostgreSQLStore",
        "SQLAlchemyStore",
        "SQLiteStore",
        "StoreCorruptedError",
        "StoreError",
        "TokenEstimator",
        "WorkingMemory",
        "__version__",
        "create_llm_summarizer",
    ),
    "firefly_orm.cli": (
        "EXIT_ERROR",
        "EXIT_NOT_AT_HEAD",
        "EXIT_OK",
        "EXIT_USAGE",
        "Progress",
        "main",
    ),
    "firefly_orm.config": (
        "BACKENDS",
        "ENV_PREFIX",
        "Backend",
        "ConfigurationError",
        "MemorySettings",
        "async_build_store",
        "build_store",
        "load_settings",
    ),
    "firefly_orm.conversation": (
        "AppendPlan",
        "AsyncSummarizer",
        "ConversationMemory",
        "ConversationTurn",
        "HeadState",
        "Summarizer",
        "SUMMARY_TURN_ID",
        "SUMMARY_TURN_PROMPT",
        "history_suffix",
        "plan_append",
        "summary_input",
    ),
    "firefly_orm.demo": ("SCRIPT", "TURNS_PER_RUN", "main", "summarize"),
    "firefly_orm.entry": (
        "TABLE_NAME",
        "MemoryEntry",
        "MemoryScope",
        "metadata",
        "derived_entry_id",
        "new_entry_id",
        "utcnow",
        "validate_entry",
        "validate_key",
        "validate_namespace",
    ),
    "firefly_orm.errors": (
        "ConcurrencyError",
        "DatabaseConnectionError",
        "EntryValidationError",
        "FireflyOrmError",
        "MigrationRequiredError",
        "MissingExtraError",
        "StoreError",
        "StoreCorruptedError",
        "redact_url",
    ),
    "firefly_orm.file_store": ("FileStore", "namespace_file_name"),
    "firefly_orm.manager": ("MemoryManager",),
    "firefly_orm.migrate": (
        "DEFAULT_SCHEMA",
        "HOST_SCHEMA_OPTION",
        "HOST_VERSION_TABLE",
        "VERSION_TABLE",
        "check",
        "current",
        "downgrade",
        "head",
        "include_name",
        "include_object",
        "make_config",
        "normalize_url",
        "require_head",
        "revision_schema",
        "run_environment",
        "script_location",
        "stamp",
        "upgrade",
        "validate_schema_name",
        "versions_location",
    ),
    "firefly_orm.mongo": (
        "MemoryDocument",
        "MemoryDocumentFields",
        "MongoDBStore",
        "document_to_entry",
        "entry_to_document",
        "memory_indexes",
        "validate_collection_name",
        "validate_database_name",
    ),
    "firefly_orm.sql": (
        "PostgreSQLStore",
        "SQLAlchemyStore",
        "SQLiteStore",
        "SessionBoundStore",
        "enable_sqlite_savepoints",
    ),
    "firefly_orm.store": ("AsyncMemoryStore", "InMemoryStore", "MemoryStore"),
    "firefly_orm.summarization": (
        "DEFAULT_PROMPT_TEMPLATE",
        "FALLBACK_SUMMARY",
        "SUMMARY_MODEL_ENV",
        "LLMSummarizer",
        "create_llm_summarizer",
        "fallback_summary",
        "format_turns",
        "truncate_to_tokens",
    ),
    "firefly_orm.testing": (
        "MODES",
        "NAMESPACE_PREFIX",
        "StoreContract",
        "StoreDriver",
        "UnitOfWorkDriver",
    ),
    "firefly_orm.tokens": ("TokenEstimator",),
    "firefly_orm.uow": (
        "AsyncUnitOfWork",
        "BestEffortUnitOfWork",
        "EntryRepository",
        "StagedBackend",
        "StagedChanges",
        "StagedUnitOfWork",
        "SyncBackedAsyncUnitOfWork",
        "UnitOfWork",
        "apply_version",
        "async_unit_of_work_for",
        "check_preconditions",
        "sort_entries",
        "unit_of_work_for",
    ),
    "firefly_orm.working": ("WorkingMemory", "format_context"),
}

#: Public names (no underscore) defined outside ``__all__`` at 07dc8ba.
BASELINE_PUBLIC: dict[str, tuple[str, ...]] = {
    "firefly_orm.cli": (
        "CONVERSATION_PREFIX",
        "ENV_POSTGRES_SCHEMA",
        "ENV_POSTGRES_URL",
        "ENV_SQLITE_PATH",
        "EXPORT_FORMAT_VERSION",
        "CliError",
        "Target",
        "build_parser",
        "collect_stats",
    ),
    "firefly_orm.config": ("env_var",),
    "firefly_orm.conversation": (
        "HEAD_KEY",
        "INDEX_NAMESPACE",
        "MAX_TURN_ID",
        "TURN_KEY_PREFIX",
        "archive_namespace",
        "conversation_namespace",
        "decode_raw_messages",
        "encode_raw_messages",
        "turn_key",
    ),
    "firefly_orm.demo": ("CONVERSATION_ID", "MAX_TOKENS", "run"),
    "firefly_orm.entry": (
        "JSONValue",
        "NUL_WRAPPER_KEY",
        "UTCDateTime",
        "decode_json_from_jsonb",
        "encode_json_for_jsonb",
    ),
    "firefly_orm.mongo": ("JSON_WRAPPER_KEY",),
    "firefly_orm.sql": ("AsyncSQLUnitOfWork", "SQLEntryRepository", "SQLUnitOfWork"),
    "firefly_orm.summarization": (
        "PREVIOUS_SUMMARY_TURN_ID",
        "TurnLike",
        "max_words_for",
        "validate_template",
    ),
}

#: Public modules the renovation adds (checked like every other module below).
NEW_MODULES = (
    "firefly_orm.protocols",
    "firefly_orm.envnames",
    "firefly_orm.bridges",
    "firefly_orm.bridges._loop_thread",
    "firefly_orm.bridges.twins",
    "firefly_orm.bridges._steps",
)


def _all_modules() -> list[str]:
    """Every module of the package, subpackages included (private ones too)."""
    found = ["firefly_orm"]
    for info in pkgutil.walk_packages(firefly_orm.__path__, "firefly_orm."):
        found.append(info.name)
    return sorted(found)


def _import(name: str) -> ModuleType:
    return importlib.import_module(name)


@pytest.mark.parametrize("module_name", sorted(BASELINE_ALL))
def test_every_name_exported_before_is_still_in_all_and_resolves(module_name: str) -> None:
    module = _import(module_name)
    exported = set(getattr(module, "__all__", ()))
    missing_from_all = [n for n in BASELINE_ALL[module_name] if n not in exported]
    assert missing_from_all == [], f"{module_name}.__all__ lost {missing_from_all}"
    unresolved = [n for n in BASELINE_ALL[module_name] if not hasattr(module, n)]
    assert unresolved == [], f"{module_name} no longer provides {unresolved}"


@pytest.mark.parametrize("module_name", sorted(BASELINE_PUBLIC))
def test_public_names_outside_all_still_import(module_name: str) -> None:
    module = _import(module_name)
    unresolved = [n for n in BASELINE_PUBLIC[module_name] if not hasattr(module, n)]
    assert unresolved == [], f"{module_name} no longer provides {unresolved}"


def test_the_new_public_modules_exist() -> None:
    modules = set(_all_modules())
    absent = [name for name in NEW_MODULES if name not in modules]
    assert absent == []


@pytest.mark.parametrize("module_name", _all_modules())
def test_every_module_imports_and_its_all_resolves(module_name: str) -> None:
    module = _import(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        # Only a module with nothing public (a docstring-only package, __main__) may omit it.
        public = [
            key
            for key, value in vars(module).items()
            if not key.startswith("_")
            and key != "annotations"
            and not isinstance(value, ModuleType)
        ]
        assert public == [], f"{module_name} has public names {public} but no __all__"
        return
    assert len(names) == len(set(names)), f"{module_name}.__all__ repeats a name"
    unresolved = [n for n in names if not hasattr(module, n)]
    assert unresolved == [], f"{module_name}.__all__ names missing attributes: {unresolved}"


def test_lazy_top_level_exports_are_the_objects_of_their_home_modules() -> None:
    for name in firefly_orm.__all__:
        if name == "__version__":
            continue
        value = getattr(firefly_orm, name)
        assert value.__name__ == name
        # The object its defining module holds: no copy, no stale alias.
        assert getattr(_import(value.__module__), name) is value, name
    assert dir(firefly_orm) == sorted(firefly_orm.__all__)


def test_importing_the_package_loads_no_backend() -> None:
    code = (
        "import sys, firefly_orm; "
        "print(sorted(m for m in sys.modules if m.startswith(('firefly_orm.', 'sqlalchemy', "
        "'beanie', 'pymongo', 'pydantic_ai'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_unknown_top_level_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = firefly_orm.no_such_name
