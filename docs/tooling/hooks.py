"""MkDocs hooks: the parts of the reference generated from the running package.

A page asks for generated text with a marker comment on a line of its own:

* ``<!-- firefly-orm:exports -->``: a table of every name in
  ``firefly_orm.__all__``, each linked to where it is documented (a name
  documented nowhere is an unresolved link, which fails the strict build) with
  the first line of its docstring;
* ``<!-- firefly-orm:cli -->``: the ``--help`` text of ``firefly-orm`` and of
  each of its commands, from the parser the command itself uses.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

# The reST role rules live in the griffe extension next to this file (mkdocs
# puts this directory on sys.path while it loads the hook).
_roles = importlib.import_module("griffe_firefly")
ROLE: re.Pattern[str] = _roles.ROLE
role_parts: Callable[[str], tuple[str, str]] = _roles.role_parts

EXPORTS_MARKER = "<!-- firefly-orm:exports -->"
CLI_MARKER = "<!-- firefly-orm:cli -->"

#: Width of the generated ``--help`` text.
HELP_COLUMNS = "88"


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Replace the markers of a page by the text they stand for."""
    generators: dict[str, Callable[[], str]] = {
        EXPORTS_MARKER: exports_table,
        CLI_MARKER: cli_help,
    }
    for marker, generate in generators.items():
        if marker in markdown:
            markdown = markdown.replace(marker, generate())
    return markdown


def exports_table() -> str:
    """A Markdown table of ``firefly_orm.__all__``: name (linked) and summary."""
    import firefly_orm

    rows = ["| name | what it is |", "|---|---|"]
    for name in sorted(firefly_orm.__all__, key=str.lower):
        if name.startswith("_"):
            continue  # __version__ is rendered with the module itself
        summary = _summary(getattr(firefly_orm, name))
        rows.append(f"| [`{name}`][firefly_orm.{name}] | {summary} |")
    return "\n".join(rows)


def _summary(obj: Any) -> str:
    """The first paragraph of ``obj``'s docstring, safe inside a table cell.

    reST roles become code (their links are on the object's own page).
    """
    doc = inspect.getdoc(obj) or ""
    first = doc.split("\n\n", 1)[0].replace("\n", " ").strip()
    first = ROLE.sub(lambda match: f"`{role_parts(match['body'])[0]}`", first)
    return first.replace("|", "\\|")


def cli_help() -> str:
    """The ``--help`` text of ``firefly-orm`` and of each command, as Markdown."""
    from firefly_orm.cli import build_parser

    with _columns(HELP_COLUMNS):
        parser = build_parser()
        parts = ["```text", parser.format_help().rstrip(), "```"]
        for name, command in _commands(parser):
            parts += ["", f"### `firefly-orm {name}`", "", "```text"]
            parts += [command.format_help().rstrip(), "```"]
    return "\n".join(parts)


def _commands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Each command's name and parser, in the order they were added (aliases once)."""
    seen: set[int] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                if id(command) not in seen:
                    seen.add(id(command))
                    yield name, command


@contextlib.contextmanager
def _columns(width: str) -> Iterator[None]:
    """Make argparse wrap its help at ``width`` columns, whatever the terminal."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = width
    try:
        yield
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
