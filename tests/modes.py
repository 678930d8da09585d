"""Sync and async in one test body: ``await call(mode, obj, "name", ...)``.

The ``mode`` fixture (``tests/conftest.py``) runs a test once per API form; ``call``
dispatches to ``obj.name(...)`` or ``await obj.async_name(...)`` accordingly.
"""

from __future__ import annotations

from typing import Any

from firefly_orm.testing import MODES

__all__ = ["MODES", "call"]


async def call(mode: str, obj: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """``obj.name(...)`` in sync mode, ``await obj.async_name(...)`` in async mode."""
    if mode == "sync":
        return getattr(obj, name)(*args, **kwargs)
    return await getattr(obj, f"async_{name}")(*args, **kwargs)
