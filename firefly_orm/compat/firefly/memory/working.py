"""Upstream's ``memory.working``: firefly_orm's ``WorkingMemory``.

Same API (``set``/``get``/``has``/``delete``/``keys``/``items``/``to_dict``/
``to_context_string``/``clear``) and namespace (``working:<scope_id>``);
``set`` is one atomic upsert instead of delete-then-insert.
"""

from __future__ import annotations

from firefly_orm.working import WorkingMemory

__all__ = ["WorkingMemory"]
