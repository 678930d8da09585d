"""Artifact workspaces' pure model: one path for the names of its four homes.

Nothing is defined here: every name of the four homes' ``__all__`` is imported
from its home, and is the same object there and in :mod:`firefly_orm.artifacts`:

* :mod:`~firefly_orm.artifacts._rules`: the input rules (paths, prefixes,
  keys, actors, reasons, shas) and :class:`WorkspaceOptions`;
* :mod:`~firefly_orm.artifacts._errors`: :class:`ShaMismatchError`,
  :class:`ReadOnlyPathError`, :class:`WorkspaceExistsError`;
* :mod:`~firefly_orm.artifacts._results`: file bodies and the result models;
* :mod:`~firefly_orm.artifacts._layout`: how a workspace's rows are laid out
  (:class:`Layout`) and read back as results.
"""

from __future__ import annotations

from firefly_orm.artifacts import _errors, _layout, _results, _rules
from firefly_orm.artifacts._errors import *  # noqa: F403
from firefly_orm.artifacts._layout import *  # noqa: F403
from firefly_orm.artifacts._results import *  # noqa: F403
from firefly_orm.artifacts._rules import *  # noqa: F403

# The forms of ``__all__`` that type checkers follow (mypy, pyright).
__all__: list[str] = []
__all__ += _errors.__all__
__all__ += _layout.__all__
__all__ += _results.__all__
__all__ += _rules.__all__
