"""The error of vector search that cannot run here.

Core floor: imports nothing of the package but :mod:`firefly_orm.errors`.
"""

from __future__ import annotations

from firefly_orm.errors import StoreError

__all__ = ["VectorUnavailableError"]


class VectorUnavailableError(StoreError):
    """Vector search cannot run with this Python, these packages or this server.

    Raised, before anything is written, when the ``vector`` extra is not
    installed, when no SQLite module of this Python can load the ``sqlite-vec``
    extension, or when a PostgreSQL server has no ``pgvector``.  The message
    says what to install or enable.  Everything that needs no vectors (text
    recall, the other layers) keeps working.
    """
