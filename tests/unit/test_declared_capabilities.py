"""`protocols.declares`: answered once per class, but per object for proxies."""

from __future__ import annotations

from typing import Any

from firefly_orm.protocols import ContentReads, declares


class Reads:
    """Declares ContentReads."""

    def load_content_by_key(self, namespace: str, key: str) -> list[Any]:
        return [namespace, key]

    async def async_load_content_by_key(self, namespace: str, key: str) -> list[Any]:
        return [namespace, key]


class NoReads:
    """Declares nothing optional."""


class Proxy:
    """Forwards every attribute to the store it wraps (a test double, an app's wrapper)."""

    def __init__(self, inner: object) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_plain_class_is_answered_from_its_declaration() -> None:
    assert declares(Reads(), ContentReads)
    assert not declares(NoReads(), ContentReads)


def test_a_proxy_is_answered_for_what_it_wraps_each_time() -> None:
    # Both orders: a per-class answer would carry the first proxy's over to the second.
    assert declares(Proxy(Reads()), ContentReads)
    assert not declares(Proxy(NoReads()), ContentReads)
    assert declares(Proxy(Reads()), ContentReads)
