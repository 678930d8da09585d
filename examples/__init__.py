"""Runnable examples of firefly_orm, each started with ``python -m examples.<name>``.

Each example is exercised by ``tests/examples`` (no network: pydantic-ai's
``FunctionModel`` / ``TestModel`` stand in for a model).
"""
