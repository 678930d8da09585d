"""Thread races for tests: callables released together by one barrier."""

from __future__ import annotations

import threading
from collections.abc import Callable


def race(targets: list[Callable[[], None]]) -> None:
    """Run ``targets`` in threads released together; fail if any of them raised."""
    barrier = threading.Barrier(len(targets))
    errors: list[BaseException] = []

    def run(target: Callable[[], None]) -> None:
        try:
            barrier.wait()
            target()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
