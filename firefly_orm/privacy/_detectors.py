"""Detectors of personal data in text: e-mail addresses, phone numbers, card numbers, IBANs.

A detector is anything with a ``kind`` (a short name such as ``"email"``) and a
``find(text)`` method that returns the ``(start, end)`` spans of what it found
(:class:`Detector`); :class:`RegexDetector` makes one from a regular expression.
:class:`~firefly_orm.privacy.Redactor` runs them over every string of a JSON value.

The built-in detectors favour catching a value over leaving it, but check what
can be checked so that ordinary numbers survive:

* :class:`EmailDetector`: ``local@domain.tld`` (Unicode letters allowed, a
  top-level domain of two letters or more, or an ``xn--`` one).
* :class:`PhoneDetector`: ``+`` (or ``00``) and 7 to 15 digits (E.164); or a
  national number: a trunk ``0`` and 9 to 11 digits, an area code in
  parentheses and 9 to 11 digits, or the North American 3-3-4 shape
  (``555-123-4567``, ``1 800 555 0100``).
* :class:`CardDetector`: 13 to 19 digits, whole or in groups of three or more
  digits, that pass the Luhn check.
* :class:`IbanDetector`: a country code, two check digits and the rest
  (compact or in groups), of the length the IBAN registry sets for that
  country, that pass the ISO 13616 mod-97 check.

Digit groups are only ever taken whole: a run of digits is never cut, so a
20-digit number holding a Luhn-valid 16-digit part is left alone, and a group
glued to a letter (``A4111...``, ``...1111x``) belongs to a word, not a number.

Every detector runs in time linear in the text: the expressions are possessive
(no backtracking into a run) and only start where a run starts, and the checks
after a match look at a bounded window (at most 7 groups for a card, 15 digits
for a phone, 67 characters for an IBAN).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from firefly_orm.errors import FireflyOrmError

__all__ = [
    "DEFAULT_DETECTORS",
    "CardDetector",
    "Detector",
    "EmailDetector",
    "IbanDetector",
    "PhoneDetector",
    "RedactionError",
    "RegexDetector",
    "check_kind",
    "iban_valid",
    "luhn_valid",
]


class RedactionError(FireflyOrmError, ValueError):
    """A redactor or a detector is misconfigured, or a detector returned a bad span.

    Raised before anything is written; the message never holds the text that
    was being redacted.
    """


#: What a detector's kind may be: a letter, then letters, digits, ``_`` or ``-``.
_KIND = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,39}")


def check_kind(kind: object) -> str:
    """``kind`` if it is a usable detector kind, else :class:`RedactionError`.

    A kind is 1 to 40 characters: a letter, then letters, digits, ``_`` or ``-``
    (it is written into the replacement text and the redaction record).
    """
    if not isinstance(kind, str) or _KIND.fullmatch(kind) is None:
        raise RedactionError(
            f"detector kind {kind!r}: must be 1 to 40 characters, a letter then letters, "
            "digits, '_' or '-'"
        )
    return kind


@runtime_checkable
class Detector(Protocol):
    """What finds one kind of personal data in a text.

    ``kind`` names what is found (``"email"``); it appears in the replacement
    (``[REDACTED:email]``) and in the redaction record, never the value itself.
    ``find(text)`` returns the ``(start, end)`` spans (``text[start:end]``) of
    what it found, in any order; overlapping spans are merged by the redactor.
    """

    @property
    def kind(self) -> str:
        """The name of what this detector finds (``"email"``, ``"card"``...)."""
        ...

    def find(self, text: str) -> Iterable[tuple[int, int]]:
        """The ``(start, end)`` spans of what this detector finds in ``text``."""
        ...


class RegexDetector:
    """A detector from a regular expression: each non-empty match is a find.

    Args:
        kind: the name of what is found (a letter, then letters, digits, ``_`` or ``-``).
        pattern: the expression (a string or a compiled pattern).  Keep it free
            of nested repetition (``(a+)+``): it runs over every stored string.
        flags: :mod:`re` flags for a string ``pattern``.
        validate: an optional check of each match's text; a match it refuses is
            left alone (a checksum, a list of known prefixes...).

    Usage::

        Redactor((*DEFAULT_DETECTORS, RegexDetector("employee_id", r"\\bEMP-\\d{6}\\b")))
    """

    __slots__ = ("_kind", "_pattern", "_validate")

    def __init__(
        self,
        kind: str,
        pattern: str | re.Pattern[str],
        *,
        flags: int = 0,
        validate: Callable[[str], bool] | None = None,
    ) -> None:
        self._kind = check_kind(kind)
        if isinstance(pattern, re.Pattern):
            if flags:
                raise RedactionError("flags: give them in the compiled pattern")
            if not isinstance(pattern.pattern, str):
                raise RedactionError("pattern: a str pattern is needed, not a bytes one")
            self._pattern: re.Pattern[str] = pattern
        elif isinstance(pattern, str):
            try:
                self._pattern = re.compile(pattern, flags)
            except re.error as exc:
                raise RedactionError(f"pattern {pattern!r} of detector {kind!r}: {exc}") from None
        else:
            raise RedactionError(
                f"pattern: a str or a compiled pattern, not {type(pattern).__name__}"
            )
        if validate is not None and not callable(validate):
            raise RedactionError("validate: a callable taking the matched text, or None")
        self._validate = validate

    @property
    def kind(self) -> str:
        """The name of what this detector finds."""
        return self._kind

    @property
    def pattern(self) -> re.Pattern[str]:
        """The compiled expression."""
        return self._pattern

    def find(self, text: str) -> Iterator[tuple[int, int]]:
        """The spans of the non-empty matches in ``text`` that ``validate`` accepts."""
        validate = self._validate
        for match in self._pattern.finditer(text):
            start, end = match.span()
            if start < end and (validate is None or validate(match.group())):
                yield start, end

    def __repr__(self) -> str:
        return f"RegexDetector({self._kind!r}, {self._pattern.pattern!r})"


# --------------------------------------------------------------------------- e-mail

#: A local part's run (possessive, from the run's start only) followed by ``@``;
#: the domain's run is read by a lookahead, so the next search starts right
#: after the ``@`` (``a@b@c.org`` finds ``b@c.org``).  Both runs stop at an ``@``,
#: so the runs of different ``@`` never overlap: linear time.
_EMAIL = re.compile(r"(?<![\w.%+'-])([\w.%+'-]++)@(?=([\w.-]++))")


_LETTERS = re.compile(r"[^\W\d_]++")
_WORD = re.compile(r"\w")
_PUNYCODE = re.compile(r"xn--[\w-]++", re.IGNORECASE)


def _domain_length(domain: str) -> int:
    """How long the longest e-mail domain opening ``domain`` is (0: none).

    Labels separated by dots, at least two, none empty, the last (the
    top-level domain) of two letters or more or an ``xn--`` one, not glued to
    a letter or digit: ``b.co`` in ``b.co-00``, none in ``b.co00``.  So cutting
    the text after a domain (a phone number redacted there) never makes one
    appear.
    """
    best = 0
    dot = domain.find(".")
    if dot <= 0:
        return 0
    while dot != -1:
        tld = _PUNYCODE.match(domain, dot + 1) or _LETTERS.match(domain, dot + 1)
        if tld is not None:
            end = len(domain[: tld.end()].rstrip("-"))
            glued = end < len(domain) and _WORD.match(domain, end) is not None
            if end - dot > 2 and not glued:
                best = end
        following = domain.find(".", dot + 1)
        if following == dot + 1:
            break  # an empty label: no longer domain
        dot = following
    return best


class EmailDetector:
    """E-mail addresses: ``local@domain.tld`` (kind ``"email"``)."""

    __slots__ = ()

    @property
    def kind(self) -> str:
        """``"email"``."""
        return "email"

    def find(self, text: str) -> Iterator[tuple[int, int]]:
        """The e-mail addresses in ``text``."""
        if "@" not in text:
            return
        for match in _EMAIL.finditer(text):
            local = match.group(1)
            start = match.start(1) + len(local) - len(local.lstrip(".'"))
            size = _domain_length(match.group(2))
            if start < match.end(1) and size:
                yield start, match.end() + size

    def __repr__(self) -> str:
        return "EmailDetector()"


# --------------------------------------------------------------------------- digit runs

#: A run of digit groups: an optional ``+``, then groups (``123`` or ``(123)``)
#: separated by at most one space, no-break space, ``-``, ``.`` or ``/``.  Possessive
#: throughout and started only where no word character precedes: each character
#: is read once.
_DIGIT_RUN = re.compile(
    r"(?<![\w+])\+?(?:\(\d++\)|\d++)(?:[ \u00a0./\-]?+(?:\(\d++\)|\d++))*+",
)
_GROUP = re.compile(r"\((\d++)\)|(\d++)")
_ANY_DIGIT = re.compile(r"\d")
_GLUED = re.compile(r"\w")


@dataclass(frozen=True, slots=True)
class _Group:
    start: int
    end: int
    digits: str
    parenthesized: bool
    separator: str  # what stands between the previous group and this one


def _runs(text: str) -> Iterator[tuple[bool, list[_Group]]]:
    """Each digit run of ``text``: does it open with ``+``, and its groups.

    A last group glued to a word (``1111x``) is part of that word, not of the run.
    """
    if _ANY_DIGIT.search(text) is None:
        return
    for run in _DIGIT_RUN.finditer(text):
        groups: list[_Group] = []
        plus = text.startswith("+", run.start())
        previous = run.start() + plus
        for group in _GROUP.finditer(text, previous, run.end()):
            paren = group.group(1)
            separator = text[previous : group.start()] if groups else ""
            digits = paren if paren is not None else group.group(2)
            groups.append(_Group(group.start(), group.end(), digits, paren is not None, separator))
            previous = group.end()
        if _GLUED.match(text, run.end()) and not groups[-1].parenthesized:
            groups.pop()
        if groups:
            yield plus, groups


#: Each digit doubled, less 9 when over 9 (the Luhn step on every second digit).
_LUHN_DOUBLE = str.maketrans("0123456789", "0246813579")


def luhn_valid(digits: str) -> bool:
    """Do ``digits`` (decimal digits only) pass the Luhn check of card numbers?"""
    if not digits.isascii():
        digits = "".join(str(int(char)) for char in digits)
    backwards = digits[::-1]
    kept, doubled = backwards[0::2], backwards[1::2].translate(_LUHN_DOUBLE)
    total = sum(kept.encode()) + sum(doubled.encode()) - 48 * len(digits)
    return total % 10 == 0


#: Separators a card number's groups may have between them.
_CARD_SEPARATORS = frozenset({" ", "\u00a0", "-"})


class CardDetector:
    """Payment card numbers: 13 to 19 digits that pass the Luhn check (kind ``"card"``).

    The digits stand whole (``4111111111111111``) or in groups of at least three
    (the last may be shorter) separated by a space or ``-``
    (``4111 1111 1111 1111``, ``3782-822463-10005``).  Every stretch of whole
    groups that is a card number is found, so a number just before a card
    (``2024 4111 1111 1111 1111``) never hides it.
    """

    __slots__ = ()

    @property
    def kind(self) -> str:
        """``"card"``."""
        return "card"

    def find(self, text: str) -> Iterator[tuple[int, int]]:
        """The Luhn-valid card numbers in ``text``."""
        for _plus, groups in _runs(text):
            for index in range(len(groups)):
                end = self._longest_from(groups, index)
                if end is not None:
                    yield groups[index].start, groups[end].end

    @staticmethod
    def _longest_from(groups: list[_Group], first: int) -> int | None:
        found = None
        digits = ""
        for index in range(first, len(groups)):
            group = groups[index]
            if group.parenthesized or (index == first and len(group.digits) < 3):
                break
            if index > first and group.separator not in _CARD_SEPARATORS:
                break
            digits += group.digits
            if len(digits) > 19:
                break
            if len(digits) >= 13 and luhn_valid(digits):
                found = index
            if len(group.digits) < 3:
                break  # a group of one or two digits can only end a card number
        return found

    def __repr__(self) -> str:
        return "CardDetector()"


#: The shapes of a date's three groups: ``01.02.2024``, ``31/12/2024``, ``2024-12-31``.
_DATE_SHAPES = frozenset(
    ((a, ""), (b, sep), (c, sep)) for a, b, c in ((2, 2, 4), (4, 2, 2)) for sep in ".-/"
)


def _is_date(groups: list[_Group], first: int) -> bool:
    """Do the three groups from ``first`` make a date (never a phone number's start)?"""
    if len(groups[first].digits) not in (2, 4):
        return False
    window = groups[first : first + 3]
    shape = tuple((len(g.digits), g.separator if i else "") for i, g in enumerate(window))
    return shape in _DATE_SHAPES and not any(g.parenthesized for g in window)


class PhoneDetector:
    """Phone numbers (kind ``"phone"``).

    Found: ``+`` and 7 to 15 digits in any grouping (``+44 20 7946 0958``,
    ``+1 (555) 123-4567``), or ``00`` and a country code
    (``0044 20 7946 0958``); a national number of 9 to 11 digits opening with a
    trunk ``0`` (``020 7946 0958``, ``01 23 45 67 89``) or with an area code in
    parentheses (``(555) 123-4567``), in groups of two digits or more; the
    North American shape 3-3-4, with or without a leading ``1``
    (``555.123.4567``, ``1-800-555-0100``).  A bare run of digits is a phone
    number only with a ``+`` or a trunk ``0`` and 10 or 11 digits: dates,
    amounts, years and ids are left alone.  A national number after other
    digit groups must stand apart from them (``2024 555-123-4567``), so the
    groups of a longer number (``3000 0123 45678``) are not taken for one.
    """

    __slots__ = ()

    @property
    def kind(self) -> str:
        """``"phone"``."""
        return "phone"

    def find(self, text: str) -> Iterator[tuple[int, int]]:
        """The phone numbers in ``text``."""
        for plus, groups in _runs(text):
            dates_until = 0
            # Where a number may start as at the start of the run: the run's
            # first group, or the group right after a number found (as it
            # would once that number is redacted).
            fresh = 0
            for index in range(len(groups)):
                end = self._international(groups, index, plus) if index == fresh else None
                if end is None and _is_date(groups, index):
                    dates_until = index + 3  # no phone number starts within a date
                if end is None and index >= dates_until:
                    end = self._national(groups, index, index == fresh)
                if end is not None:
                    start = groups[index].start - (1 if plus and index == 0 else 0)
                    yield start, groups[end].end
                    fresh = max(fresh, end + 1)

    @staticmethod
    def _international(groups: list[_Group], first: int, plus: bool) -> int | None:
        """The last group of ``+44 20 7946 0958`` or ``0044 20 7946 0958``, or ``None``."""
        head = groups[first]
        if plus and first == 0:
            count = 0
        elif head.digits.startswith("00") and not head.parenthesized:
            # The international call prefix (not part of the number), then a
            # country code (never opening with 0).
            after = groups[first + 1].digits if first + 1 < len(groups) else "0"
            if (head.digits[2:] or after)[0] == "0":
                return None
            count = -2
        else:
            return None
        found = None
        for index in range(first, len(groups)):
            count += len(groups[index].digits)
            if count > 15:
                break
            if count >= 7:
                found = index
        return found

    @staticmethod
    def _national(groups: list[_Group], first: int, fresh: bool) -> int | None:
        head = groups[first]
        if head.parenthesized or head.digits[:1] == "0":
            end = PhoneDetector._trunk_or_area(groups, first)
        else:
            end = PhoneDetector._north_american(groups, first)
        if end is None or fresh or head.parenthesized or groups[first - 1].parenthesized:
            return end
        # Within a run, a number must stand apart from the groups before it:
        # ``2024 555-123-4567`` holds one, ``3000 0123 45678`` (a card-like
        # number) does not.
        inside = {groups[index].separator for index in range(first + 1, end + 1)}
        return end if inside and head.separator not in inside else None

    @staticmethod
    def _trunk_or_area(groups: list[_Group], first: int) -> int | None:
        """The last group of ``020 7946 0958`` or ``(555) 123-4567``, or ``None``."""
        head = groups[first]
        if head.parenthesized:
            if not 1 <= len(head.digits) <= 5:
                return None
        elif len(head.digits) < 2 or head.digits[1] == "0":
            return None  # a trunk prefix is one 0 ("00" opens an international number)
        found = None
        count = 0
        for index in range(first, len(groups)):
            group = groups[index]
            if len(group.digits) < 2 and index > first:
                break
            count += len(group.digits)
            if count > 11:
                break
            if count >= (10 if index == first else 9):
                found = index
        return found

    @staticmethod
    def _north_american(groups: list[_Group], first: int) -> int | None:
        """The last group of ``555-123-4567`` or ``1 800 555 0100``, or ``None``."""
        shape = [len(g.digits) for g in groups[first : first + 4]]
        head = groups[first].digits
        if head == "1" and shape == [1, 3, 3, 4] and groups[first + 1].digits[0] in "23456789":
            return first + 3
        if shape[:3] == [3, 3, 4] and head[0] in "23456789":
            return first + 2
        return None

    def __repr__(self) -> str:
        return "PhoneDetector()"


# --------------------------------------------------------------------------- IBAN

#: The length of each country's IBAN (the ISO 13616 registry); a country not
#: listed here has no IBAN as far as :class:`IbanDetector` knows.
IBAN_LENGTHS: dict[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22,
    "BH": 22, "BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24,
    "DE": 22, "DJ": 27, "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18,
    "FK": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27,
    "GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27,
    "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20,
    "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MN": 20, "MR": 27,
    "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23, "PK": 24, "PL": 28,
    "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24, "SC": 31,
    "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}  # fmt: skip
_IBAN_MAX = 34

#: Where an IBAN may start: a country code and two check digits, not glued to a
#: letter or digit before them.
_IBAN_START = re.compile(r"(?<![A-Za-z0-9])[A-Za-z]{2}[0-9]{2}")
#: Its body: letters and digits, in groups separated by single spaces (read
#: within a window of at most 67 characters: 34 and the spaces between them).
_IBAN_BODY = re.compile(r"[A-Za-z0-9]++(?: [A-Za-z0-9]++)*+")
_IBAN_WINDOW = _IBAN_MAX * 2 - 1
_IBAN_ALNUM = re.compile(r"[A-Z0-9]++")


def _mod97(compact: str) -> int:
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(char, 36)) for char in rearranged)) % 97


def _compact(text: str) -> str:
    return text.replace(" ", "").upper()


def iban_valid(text: str) -> bool:
    """Is ``text`` (spaces allowed, any case) an IBAN: a listed country, its length, mod 97?"""
    compact = _compact(text)
    if _IBAN_ALNUM.fullmatch(compact) is None or not compact[2:4].isdigit():
        return False
    return IBAN_LENGTHS.get(compact[:2]) == len(compact) and _mod97(compact) == 1


class IbanDetector:
    """International bank account numbers that pass the mod-97 check (kind ``"iban"``).

    Compact (``GB82WEST12345698765432``) or in groups separated by single spaces
    (``GB82 WEST 1234 5698 7654 32``), in either case, of the length the IBAN
    registry sets for the country.
    """

    __slots__ = ()

    @property
    def kind(self) -> str:
        """``"iban"``."""
        return "iban"

    def find(self, text: str) -> Iterator[tuple[int, int]]:
        """The IBANs in ``text``."""
        after = 0
        for start in _IBAN_START.finditer(text):
            if start.start() < after:
                continue
            end = self._end(text, start.start())
            if end is not None:
                yield start.start(), end
                after = end

    @staticmethod
    def _end(text: str, start: int) -> int | None:
        expected = IBAN_LENGTHS.get(text[start : start + 2].upper())
        if expected is None:
            return None
        body = _IBAN_BODY.match(text, start, min(len(text), start + _IBAN_WINDOW))
        if body is None:  # pragma: no cover - the start expression guarantees a body
            return None
        # The IBAN ends where a group ends with the country's count of letters
        # and digits, not glued to a letter or digit after it.
        count = 0
        for group in _IBAN_ALNUM.finditer(body.group().upper()):
            count += group.end() - group.start()
            if count < expected:
                continue
            end = start + group.end()
            glued = end < len(text) and text[end].isalnum()
            if count == expected and not glued and _mod97(_compact(text[start:end])) == 1:
                return end
            return None
        return None

    def __repr__(self) -> str:
        return "IbanDetector()"


#: The built-in detectors: e-mail addresses, phone numbers, card numbers, IBANs.
DEFAULT_DETECTORS: tuple[Detector, ...] = (
    EmailDetector(),
    PhoneDetector(),
    CardDetector(),
    IbanDetector(),
)
