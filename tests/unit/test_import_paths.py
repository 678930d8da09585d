"""Every public import path still imports, and a re-export is the object itself.

The package's families moved into folders (``entry/``, ``file_store/``,
``migrate/``, ``interop/``, ``cli/``) with their internals in ``_name.py``
modules.  What a caller imports must not change:

* every name of ``firefly_orm.__all__`` and of the ``__all__`` of every public
  module (``docs/index.md``'s table) imports, and is the very object its
  defining module holds (a re-export, never a copy);
* the paths tests and docs imported from before the move still give the object
  now defined in the internal module;
* the ``firefly-orm`` script still points at ``firefly_orm.cli:main``.
"""

from __future__ import annotations

import importlib
import re
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import firefly_orm

ROOT = Path(__file__).resolve().parents[2]


def _public_modules() -> list[str]:
    """The modules of ``docs/index.md``'s table of public modules."""
    table = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    found = re.findall(r"^\| `(firefly_orm[\w.]*)` \|", table, flags=re.M)
    assert found, "docs/index.md lists no public module"
    return sorted(set(found))


def _defined_at(obj: Any) -> Any:
    """The object found under ``obj``'s own ``__module__`` and ``__qualname__``.

    ``None`` when ``obj`` does not name its definition in firefly_orm (a
    constant, a type alias, a foreign object).
    """
    module_name = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module_name, str) or not isinstance(qualname, str):
        return None
    if module_name != "firefly_orm" and not module_name.startswith("firefly_orm."):
        return None
    if "<locals>" in qualname:
        return None
    found: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def _check_reexports(module: ModuleType) -> list[str]:
    """The names of ``module.__all__`` that are missing or not the defining object."""
    problems: list[str] = []
    for name in getattr(module, "__all__", ()):
        if not hasattr(module, name):
            problems.append(f"{module.__name__}.{name}: missing")
            continue
        obj = getattr(module, name)
        if isinstance(obj, ModuleType):
            continue
        defined = _defined_at(obj)
        if defined is not None and defined is not obj:
            problems.append(f"{module.__name__}.{name}: not the object of {obj.__module__}")
    return problems


def test_every_top_level_name_is_its_home_modules_object() -> None:
    problems = []
    for name in firefly_orm.__all__:
        if name == "__version__":
            continue
        obj = getattr(firefly_orm, name)
        home = importlib.import_module(obj.__module__)
        if getattr(home, name, None) is not obj:
            problems.append(name)
        if _defined_at(obj) is not obj:
            problems.append(f"{name} (defining module)")
    assert problems == []


@pytest.mark.parametrize("module_name", _public_modules())
def test_every_public_modules_names_are_the_defining_objects(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert getattr(module, "__all__", None) is not None or module_name == "firefly_orm"
    assert _check_reexports(module) == []


#: ``(old import path, name, module now defining it)``: the paths tests, docs and
#: callers imported from before the families moved into folders.
OLD_PATHS: tuple[tuple[str, str, str], ...] = (
    # entry.py, entry_rules.py, entry_ids.py, entry_fields.py, jsonvalues.py -> entry/
    ("firefly_orm.entry", "MemoryEntry", "firefly_orm.entry._model"),
    ("firefly_orm.entry", "TABLE_NAME", "firefly_orm.entry._model"),
    ("firefly_orm.entry", "metadata", "firefly_orm.entry._model"),
    ("firefly_orm.entry", "validate_entry", "firefly_orm.entry._model"),
    ("firefly_orm.entry", "JSONValue", "firefly_orm.entry._model"),
    ("firefly_orm.entry", "UTCDateTime", "firefly_orm.entry._model"),
    ("firefly_orm.entry", "MemoryScope", "firefly_orm.entry._rules"),
    ("firefly_orm.entry", "EntryFieldsError", "firefly_orm.entry._rules"),
    ("firefly_orm.entry", "MAX_ENTRY_VERSION", "firefly_orm.entry._rules"),
    ("firefly_orm.entry", "MAX_USER_ID_LENGTH", "firefly_orm.entry._rules"),
    ("firefly_orm.entry", "validate_namespace", "firefly_orm.entry._rules"),
    ("firefly_orm.entry", "utcnow", "firefly_orm.entry._ids"),
    ("firefly_orm.entry", "new_entry_id", "firefly_orm.entry._ids"),
    ("firefly_orm.entry", "derived_entry_id", "firefly_orm.entry._ids"),
    ("firefly_orm.entry", "MAX_JSON_DEPTH", "firefly_orm.entry._json"),
    ("firefly_orm.entry", "NUL_WRAPPER_KEY", "firefly_orm.entry._json"),
    ("firefly_orm.entry", "decode_json_from_jsonb", "firefly_orm.entry._json"),
    ("firefly_orm.entry", "encode_json_for_jsonb", "firefly_orm.entry._json"),
    ("firefly_orm", "MemoryEntry", "firefly_orm.entry._model"),
    ("firefly_orm", "MemoryScope", "firefly_orm.entry._rules"),
    # summary_turn.py -> summarization.py (the id: layout.py)
    ("firefly_orm.conversation", "SUMMARY_TURN_ID", "firefly_orm._layout"),
    ("firefly_orm.conversation", "SUMMARY_TURN_PROMPT", "firefly_orm.summarization"),
    ("firefly_orm.summarization", "PREVIOUS_SUMMARY_TURN_ID", "firefly_orm.summarization"),
    # file_store.py, file_log.py, file_index.py, file_journal.py, file_commit.py -> file_store/
    ("firefly_orm.file_store", "FileStore", "firefly_orm.file_store"),
    ("firefly_orm.file_store", "namespace_file_name", "firefly_orm.file_store._files"),
    ("firefly_orm", "FileStore", "firefly_orm.file_store"),
    # migrate.py, migration_*.py, alembic_env.py -> migrate/
    ("firefly_orm.migrate", "VERSION_TABLE", "firefly_orm.migrate._config"),
    ("firefly_orm.migrate", "DEFAULT_SCHEMA", "firefly_orm.migrate._config"),
    ("firefly_orm.migrate", "make_config", "firefly_orm.migrate._config"),
    ("firefly_orm.migrate", "normalize_url", "firefly_orm.migrate._config"),
    ("firefly_orm.migrate", "revision_schema", "firefly_orm.migrate._config"),
    ("firefly_orm.migrate", "script_location", "firefly_orm.migrate._config"),
    ("firefly_orm.migrate", "versions_location", "firefly_orm.migrate._config"),
    ("firefly_orm.migrate", "head", "firefly_orm.migrate._config"),
    ("firefly_orm.migrate", "upgrade", "firefly_orm.migrate._commands"),
    # downgrade drops the vector tables first (issue 29): defined beside them.
    ("firefly_orm.migrate", "downgrade", "firefly_orm.migrate._vectors"),
    ("firefly_orm.migrate", "current", "firefly_orm.migrate._commands"),
    ("firefly_orm.migrate", "require_head", "firefly_orm.migrate._commands"),
    ("firefly_orm.migrate", "Target", "firefly_orm.migrate._commands"),
    ("firefly_orm.migrate", "include_name", "firefly_orm.migrate._filters"),
    ("firefly_orm.migrate", "autogenerate_filters", "firefly_orm.migrate._filters"),
    ("firefly_orm.migrate", "run_environment", "firefly_orm.migrate._env"),
    ("firefly_orm.migrate", "run_with_host", "firefly_orm.migrate._env"),
    ("firefly_orm.migrate", "HOST_OFFLINE_FROM_OPTION", "firefly_orm.migrate._env"),
    # upstream_import.py (the guide's import path) -> interop/
    ("firefly_orm.upstream_import", "import_upstream", "firefly_orm._interop._upstream_run"),
    ("firefly_orm.upstream_import", "async_import_upstream", "firefly_orm._interop._upstream_run"),
    ("firefly_orm.upstream_import", "ProgressCallback", "firefly_orm._interop._upstream_run"),
    ("firefly_orm.upstream_import", "upstream_source", "firefly_orm._interop._upstream_sources"),
    ("firefly_orm.upstream_import", "UpstreamFileSource", "firefly_orm._interop._upstream_sources"),
    (
        "firefly_orm.upstream_import",
        "UpstreamMongoSource",
        "firefly_orm._interop._upstream_sources",
    ),
    (
        "firefly_orm.upstream_import",
        "UpstreamSQLiteSource",
        "firefly_orm._interop._upstream_sources",
    ),
    (
        "firefly_orm.upstream_import",
        "DEFAULT_SQLITE_TABLE",
        "firefly_orm._interop._upstream_sources",
    ),
    ("firefly_orm.upstream_import", "ImportSummary", "firefly_orm._interop._upstream_plan"),
    ("firefly_orm.upstream_import", "ImportProgress", "firefly_orm._interop._upstream_plan"),
    ("firefly_orm.upstream_import", "UpstreamSource", "firefly_orm._interop._upstream_plan"),
    ("firefly_orm.upstream_import", "UpstreamSourceError", "firefly_orm._interop._upstream_plan"),
    ("firefly_orm.upstream_import", "entry_from_upstream", "firefly_orm._interop._upstream_plan"),
    ("firefly_orm.upstream_import", "plan_namespace", "firefly_orm._interop._upstream_plan"),
    # cli.py -> cli/
    ("firefly_orm.cli", "main", "firefly_orm.cli"),
    ("firefly_orm.cli", "build_parser", "firefly_orm.cli"),
    ("firefly_orm.cli", "EXIT_OK", "firefly_orm.cli._target"),
    ("firefly_orm.cli", "EXIT_ERROR", "firefly_orm.cli._target"),
    ("firefly_orm.cli", "EXIT_USAGE", "firefly_orm.cli._target"),
    ("firefly_orm.cli", "EXIT_NOT_AT_HEAD", "firefly_orm.cli._target"),
    ("firefly_orm.cli", "Progress", "firefly_orm.cli._target"),
    ("firefly_orm.cli", "CliError", "firefly_orm.cli._target"),
    ("firefly_orm.cli", "Target", "firefly_orm.cli._target"),
    ("firefly_orm.cli", "collect_stats", "firefly_orm.cli._maintenance"),
    ("firefly_orm.cli", "CONVERSATION_PREFIX", "firefly_orm.cli._maintenance"),
    ("firefly_orm.cli", "long_term_namespaces", "firefly_orm.cli._transfer"),
    ("firefly_orm.cli", "EXPORT_FORMAT_VERSION", "firefly_orm._interop._export_file"),
    ("firefly_orm.cli", "ENV_POSTGRES_URL", "firefly_orm.envnames"),
    ("firefly_orm.cli", "ENV_SQLITE_PATH", "firefly_orm.envnames"),
    ("firefly_orm.cli", "ENV_POSTGRES_SCHEMA", "firefly_orm.envnames"),
)


@pytest.mark.parametrize(
    ("old", "name", "new"), OLD_PATHS, ids=[f"{old}.{name}" for old, name, _ in OLD_PATHS]
)
def test_old_import_paths_give_the_moved_object(old: str, name: str, new: str) -> None:
    assert getattr(importlib.import_module(old), name) is getattr(
        importlib.import_module(new), name
    )


def test_the_script_is_the_cli_main() -> None:
    (script,) = entry_points(group="console_scripts", name="firefly-orm")
    assert script.value == "firefly_orm.cli:main"
    assert script.load() is importlib.import_module("firefly_orm.cli").main
