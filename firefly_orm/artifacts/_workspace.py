"""The public classes: :class:`Artifacts` (keyed workspaces) and :class:`ArtifactWorkspace`.

One path for both; they are defined in :mod:`firefly_orm.artifacts._registry`
and :mod:`firefly_orm.artifacts._handle`, and are the same objects there and
in :mod:`firefly_orm.artifacts`.
"""

from __future__ import annotations

from firefly_orm.artifacts._handle import ArtifactWorkspace
from firefly_orm.artifacts._registry import Artifacts

__all__ = ["ArtifactWorkspace", "Artifacts"]
