"""Redaction's detectors and the redactor, without a store (issue 34, section 4).

Examples pin each detector's shapes (what is found, what is left alone); the
hypothesis properties embed random valid and invalid values in random text:
every valid e-mail address, phone number, card number and IBAN is replaced,
Luhn-invalid card-like numbers and mod-97-invalid IBANs are left alone, no
detected value survives, redacting twice changes nothing, and the input is
never changed.  No built-in expression has an unbounded repeat that can
backtrack (checked on the parsed expressions), and adversarial inputs (long
runs built to make a backtracking expression explode) finish.
"""

from __future__ import annotations

import copy
import importlib
import re
import string
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from firefly_orm.entry import MAX_JSON_DEPTH
from firefly_orm.errors import EntryValidationError, FireflyOrmError
from firefly_orm.privacy import _detectors as detectors
from firefly_orm.privacy._detectors import (
    DEFAULT_DETECTORS,
    IBAN_LENGTHS,
    CardDetector,
    Detector,
    EmailDetector,
    IbanDetector,
    PhoneDetector,
    RedactionError,
    RegexDetector,
    iban_valid,
    luhn_valid,
)
from firefly_orm.privacy._redaction import Redaction, Redactor

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def found(detector: Detector, text: str) -> list[str]:
    """The texts ``detector`` finds in ``text``, in order, overlapping finds merged."""
    merged: list[list[int]] = []
    for start, end in sorted(detector.find(text)):
        if merged and start < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [text[start:end] for start, end in merged]


# --------------------------------------------------------------------------- check digits


def luhn_digit(body: str) -> str:
    """The digit that makes ``body + digit`` pass the Luhn check."""
    return next(d for d in string.digits if luhn_valid(body + d))


def iban_with_check(country: str, bban: str) -> str:
    """The IBAN of ``country`` and ``bban`` with its check digits computed."""
    rearranged = bban + country + "00"
    number = int("".join(str(int(char, 36)) for char in rearranged))
    return f"{country}{98 - number % 97:02d}{bban}"


def test_luhn_and_iban_checks_on_published_numbers() -> None:
    assert luhn_valid("4111111111111111")
    assert luhn_valid("378282246310005")
    assert luhn_valid("5555555555554444")
    assert not luhn_valid("4111111111111112")
    assert iban_valid("GB82 WEST 1234 5698 7654 32")
    assert iban_valid("DE89370400440532013000")
    assert iban_valid("de89370400440532013000")
    assert not iban_valid("GB82WEST12345698765433")  # check digits off by one
    assert not iban_valid("GB82WEST123456987654")  # the wrong length for GB
    assert iban_with_check("GB", "WEST12345698765432") == "GB82WEST12345698765432"


# --------------------------------------------------------------------------- examples


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("write to ada@example.org today", ["ada@example.org"]),
        ("Ada.Lovelace+memo@mail.example.co.uk.", ["Ada.Lovelace+memo@mail.example.co.uk"]),
        ("'bob@x.io' and (carol@y.dev)", ["bob@x.io", "carol@y.dev"]),
        ("josé@exämple.com", ["josé@exämple.com"]),
        ("a@b@c.org", ["b@c.org"]),
        ("x@xn--bcher-kva.xn--p1ai", ["x@xn--bcher-kva.xn--p1ai"]),
        ("a@b.co-00 and a@example.com2024", ["a@b.co"]),
        ("root@localhost, @handle, a@b.c1, user@.com, at @ sign", []),
    ],
)
def test_email_examples(text: str, expected: list[str]) -> None:
    assert found(EmailDetector(), text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("call +44 20 7946 0958 now", ["+44 20 7946 0958"]),
        ("+1 (555) 123-4567", ["+1 (555) 123-4567"]),
        ("+44 (0)20 7946 0958", ["+44 (0)20 7946 0958"]),
        ("tel:+12025550123", ["+12025550123"]),
        ("020 7946 0958 / 01 23 45 67 89", ["020 7946 0958", "01 23 45 67 89"]),
        ("(555) 123-4567 and (02) 1234 5678", ["(555) 123-4567", "(02) 1234 5678"]),
        ("555.123.4567, 1-800-555-0100", ["555.123.4567", "1-800-555-0100"]),
        ("02079460958", ["02079460958"]),
        ("0044 20 7946 0958 or 00 33 1 23 45 67 89", ["0044 20 7946 0958", "00 33 1 23 45 67 89"]),
        ("2024 555-123-4567", ["555-123-4567"]),
        ("030/1234567 or +49 (0) 30 1234567", ["030/1234567", "+49 (0) 30 1234567"]),
        ("31-12-2024 555-123-4567", ["555-123-4567"]),
    ],
)
def test_phone_examples(text: str, expected: list[str]) -> None:
    assert found(PhoneDetector(), text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "on 2024-01-15 at 10.30, or 01.02.2024 10.30, or 31-12-2024, or 01/02/2024 10/30",
        "1/2 cup, page 12/345, /2024/01/15/0123",
        "years 2023 2024 2025, scores 10 20 30 40 50 60",
        "amount 1,000,000.00; pi 3.14159265358; version 10.0.19041.1288",
        "unix time 1700000000, order 123456789012, ip 192.168.100.100",
        "+1 555 (too short), 0.5 0.25 1.5, 555-1234, 0 20 7946 0958",
        "x555-123-4567 (glued to a word)",
        "3000 0123 45678, 4000-0123-4567-89012",  # card-like numbers, Luhn-invalid
        "0000 0000 00008, 00 12",
    ],
)
def test_phone_leaves_ordinary_numbers(text: str) -> None:
    assert found(PhoneDetector(), text) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("card 4111 1111 1111 1111.", ["4111 1111 1111 1111"]),
        ("4111-1111-1111-1111 and 5555555555554444", ["4111-1111-1111-1111", "5555555555554444"]),
        ("amex 3782 822463 10005", ["3782 822463 10005"]),
        ("2024 4111 1111 1111 1111", ["4111 1111 1111 1111"]),
        ("4111 1111 1111 1111 12 and 5500 0000 0000 0004x", ["4111 1111 1111 1111"]),
        ("1234 5678 9012 3452", ["1234 5678 9012 3452"]),
    ],
)
def test_card_examples(text: str, expected: list[str]) -> None:
    assert found(CardDetector(), text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "4111 1111 1111 1112",  # Luhn-invalid
        "41111111111111110000",  # 20 digits: a long number, not cut to a card
        "id 12345678901234567890123, 4111111111111111x",  # longer than 19, glued to a letter
        "ref A4111111111111111",
        "4111.1111.1111.1111",  # dots do not separate card groups
        "(4111) 1111 1111 1111",
    ],
)
def test_card_leaves_other_numbers(text: str) -> None:
    assert found(CardDetector(), text) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("pay GB82 WEST 1234 5698 7654 32 today", ["GB82 WEST 1234 5698 7654 32"]),
        ("DE89370400440532013000, de89 3704 0044 0532 0130 00", [
            "DE89370400440532013000", "de89 3704 0044 0532 0130 00"
        ]),
        ("GB82 WEST 1234 5698 7654 32 AB12 CD", ["GB82 WEST 1234 5698 7654 32"]),
        ("NO9386011117947", ["NO9386011117947"]),
    ],
)  # fmt: skip
def test_iban_examples(text: str, expected: list[str]) -> None:
    assert found(IbanDetector(), text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "GB82WEST12345698765433",  # mod-97 fails
        "GB82WEST123456987654",  # GB's length is 22
        "GB82WEST12345698765432X",  # glued to a letter
        "XGB82WEST12345698765432",
        "AB12 and a sentence that goes on",
    ],
)
def test_iban_leaves_other_strings(text: str) -> None:
    assert found(IbanDetector(), text) == []


def test_redact_replaces_and_records_kind_path_count_never_the_value() -> None:
    content = {
        "text": "mail ada@example.org or bob@example.org, card 4111 1111 1111 1111",
        "parts": [{"content": "+44 20 7946 0958"}, 4111111111111111, None, True],
        "a key": "GB82 WEST 1234 5698 7654 32",
        "clean": "nothing here 2024",
    }
    redacted, record = Redactor().redact(content)
    assert redacted == {
        "text": "mail [REDACTED:email] or [REDACTED:email], card [REDACTED:card]",
        "parts": [{"content": "[REDACTED:phone]"}, 4111111111111111, None, True],
        "a key": "[REDACTED:iban]",
        "clean": "nothing here 2024",
    }
    assert record == [
        Redaction("email", "$.text", 2),
        Redaction("card", "$.text", 1),
        Redaction("phone", "$.parts[0].content", 1),
        Redaction("iban", '$["a key"]', 1),
    ]
    assert record[0].as_dict() == {"kind": "email", "path": "$.text", "count": 2}
    assert Redaction.from_dict(record[0].as_dict()) == record[0]
    assert "ada@" not in repr(record)


@pytest.mark.parametrize(
    "value",
    [
        {"kind": "email", "path": "$"},
        ["email", "$", 1],
        {"kind": 1, "path": "$", "count": 1},
        {"kind": "email", "path": "$", "count": 0},
        {"kind": "email", "path": "$", "count": True},
    ],
)
def test_a_record_that_is_not_one_is_refused(value: Any) -> None:
    with pytest.raises(RedactionError, match="a redaction record"):
        Redaction.from_dict(value)


def test_redact_a_string_and_non_containers() -> None:
    redactor = Redactor()
    assert redactor.redact("ada@example.org") == ("[REDACTED:email]", [Redaction("email", "$", 1)])
    for leaf in (None, 3, 2.5, True):
        assert redactor.redact(leaf) == (leaf, [])
    assert redactor.redact(("ada@example.org",)) == (
        ["[REDACTED:email]"],
        [Redaction("email", "$[0]", 1)],
    )


def test_overlapping_finds_merge_into_one_replacement() -> None:
    text = "x@y.com@z.org"
    redacted, record = Redactor().redact(text)
    assert redacted == "[REDACTED:email]"
    assert record == [Redaction("email", "$", 1)]


def test_a_value_told_once_its_neighbour_is_redacted_is_redacted_too() -> None:
    # The phone number reads as the end of a longer number until the card
    # before it is gone: the redactor runs again until nothing is found.
    text = "4111 1111 1111 1111 030 1234 5678"
    assert found(PhoneDetector(), text) == []
    assert Redactor().redact(text) == (
        "[REDACTED:card] [REDACTED:phone]",
        [Redaction("card", "$", 1), Redaction("phone", "$", 1)],
    )


def test_a_detector_that_never_settles_is_refused() -> None:
    class Restless:
        """Finds its own replacement whenever a "b" is in the text."""

        kind = "loop"

        def find(self, text: str) -> list[tuple[int, int]]:
            if "b" not in text:
                return []
            at = text.find("[REDACTED:loop]")
            return [(at, at + 15)] if at >= 0 else [(0, 1)]

    redactor = Redactor([Restless()])
    assert redactor.redact("a") == ("a", [])
    with pytest.raises(RedactionError, match=r"at \$\.t after 8 passes") as caught:
        redactor.redact({"t": "ab"})
    assert "ab" not in str(caught.value)


def test_the_result_is_new_and_dict_keys_are_kept() -> None:
    content = {"ada@example.org": ["nothing"], "n": {"m": []}}
    redacted, record = Redactor().redact(content)
    assert redacted == content and record == []
    assert redacted is not content
    assert redacted["ada@example.org"] is not content["ada@example.org"]
    assert redacted["n"] is not content["n"]


def test_custom_detectors_and_replacement() -> None:
    employee = RegexDetector("employee_id", r"\bEMP-\d{6}\b")
    redactor = Redactor((*DEFAULT_DETECTORS, employee), replacement="<{kind}>")
    redacted, record = redactor.redact("EMP-123456 wrote to ada@example.org")
    assert redacted == "<employee_id> wrote to <email>"
    assert record == [Redaction("employee_id", "$", 1), Redaction("email", "$", 1)]

    class Names:
        kind = "name"

        def find(self, text: str) -> Iterator[tuple[int, int]]:
            for match in re.finditer(r"\bAda\b", text):
                yield match.span()

    assert isinstance(Names(), Detector)
    assert Redactor([Names()]).redact(["Ada Lovelace"]) == (
        ["[REDACTED:name] Lovelace"],
        [Redaction("name", "$[0]", 1)],
    )
    checked = RegexDetector("code", r"\b\d{4}\b", validate=lambda text: text.startswith("9"))
    assert found(checked, "1234 9876") == ["9876"]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Redactor(EmailDetector()), "an iterable of detectors"),  # type: ignore[arg-type]
        (lambda: Redactor([object()]), "has no kind and find"),  # type: ignore[list-item]
        (lambda: RegexDetector("", "x"), "detector kind ''"),
        (lambda: RegexDetector("bad kind", "x"), "detector kind 'bad kind'"),
        (lambda: RegexDetector("k", "("), "pattern '(' of detector 'k'"),
        (lambda: RegexDetector("k", re.compile(b"x")), "a str pattern"),  # type: ignore[arg-type]
        (lambda: Redactor(replacement="[{kind}:{value}]"), "the only placeholder"),
        (lambda: Redactor(replacement=""), "must not be empty"),
        (lambda: Redactor(replacement="{kind}@example.org"), "would itself be redacted"),
        (lambda: Redactor(replacement=None), "replacement: a string"),  # type: ignore[arg-type]
    ],
)
def test_misconfiguration_is_one_clear_error(build: Any, message: str) -> None:
    with pytest.raises(RedactionError, match=re.escape(message)) as caught:
        build()
    assert isinstance(caught.value, FireflyOrmError) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("spans", "message"),
    [
        ([(0, 99)], "the span (0, 99) for a text of 15 characters"),
        ([(5, 2)], "the span (5, 2)"),
        ([(-1, 2)], "the span (-1, 2)"),
        (["ada@example.org"], "returned a str as a span"),
        ([(0.0, 1)], "returned a tuple as a span"),
    ],
)
def test_a_detector_returning_a_bad_span_fails_without_the_text(
    spans: list[Any], message: str
) -> None:
    class Broken:
        kind = "broken"

        def find(self, text: str) -> list[Any]:
            return spans if "@" in text else []

    with pytest.raises(RedactionError, match=re.escape(message)) as caught:
        Redactor([Broken()]).redact({"t": "ada@example.org"})
    assert "ada@" not in str(caught.value)


def test_too_deep_or_cyclic_content_is_refused_like_validation_refuses_it() -> None:
    deep: Any = "ada@example.org"
    for _ in range(MAX_JSON_DEPTH):
        deep = [deep]
    assert Redactor().redact(deep)[1] == [Redaction("email", "$" + "[0]" * MAX_JSON_DEPTH, 1)]
    with pytest.raises(EntryValidationError, match=f"deeper than {MAX_JSON_DEPTH}"):
        Redactor().redact([deep])
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(EntryValidationError, match="deeper than"):
        Redactor().redact(cycle)


# --------------------------------------------------------------------------- properties

WORDS = st.text(alphabet=string.ascii_letters, min_size=1, max_size=8)
NUMBERS = st.integers(min_value=0, max_value=999_999).map(str)


@st.composite
def emails(draw: st.DrawFn) -> str:
    local = draw(st.from_regex(r"[a-z0-9][a-z0-9._+-]{0,15}", fullmatch=True))
    labels = draw(
        st.lists(st.from_regex(r"[a-z0-9]{1,10}", fullmatch=True), min_size=1, max_size=3)
    )
    tld = draw(st.from_regex(r"[a-z]{2,6}", fullmatch=True))
    return f"{local}@{'.'.join([*labels, tld])}"


def _digits(draw: st.DrawFn, size: int, first: str = string.digits) -> str:
    head = draw(st.sampled_from(first))
    return head + "".join(draw(st.sampled_from(string.digits)) for _ in range(size - 1))


@st.composite
def phones(draw: st.DrawFn) -> str:
    def area() -> str:
        return _digits(draw, 3, "23456789")

    shapes = [
        lambda: f"+{_digits(draw, 2, '123456789')} {_digits(draw, 2)} {_digits(draw, 8)}",
        lambda: f"+1 ({area()}) {_digits(draw, 3)}-{_digits(draw, 4)}",
        lambda: f"+{_digits(draw, draw(st.integers(7, 15)), '123456789')}",
        lambda: f"({area()}) {_digits(draw, 3)}-{_digits(draw, 4)}",
        lambda: f"{area()}-{_digits(draw, 3)}-{_digits(draw, 4)}",
        lambda: f"{area()}.{_digits(draw, 3)}.{_digits(draw, 4)}",
        lambda: f"1 {area()} {_digits(draw, 3)} {_digits(draw, 4)}",
        lambda: f"0{_digits(draw, 2, '123456789')} {_digits(draw, 4)} {_digits(draw, 4)}",
        lambda: f"0{_digits(draw, 1, '123456789')} "
        + " ".join(_digits(draw, 2) for _ in range(4)),
        lambda: f"00{_digits(draw, 2, '123456789')} {_digits(draw, 3)} {_digits(draw, 4)}",
    ]  # fmt: skip
    return draw(st.sampled_from(shapes))()


def _card_digits(draw: st.DrawFn) -> str:
    size = draw(st.integers(13, 19))
    return _digits(draw, size - 1, "3456")


def _card_format(draw: st.DrawFn, number: str) -> str:
    if draw(st.booleans()):
        return number
    groups = [number[i : i + 4] for i in range(0, len(number), 4)]
    if len(groups[-1]) < 3:
        groups[-2:] = [groups[-2] + groups[-1]]
    return draw(st.sampled_from(" -")).join(groups)


@st.composite
def cards(draw: st.DrawFn) -> str:
    body = _card_digits(draw)
    return _card_format(draw, body + luhn_digit(body))


def holds_a_card(value: str) -> bool:
    """Is a stretch of ``value``'s groups (a card number and its CVV...) a valid card?"""
    groups = re.split("[ -]", value)
    for first in range(len(groups)):
        for last in range(first, len(groups)):
            digits = "".join(groups[first : last + 1])
            short = any(len(g) < 3 for g in groups[first:last])
            if not short and 13 <= len(digits) <= 19 and luhn_valid(digits):
                return True
    return False


@st.composite
def luhn_invalid_cards(draw: st.DrawFn) -> str:
    """Card-like numbers that fail the Luhn check, none of their stretches passing it."""
    body = _card_digits(draw)
    wrong = (int(luhn_digit(body)) + draw(st.integers(1, 9))) % 10
    value = _card_format(draw, f"{body}{wrong}")
    assume(not holds_a_card(value))
    return value


COUNTRIES = sorted(IBAN_LENGTHS)


@st.composite
def ibans(draw: st.DrawFn, *, spaced: bool | None = None) -> str:
    country = draw(st.sampled_from(COUNTRIES))
    alphabet = string.digits * 3 + string.ascii_uppercase
    bban = "".join(draw(st.sampled_from(alphabet)) for _ in range(IBAN_LENGTHS[country] - 4))
    iban = iban_with_check(country, bban)
    if spaced if spaced is not None else draw(st.booleans()):
        return " ".join(iban[i : i + 4] for i in range(0, len(iban), 4))
    return iban.lower() if draw(st.booleans()) else iban


@st.composite
def mod97_invalid_ibans(draw: st.DrawFn, *, spaced: bool | None = None) -> str:
    iban = draw(ibans(spaced=False)).upper()
    check = (int(iban[2:4]) + draw(st.integers(1, 96))) % 97
    wrong = f"{iban[:2]}{check:02d}{iban[4:]}"
    if spaced if spaced is not None else draw(st.booleans()):
        return " ".join(wrong[i : i + 4] for i in range(0, len(wrong), 4))
    return wrong


VALID = st.one_of(emails(), phones(), cards(), ibans())


@st.composite
def texts_with(
    draw: st.DrawFn, values: st.SearchStrategy[str], numbers: bool
) -> tuple[str, list[str]]:
    """Random words (and numbers) with values embedded, each after a word."""
    filler = st.one_of(WORDS, NUMBERS) if numbers else WORDS
    embedded = draw(st.lists(values, min_size=1, max_size=4))
    parts: list[str] = []
    for value in embedded:
        parts += [*draw(st.lists(filler, max_size=2)), draw(WORDS)]
        parts.append(draw(st.sampled_from(["", "(", "'", "<"])) + value)
        parts.append(draw(st.sampled_from(["", ".", ",", ")", "'", ">", ";"])))
    parts += draw(st.lists(filler, max_size=3))
    separator = draw(st.sampled_from([" ", "\n", " \t "]))
    return separator.join(parts), embedded


def assert_nothing_left(redactor: Redactor, text: str) -> None:
    for detector in redactor.detectors:
        assert found(detector, text) == [], (detector.kind, text)


@SETTINGS
@given(texts_with(VALID, numbers=True))
def test_every_valid_value_is_redacted(case: tuple[str, list[str]]) -> None:
    text, embedded = case
    redactor = Redactor()
    redacted, record = redactor.redact({"text": text})
    for value in embedded:
        assert value not in redacted["text"]
        assert value.lower() not in redacted["text"].lower()
    assert sum(r.count for r in record) >= 1
    assert all(r.path == "$.text" for r in record)
    assert_nothing_left(redactor, redacted["text"])
    assert redactor.redact(redacted) == (redacted, [])


@SETTINGS
@given(texts_with(st.one_of(luhn_invalid_cards(), mod97_invalid_ibans(spaced=False)), False))
def test_invalid_card_and_iban_lookalikes_are_left_alone(case: tuple[str, list[str]]) -> None:
    text, _embedded = case
    assert Redactor().redact(text) == (text, [])


@SETTINGS
@given(mod97_invalid_ibans())
def test_the_iban_detector_leaves_mod97_invalid_ibans(value: str) -> None:
    assert found(IbanDetector(), f"pay {value} now") == []


JSON_TEXT = st.one_of(st.text(max_size=40), texts_with(VALID, numbers=True).map(lambda c: c[0]))
JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), JSON_TEXT),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@SETTINGS
@given(JSON_VALUES)
def test_redaction_is_idempotent_and_never_mutates(value: Any) -> None:
    original = copy.deepcopy(value)
    redactor = Redactor()
    redacted, record = redactor.redact(value)
    assert value == original
    again, second_record = redactor.redact(redacted)
    assert again == redacted and second_record == []
    assert all(r.count >= 1 and r.path.startswith("$") for r in record)


@SETTINGS
@given(st.text(max_size=80))
def test_any_text_is_handled_and_redacting_twice_changes_nothing(text: str) -> None:
    redactor = Redactor()
    redacted, _record = redactor.redact(text)
    assert redactor.redact(redacted) == (redacted, [])


# --------------------------------------------------------------------------- adversarial input


def _unbounded_backtracking(tree: Any) -> Iterator[str]:
    """Each greedy or lazy repeat without an upper bound in a parsed expression."""
    constants = importlib.import_module("re._constants")
    for op, value in tree:
        if op in (constants.MAX_REPEAT, constants.MIN_REPEAT):
            low, high, sub = value
            if high == constants.MAXREPEAT:
                yield f"{op} {{{low},}}"
            yield from _unbounded_backtracking(sub)
        elif op == constants.POSSESSIVE_REPEAT:
            yield from _unbounded_backtracking(value[2])
        elif op == constants.SUBPATTERN:
            yield from _unbounded_backtracking(value[3])
        elif op in (constants.ASSERT, constants.ASSERT_NOT):
            yield from _unbounded_backtracking(value[1])
        elif op == constants.ATOMIC_GROUP:
            yield from _unbounded_backtracking(value)
        elif op == constants.BRANCH:
            for branch in value[1]:
                yield from _unbounded_backtracking(branch)


def test_no_builtin_expression_can_backtrack_into_a_run() -> None:
    """Every unbounded repeat of the built-in detectors is possessive (linear scans)."""
    parser = importlib.import_module("re._parser")
    patterns = {
        name: value for name, value in vars(detectors).items() if isinstance(value, re.Pattern)
    }
    assert {"_EMAIL", "_DIGIT_RUN", "_GROUP", "_IBAN_START", "_IBAN_BODY"} <= set(patterns)
    for name, pattern in patterns.items():
        tree = parser.parse(pattern.pattern, pattern.flags)
        assert list(_unbounded_backtracking(tree)) == [], name
    # The check can fail: an ordinary greedy run is reported.
    assert list(_unbounded_backtracking(parser.parse(r"(a+)+b", 0)))


#: Inputs built to make a backtracking expression explode.  Each must simply
#: finish: a scan quadratic in its length would take billions of steps.
SIZE = 60_000

ADVERSARIAL = {
    "local part without @": "a" * SIZE,
    "@ runs": "a@" * (SIZE // 2),
    "dots after @": "a@" + "b." * (SIZE // 2),
    "labels without a tld": "a@" + "b1." * (SIZE // 3),
    "digits": "1" * SIZE,
    "digit groups": "1 " * (SIZE // 2),
    "3-digit groups": "411 " * (SIZE // 4),
    "4-digit groups": "4111 " * (SIZE // 5),
    "zero groups": "01 " * (SIZE // 3),
    "parentheses": "(1)" * (SIZE // 3),
    "unclosed parentheses": "(" + "1" * SIZE,
    "plus runs": "+1 " * (SIZE // 3),
    "iban starts": "GB82 " * (SIZE // 5),
    "iban bodies": "GB82 " + "WEST " * (SIZE // 5),
    "iban glued": "GB82" * (SIZE // 4),
    "mixed": "+(0)1-2.3 a@b.c " * (SIZE // 16),
}


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_adversarial_input_finishes(name: str) -> None:
    text = ADVERSARIAL[name]
    redacted, _record = Redactor().redact(text)
    assert isinstance(redacted, str)
