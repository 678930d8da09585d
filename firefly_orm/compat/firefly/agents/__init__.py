"""Upstream's ``agents`` package: its delegation names (see :mod:`.delegation`).

Needs the ``pydantic-ai`` extra.  Only the delegation router and its
strategies are here; upstream's agent classes, middleware and templates are
not part of the memory module firefly_orm models.
"""

from __future__ import annotations

from firefly_orm.compat.firefly.agents.delegation import *  # noqa: F403
from firefly_orm.compat.firefly.agents.delegation import __all__ as __all__
