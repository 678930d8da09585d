"""Redaction: personal data replaced in a JSON value before it is stored.

:class:`Redactor` walks a JSON value (dicts, lists, strings), runs its detectors
(:mod:`firefly_orm.privacy._detectors`) over every string and returns a new
value in which each find is replaced by ``[REDACTED:<kind>]``, with the record
of what was replaced: one :class:`Redaction` (kind, JSON path, count) per kind
and string, never the value.  The input is never changed; dict keys and
non-string leaves (numbers, booleans, ``None``) are left as they are.

Usage::

    redactor = Redactor()
    content, record = redactor.redact({"text": "write to ada@example.org"})
    # content == {"text": "write to [REDACTED:email]"}
    # record == [Redaction(kind="email", path="$.text", count=1)]
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from firefly_orm.entry import MAX_JSON_DEPTH
from firefly_orm.errors import EntryValidationError
from firefly_orm.privacy._detectors import (
    DEFAULT_DETECTORS,
    Detector,
    RedactionError,
    check_kind,
)

__all__ = ["DEFAULT_REPLACEMENT", "MAX_REDACTION_PASSES", "Redaction", "Redactor"]

logger = logging.getLogger("firefly_orm")

#: The default replacement text; ``{kind}`` is the detector's kind.
DEFAULT_REPLACEMENT = "[REDACTED:{kind}]"
#: How many times the detectors may run over one string before the redactor
#: refuses it with :class:`RedactionError` (the built-in ones settle in two or
#: three: a value told once its neighbour is redacted, then nothing).
MAX_REDACTION_PASSES = 8

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Redaction:
    """What was redacted in one string of a value: never the value itself.

    Attributes:
        kind: the detector's kind (``"email"``, ``"phone"``, ``"card"``, ``"iban"``...).
        path: where the string is in the value, as a JSON path: ``$`` is the value
            itself, ``$.text`` a key, ``$.parts[0]`` an item of a list,
            ``$["a key"]`` a key that is not an identifier.
        count: how many values of that kind were replaced in that string.
    """

    kind: str
    path: str
    count: int

    def as_dict(self) -> dict[str, Any]:
        """The record as JSON: ``{"kind": ..., "path": ..., "count": ...}``."""
        return {"kind": self.kind, "path": self.path, "count": self.count}

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> Redaction:
        """The record :meth:`as_dict` gave (:class:`RedactionError` if it is not one)."""
        try:
            kind, path, count = value["kind"], value["path"], value["count"]
        except (KeyError, TypeError):
            raise RedactionError("a redaction record has keys kind, path and count") from None
        if not isinstance(kind, str) or not isinstance(path, str):
            raise RedactionError("a redaction record's kind and path are strings")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise RedactionError("a redaction record's count is a positive integer")
        return cls(kind, path, count)


def _child_path(path: str, key: object) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if isinstance(key, str) and _IDENTIFIER.fullmatch(key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(str(key))}]"


class Redactor:
    """Replaces what its detectors find in every string of a JSON value.

    Args:
        detectors: the detectors to run (:data:`DEFAULT_DETECTORS`: e-mail
            addresses, phone numbers, card numbers, IBANs); add your own
            (:class:`~firefly_orm.privacy.RegexDetector`, or any object with a
            ``kind`` and a ``find(text)`` returning ``(start, end)`` spans).
        replacement: the text that takes a find's place; ``{kind}`` is replaced
            by the detector's kind.  It must not itself be found by a detector
            (so redacting twice changes nothing).

    Raises:
        RedactionError: a detector without a usable ``kind`` or ``find``, or a
            replacement that is empty, has another placeholder than ``{kind}``,
            or would itself be redacted.
    """

    __slots__ = ("_detectors", "_replacements")

    def __init__(
        self,
        detectors: Iterable[Detector] = DEFAULT_DETECTORS,
        *,
        replacement: str = DEFAULT_REPLACEMENT,
    ) -> None:
        if isinstance(detectors, Detector) or not isinstance(detectors, Iterable):
            raise RedactionError("detectors: an iterable of detectors (a tuple or a list)")
        chosen = tuple(detectors)
        for detector in chosen:
            if not isinstance(detector, Detector):
                raise RedactionError(
                    f"detectors: {type(detector).__name__} has no kind and find(text); "
                    "see firefly_orm.privacy.Detector"
                )
            check_kind(detector.kind)
        if not isinstance(replacement, str):
            raise RedactionError("replacement: a string such as '[REDACTED:{kind}]'")
        replacements: dict[str, str] = {}
        for kind in dict.fromkeys(d.kind for d in chosen):
            try:
                text = replacement.format(kind=kind)
            except (KeyError, IndexError, ValueError, AttributeError):
                raise RedactionError(
                    f"replacement {replacement!r}: the only placeholder it may hold is {{kind}}"
                ) from None
            if not text:
                raise RedactionError("replacement: must not be empty")
            for detector in chosen:
                spans = [
                    _checked_span(span, len(text), detector.kind) for span in detector.find(text)
                ]
                if any(start < end for start, end in spans):
                    raise RedactionError(
                        f"replacement {text!r} would itself be redacted as {detector.kind!r}"
                    )
            replacements[kind] = text
        self._detectors = chosen
        self._replacements = replacements

    @property
    def detectors(self) -> tuple[Detector, ...]:
        """The detectors this redactor runs, in order."""
        return self._detectors

    def redact(self, content: Any) -> tuple[Any, list[Redaction]]:
        """``content`` with every find replaced, and the record of what was.

        Walks dicts, lists (and tuples, returned as lists) and strings; returns a
        new value and never changes ``content``.  Dict keys and non-string
        leaves are left as they are.  Redacting the result again changes
        nothing and records nothing.

        Raises:
            EntryValidationError: ``content`` nests deeper than
                :data:`~firefly_orm.entry.MAX_JSON_DEPTH` (the limit every
                store applies; a cycle is refused the same way).
            RedactionError: a detector returned a span that is not within its text.
        """
        record: list[Redaction] = []
        root: list[Any] = [None]
        # Depth first, iteratively (no recursion limit), children pushed in
        # reverse so the record follows the value's order.
        stack: list[tuple[Any, str, Any, Any, int]] = [(content, "$", root, 0, 1)]
        while stack:
            value, path, parent, key, depth = stack.pop()
            if isinstance(value, str):
                parent[key] = self._redact_text(value, path, record)
            elif isinstance(value, dict | list | tuple):
                if depth > MAX_JSON_DEPTH:
                    raise EntryValidationError(
                        "content", f"nested deeper than {MAX_JSON_DEPTH} levels (at {path})"
                    )
                if isinstance(value, dict):
                    copy: Any = dict.fromkeys(value)
                    items: Iterable[tuple[Any, Any]] = value.items()
                else:
                    copy = [None] * len(value)
                    items = enumerate(value)
                parent[key] = copy
                children = [
                    (child, _child_path(path, name), copy, name, depth + 1) for name, child in items
                ]
                stack.extend(reversed(children))
            else:
                parent[key] = value
        if record:
            logger.debug(
                "redacted %d value(s) (%s)",
                sum(r.count for r in record),
                ", ".join(sorted({r.kind for r in record})),
            )
        return root[0], record

    def _redact_text(self, text: str, path: str, record: list[Redaction]) -> str:
        """``text`` redacted until the detectors find nothing more in it.

        A value can only be told once its neighbour is gone (a phone number
        right after a card number is read as part of a longer number until the
        card is redacted), so the detectors run again over the result until
        they find nothing: the stored text holds nothing any detector finds.
        """
        counts: dict[str, int] = {}
        passes = 0
        while regions := self._regions(text):
            passes += 1
            if passes > MAX_REDACTION_PASSES:
                raise RedactionError(
                    f"the detectors still find values in the string at {path} after "
                    f"{MAX_REDACTION_PASSES} passes (does one find its own replacement text?)"
                )
            pieces: list[str] = []
            position = 0
            for start, end, kind in regions:
                pieces.append(text[position:start])
                pieces.append(self._replacements[kind])
                counts[kind] = counts.get(kind, 0) + 1
                position = end
            pieces.append(text[position:])
            text = "".join(pieces)
        record.extend(Redaction(kind, path, count) for kind, count in counts.items())
        return text

    def _regions(self, text: str) -> list[tuple[int, int, str]]:
        """What the detectors find in ``text``: overlapping finds merged, named by the first."""
        spans: list[tuple[int, int, int, str]] = []
        for order, detector in enumerate(self._detectors):
            kind = detector.kind
            for span in detector.find(text):
                start, end = _checked_span(span, len(text), kind)
                if start < end:
                    spans.append((start, -end, order, kind))
        spans.sort()
        regions: list[tuple[int, int, str]] = []
        for start, negative_end, _order, kind in spans:
            end = -negative_end
            if regions and start < regions[-1][1]:
                first, last, name = regions[-1]
                regions[-1] = (first, max(last, end), name)
            else:
                regions.append((start, end, kind))
        return regions

    def __repr__(self) -> str:
        return f"Redactor({list(self._detectors)!r})"


def _checked_span(span: object, size: int, kind: str) -> tuple[int, int]:
    """``span`` as ``(start, end)`` if it lies within a text of ``size`` characters."""
    if (
        isinstance(span, tuple | list)
        and len(span) == 2
        and all(isinstance(i, int) and not isinstance(i, bool) for i in span)
    ):
        start, end = span
        if 0 <= start <= end <= size:
            return start, end
        raise RedactionError(
            f"detector {kind!r} returned the span ({start}, {end}) for a text of "
            f"{size} characters; a span is (start, end) with 0 <= start <= end <= len(text)"
        )
    raise RedactionError(
        f"detector {kind!r} returned a {type(span).__name__} as a span; "
        "a span is a (start, end) pair of ints"
    )
