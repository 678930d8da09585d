"""``python -m firefly_orm.cli``: the ``firefly-orm`` command."""

from firefly_orm.cli import main

__all__: list[str] = []

if __name__ == "__main__":
    raise SystemExit(main())
