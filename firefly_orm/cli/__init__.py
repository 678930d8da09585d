"""The ``firefly-orm`` command: migrations, maintenance, export/import.

Usage::

    firefly-orm migrate --url postgresql+psycopg://admin@db/app --schema firefly_memory
    firefly-orm check            # exit 1 when migrations are pending (for CI / start-up)
    firefly-orm current | history | stamp [REV] | downgrade REV
    firefly-orm stats [--json]
    firefly-orm cleanup-expired
    firefly-orm export CONVERSATION_ID [-o FILE]     # or: export --all -o all.json
    firefly-orm export --long-term-namespace NS -o items.json
    firefly-orm import FILE
    firefly-orm import-upstream SOURCE   # Firefly framework data: dir, SQLite file, mongodb://
    firefly-orm artifacts export KEY DIR [--user USER] [--force]
    firefly-orm artifacts import DIR [--key KEY] [--user USER] [--replace]
    firefly-orm rotate-keys [--keys-file FILE] [--prefix P] [--batch-size N]
    firefly-orm reembed --namespace NS --model PROVIDER:MODEL [--batch-size N]
    firefly-orm mcp --user-id USER   # or: mcp --transport http --tokens-file FILE (the MCP server)
    firefly-orm demo

The database comes from ``--url``, else ``FIREFLY_AGENTIC_MEMORY_POSTGRES_URL``,
else ``FIREFLY_AGENTIC_MEMORY_SQLITE_PATH``.  On PostgreSQL the schema is
``--schema``, else ``FIREFLY_AGENTIC_MEMORY_POSTGRES_SCHEMA``, else
``firefly_memory``; ``--schema ""`` means the connection's default schema.

Only ``migrate``/``upgrade``, ``downgrade`` and ``stamp`` change the schema;
every other command needs a database at head and says so otherwise.  Errors
are reported as one line on stderr (passwords hidden) with a non-zero exit
status: 1 = not at head / not found, 2 = usage or bad input, 3 = any other error.

``export --all`` carries every conversation and the long-term items of every
namespace that holds live ``LONG_TERM`` entries (``--long-term-namespace NS``,
repeatable, picks namespaces instead; ``--no-long-term`` leaves them out).

``import`` reads and checks the shape of the whole file (UTF-8 JSON in one of
the shapes ``export`` writes, ``firefly_orm._interop._export_file``) before it opens
the database, then writes every conversation and every long-term item in ONE
transaction: a bad item, or a write that fails, leaves the database as it was
(exit 2 for a file that cannot be read or is invalid).

``artifacts export`` writes an artifact workspace as a directory in Flyte's
layout (:mod:`firefly_orm.artifacts._flyte`), under a temporary name renamed
into place; an existing ``DIR`` must be empty, or hold an exported workspace
and ``--force`` be given.  ``artifacts import`` reads and checks the whole
directory before it opens the database and writes the workspace in one
transaction (exit 2 for a refused directory, or an existing workspace without
``--replace``; exit 1 for a workspace to export that does not exist).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from alembic.util import CommandError

from firefly_orm import migrate
from firefly_orm._interop._export_file import EXPORT_FORMAT_VERSION as EXPORT_FORMAT_VERSION
from firefly_orm.cli._artifacts import _cmd_artifacts_export, _cmd_artifacts_import
from firefly_orm.cli._knowledge import _cmd_process_pending
from firefly_orm.cli._maintenance import CONVERSATION_PREFIX as CONVERSATION_PREFIX
from firefly_orm.cli._maintenance import _cmd_cleanup, _cmd_stats
from firefly_orm.cli._maintenance import collect_stats as collect_stats
from firefly_orm.cli._mcp import _cmd_mcp
from firefly_orm.cli._migrate import (
    _cmd_check,
    _cmd_current,
    _cmd_downgrade,
    _cmd_history,
    _cmd_migrate,
    _cmd_stamp,
)
from firefly_orm.cli._privacy import _cmd_rotate_keys
from firefly_orm.cli._reembed import _cmd_reembed
from firefly_orm.cli._target import (
    EXIT_ERROR,
    EXIT_NOT_AT_HEAD,
    EXIT_OK,
    EXIT_USAGE,
    Progress,
    env_database_variable,
)
from firefly_orm.cli._target import CliError as CliError
from firefly_orm.cli._target import Target as Target
from firefly_orm.cli._transfer import _cmd_export, _cmd_import, _cmd_import_upstream
from firefly_orm.cli._transfer import long_term_namespaces as long_term_namespaces
from firefly_orm.cli._usage import _cmd_usage, _moment
from firefly_orm.conversation._usage import GROUPINGS
from firefly_orm.envnames import ENV_ENCRYPTION_KEYS
from firefly_orm.envnames import ENV_POSTGRES_SCHEMA as ENV_POSTGRES_SCHEMA
from firefly_orm.envnames import ENV_POSTGRES_URL as ENV_POSTGRES_URL
from firefly_orm.envnames import ENV_SQLITE_PATH as ENV_SQLITE_PATH
from firefly_orm.errors import (
    DatabaseConnectionError,
    EntryValidationError,
    FireflyOrmError,
    MigrationRequiredError,
    scrub_secret,
    url_secrets,
)

__all__ = [
    "EXIT_ERROR",
    "EXIT_NOT_AT_HEAD",
    "EXIT_OK",
    "EXIT_USAGE",
    "Progress",
    "main",
]


def _cmd_demo(args: argparse.Namespace) -> int:
    try:
        demo = importlib.import_module("firefly_orm.demo")
    except ModuleNotFoundError as exc:
        if exc.name != "firefly_orm.demo":
            raise
        raise CliError("the demo is not part of this installation (firefly_orm.demo)") from exc
    result = demo.main(list(args.extra))
    return int(result) if isinstance(result, int) else EXIT_OK


# --------------------------------------------------------------------------- parser


def _add_common(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    default: Any = argparse.SUPPRESS if suppress else None
    parser.add_argument(
        "--url",
        default=default,
        help=f"database URL (default: ${ENV_POSTGRES_URL}, else sqlite:///${ENV_SQLITE_PATH})",
    )
    parser.add_argument(
        "--schema",
        default=default,
        help=(
            f"PostgreSQL schema (default: ${ENV_POSTGRES_SCHEMA} or {migrate.DEFAULT_SCHEMA}; "
            "'' = the connection's default schema)"
        ),
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=argparse.SUPPRESS if suppress else 10.0,
        help="seconds to wait for a PostgreSQL connection (default 10)",
    )
    parser.add_argument(
        "--progress",
        action="store_true",
        default=argparse.SUPPRESS if suppress else None,
        help="draw progress bars on stderr even when it is not a terminal",
    )
    parser.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        default=argparse.SUPPRESS,
        help="never draw progress bars",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="log what happens (firefly_orm and alembic loggers) on stderr",
    )


def _add_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
    name: str,
    help_: str,
    func: Callable[[argparse.Namespace], int] | None,
    aliases: Sequence[str] = (),
) -> argparse.ArgumentParser:
    """Register sub-command ``name`` on ``sub``, with ``common``'s options, running ``func``.

    Returns the sub-command's parser, for its own arguments.
    """
    p = sub.add_parser(name, help=help_, parents=[common], aliases=list(aliases))
    p.set_defaults(func=func)
    return p


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``firefly-orm``."""
    parser = argparse.ArgumentParser(
        prog="firefly-orm",
        description="firefly_orm: migrations and maintenance of a memory database.",
    )
    _add_common(parser, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    _add_common(common, suppress=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help_: str, func: Any, aliases: Sequence[str] = ()) -> Any:
        return _add_command(sub, common, name, help_, func, aliases)

    p = add("migrate", "upgrade the schema (default: to head)", _cmd_migrate, ["upgrade"])
    p.add_argument("revision", nargs="?", default="head", help="target revision (default head)")
    p.add_argument(
        "--vectors",
        action="store_true",
        help="also create or upgrade the vector tables of semantic recall (PostgreSQL: pgvector)",
    )
    p = add("downgrade", "downgrade the schema ('base' drops our tables)", _cmd_downgrade)
    p.add_argument("revision", help="target revision, e.g. base or -1")
    p.add_argument(
        "--vectors",
        action="store_true",
        help="downgrade the vector tables instead ('base' drops them; the entries stay)",
    )
    add("current", "print the revision the database is at", _cmd_current)
    add("history", "list the migrations", _cmd_history)
    add("check", "exit 1 unless the database is at head", _cmd_check)
    p = add("stamp", "record a revision without running migrations", _cmd_stamp)
    p.add_argument("revision", nargs="?", default="head")
    p = add("cleanup-expired", "delete expired entries", _cmd_cleanup)
    p.add_argument("--batch-size", type=int, default=500, help="entries per transaction")
    p = add(
        "stats",
        "entries per scope and namespace prefix, expired, conversations, long-term entries",
        _cmd_stats,
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p = add("export", "export conversations and long-term items as JSON", _cmd_export)
    p.add_argument("conversation_ids", nargs="*", metavar="CONVERSATION_ID")
    p.add_argument(
        "--all",
        action="store_true",
        help="every conversation, and the long-term items of every namespace holding some",
    )
    p.add_argument(
        "--long-term-namespace",
        dest="long_term_namespaces",
        action="append",
        metavar="NAMESPACE",
        help="export this namespace's long-term items (repeatable; instead of every namespace)",
    )
    p.add_argument("--no-long-term", action="store_true", help="leave long-term items out of --all")
    p.add_argument("-o", "--output", help="file to write (default: stdout)")
    p = add(
        "import",
        "import conversations and long-term items from an export file ('-' = stdin)",
        _cmd_import,
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument("--conversation-id", help="import under this id (one conversation only)")
    p = add(
        "import-upstream",
        "import the Firefly framework memory module's data "
        "(a FileStore directory, a SQLiteStore file or a mongodb:// URL)",
        _cmd_import_upstream,
    )
    p.add_argument("source", metavar="SOURCE", help="directory, SQLite file or mongodb:// URL")
    p.add_argument("--mongo-database", help="upstream MongoDB database (default firefly_memory)")
    p.add_argument("--mongo-collection", help="upstream MongoDB collection (default entries)")
    p.add_argument("--sqlite-table", help="upstream SQLite table (default firefly_memory)")
    p.add_argument(
        "--replace-existing",
        action="store_true",
        help="overwrite entries the database already holds (default: keep them)",
    )
    p.add_argument(
        "--skip-invalid",
        action="store_true",
        help="import a namespace's valid entries even when some of its records are invalid",
    )
    p.add_argument(
        "--assume-utc", action="store_true", help="read date-times without a UTC offset as UTC"
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p = add("artifacts", "export or import an artifact workspace (Flyte's directory layout)", None)
    actions = p.add_subparsers(dest="artifacts_command", required=True, metavar="ACTION")
    owner_help = "the workspace's owner (default: a shared workspace)"
    p = _add_command(
        actions, common, "export", "write workspace KEY to directory DIR", _cmd_artifacts_export
    )
    p.add_argument("key", metavar="KEY")
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--user", help=owner_help)
    p.add_argument(
        "--force", action="store_true", help="replace DIR when it holds an exported workspace"
    )
    p = _add_command(
        actions, common, "import", "import directory DIR as a workspace", _cmd_artifacts_import
    )
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--key", help="the workspace key (default: the one DIR records, else its name)")
    p.add_argument("--user", help=owner_help)
    p.add_argument("--replace", action="store_true", help="replace the workspace if it exists")
    p = add(
        "rotate-keys",
        "re-encrypt encrypted rows under the current key (resumable, in batches)",
        _cmd_rotate_keys,
    )
    p.add_argument(
        "--keys-file",
        help=f"file of 'kid:base64key' lines, current key first (default: ${ENV_ENCRYPTION_KEYS})",
    )
    p.add_argument(
        "--prefix",
        dest="prefixes",
        action="append",
        metavar="PREFIX",
        help="namespaces starting with PREFIX are encrypted (repeatable; default: every one)",
    )
    p.add_argument(
        "--searchable",
        action="append",
        metavar="PREFIX",
        help="encrypted namespaces that keep their search text in clear (repeatable)",
    )
    p.add_argument(
        "--namespace",
        dest="namespaces",
        action="append",
        metavar="NAMESPACE",
        help="rotate only this namespace (repeatable; default: every namespace)",
    )
    p.add_argument(
        "--allow-plaintext",
        action="store_true",
        help="encrypt rows of encrypted namespaces that hold plain content (else refused)",
    )
    p.add_argument("--batch-size", type=int, default=200, help="rows per transaction")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p = add(
        "reembed",
        "re-embed namespaces with another embedding model (resumable, in batches)",
        _cmd_reembed,
    )
    p.add_argument(
        "--namespace",
        dest="namespaces",
        action="append",
        required=True,
        metavar="NAMESPACE",
        help="the namespace to re-embed, e.g. long_term:<user> (repeatable)",
    )
    p.add_argument(
        "--model", help="a pydantic-ai embedding model, e.g. openai:text-embedding-3-small"
    )
    p.add_argument(
        "--embedder-factory",
        metavar="MODULE:NAME",
        help="import an EmbeddingModel or Embedder (or a callable returning one) instead",
    )
    p.add_argument("--batch-size", type=int, default=64, help="entries per embedding call")
    p.add_argument("--json", action="store_true", help="print one JSON summary per namespace")
    p = add(
        "usage", "the turns' token usage summed per conversation, user, day or month", _cmd_usage
    )
    p.add_argument("--user", help="every conversation of this user")
    p.add_argument("--conversation", help="this conversation (live and archived turns)")
    p.add_argument("--by", choices=GROUPINGS, help="one row per group (default: one total)")
    p.add_argument("--since", type=_moment, help="turns stored at or after (ISO; UTC by default)")
    p.add_argument("--until", type=_moment, help="turns stored before (ISO; UTC by default)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = add("mcp", "serve one user's memory as an MCP server (stdio or streamable HTTP)", _cmd_mcp)
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    p.add_argument("--user-id", help="the user this server serves (required without tokens)")
    p.add_argument(
        "--tokens-file",
        metavar="FILE",
        help='http: a JSON object {"<bearer token>": "<user id>"}; each client is its user',
    )
    p.add_argument("--host", default="127.0.0.1", help="http: the address to listen on")
    p.add_argument("--port", type=int, default=8000, help="http: the port (default 8000)")
    p = sub.add_parser("knowledge", help="the knowledge graph's queued extractions")
    actions = p.add_subparsers(dest="knowledge_command", required=True, metavar="ACTION")
    p = _add_command(
        actions,
        common,
        "process-pending",
        "retry the queued extractions with a model (one transaction each)",
        _cmd_process_pending,
    )
    p.add_argument("--model", help="a pydantic-ai model, e.g. openai:gpt-4o-mini")
    p.add_argument(
        "--model-factory",
        metavar="MODULE:NAME",
        help="import a pydantic-ai Model (or a callable returning one) instead",
    )
    p.add_argument("--limit", type=int, default=50, help="extractions per pass (default 50)")
    p.add_argument("--once", action="store_true", help="one pass only (default: until drained)")
    p.add_argument(
        "--max-attempts",
        type=int,
        default=3,
        help="model calls an extraction gets in all before it is marked failed (default 3)",
    )
    p.add_argument("--actor", default="cli", help="who the history names (default cli)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    add("demo", "run the demo (firefly_orm.demo; other arguments go to it)", _cmd_demo)
    return parser


# --------------------------------------------------------------------------- main


def _one_line(exc: BaseException, args: argparse.Namespace | None) -> str:
    text = str(exc).strip() or type(exc).__name__
    return scrub_secret(text.splitlines()[0], _secrets(args))


def _secrets(args: argparse.Namespace | None) -> list[str]:
    """Every secret in the URLs this command may have used."""
    urls = (
        getattr(args, "url", None),
        getattr(args, "source", None),
        os.environ.get(ENV_POSTGRES_URL),
    )
    return [secret for raw in urls if raw for secret in url_secrets(raw)]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``firefly-orm``; returns the exit status."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "demo":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    if args.progress is None:
        args.progress = sys.stderr.isatty()
    if getattr(args, "batch_size", 1) < 1:
        parser.error("--batch-size must be at least 1")
    if args.verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s [%(name)s] %(message)s"))
        for name in ("firefly_orm", "alembic"):
            log = logging.getLogger(name)
            log.addHandler(handler)
            log.setLevel(logging.INFO)
    try:
        return int(args.func(args))
    except CliError as exc:
        print(f"firefly-orm: {_one_line(exc, args)}", file=sys.stderr)
        return exc.exit_code
    except MigrationRequiredError as exc:
        print(f"firefly-orm: {_one_line(exc, args)}", file=sys.stderr)
        return EXIT_NOT_AT_HEAD
    except EntryValidationError as exc:
        print(f"firefly-orm: {_one_line(exc, args)}", file=sys.stderr)
        return EXIT_USAGE
    except CommandError as exc:  # Alembic: a revision it cannot find or cannot go to
        print(f"firefly-orm: {_one_line(exc, args)}", file=sys.stderr)
        return EXIT_USAGE
    except (FireflyOrmError, ImportError, OSError, sa.exc.SQLAlchemyError) as exc:
        message = _one_line(exc, args)
        source = env_database_variable(args)
        if source and isinstance(exc, DatabaseConnectionError | sa.exc.SQLAlchemyError):
            message = f"{source}: {message}"  # the variable to fix
        print(f"firefly-orm: {type(exc).__name__}: {message}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("firefly-orm: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
