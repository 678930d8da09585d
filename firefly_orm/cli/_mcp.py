"""``firefly-orm mcp`` (internal): serve one user's memory over MCP (stdio or streamable HTTP).

``--transport stdio`` (default) serves ``--user-id`` to the client that spawned
the process.  ``--transport http`` listens on ``--host``/``--port`` (path
``/mcp``): with ``--tokens-file FILE`` (a JSON object ``{"<token>": "<user
id>"}``) every request needs ``Authorization: Bearer <token>`` and is served
for that token's user (401 without one); without it, ``--user-id`` is the
only user.  The database must be at head (``firefly-orm migrate``).
"""

from __future__ import annotations

import argparse
import logging

from firefly_orm.cli import _target
from firefly_orm.cli._target import EXIT_OK, EXIT_USAGE, CliError, _resolve_target

__all__: list[str] = []

logger = logging.getLogger("firefly_orm")


def _cmd_mcp(args: argparse.Namespace) -> int:
    from firefly_orm.manager import MemoryManager
    from firefly_orm.mcp import StaticTokenVerifier, build_server, load_tokens

    if args.transport == "stdio" and args.tokens_file:
        raise CliError("--tokens-file applies to --transport http only", EXIT_USAGE)
    if bool(args.user_id) == bool(args.tokens_file):
        raise CliError("give either --user-id or --tokens-file (http)", EXIT_USAGE)
    verifier = None if not args.tokens_file else StaticTokenVerifier(load_tokens(args.tokens_file))
    target = _resolve_target(args)
    with _target._store(target, args) as store:
        manager = MemoryManager(store=store, user_id=args.user_id)
        server = build_server(
            manager,
            user_id=args.user_id,
            token_verifier=verifier,
            server_url=f"http://{args.host}:{args.port}",
        )
        logger.info("mcp: serving %s over %s", target.describe(), args.transport)
        if args.transport == "stdio":
            server.run("stdio")
        else:
            server.run("streamable-http", host=args.host, port=args.port)
    return EXIT_OK
