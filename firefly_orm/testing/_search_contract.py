"""The full-text search half of the contract suite (mixed into :class:`StoreContract`).

Every test searches through the unit of work (``uow.entries.search``), the way
the memory layers do.  A store whose units of work cannot search yet (a staged
backend without ``read_search``, see :func:`firefly_orm.uow.supports_search`)
is skipped by the explicit capability check :meth:`StoreDriver.can_search`;
every other store must pass.  The rules checked are those of
:mod:`firefly_orm._search`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

import pytest

from firefly_orm._search import MAX_QUERY_TERMS, SearchHit
from firefly_orm.entry import MAX_SEARCH_TEXT_LENGTH, utcnow
from firefly_orm.errors import EntryValidationError
from firefly_orm.testing._drivers import StoreDriver
from firefly_orm.testing._samples import in_past, make_entry, to_ms

__all__ = ["HOSTILE_DOCUMENTS", "HOSTILE_QUERIES", "SearchContract"]

#: The documents the hostile queries run against: ``key -> search_text``.
HOSTILE_DOCUMENTS: dict[str, str] = {
    "quote": 'she said "hello" and left',
    "apostrophe": "it's Ada's notebook",
    "or": "black or white",
    "not": "do not disturb",
    "near": "near the station",
    "star": "wildcard star",
    "caret": "caret top",
    "column": "column col term",
    "minus": "x minus y",
    "unicode": "café naïve Ελληνικά привет 日本語",
    "plain": "nothing special here",
}

_FILLER = " ".join(f"filler{i}" for i in range(MAX_QUERY_TERMS))

#: ``(query, keys of HOSTILE_DOCUMENTS it must find)``: syntax of FTS5,
#: tsquery, websearch and MongoDB ``$text`` is searched as words, never run.
HOSTILE_QUERIES: list[tuple[str, set[str]]] = [
    ('"', set()),
    ("'", set()),
    ('""', set()),
    ('"hello', {"quote"}),  # an unbalanced quote
    ("Ada's", {"apostrophe"}),
    ("OR", {"or"}),
    ("NOT", {"not"}),
    ("AND", {"quote"}),
    ("NEAR(station)", {"near"}),
    ("NEAR(a b)", {"near"}),  # the word "near", not an operator
    ("*", set()),
    ("wild*", set()),  # no prefix search: "wild" is not a word of "wildcard"
    ("^caret", {"caret"}),
    ("col:term", {"column"}),  # not a column filter
    ("search_text:hello", {"quote"}),  # not even on the indexed column's name
    ("{search_text}: hello", {"quote"}),
    ("-x", {"minus"}),  # not a negation
    ("white -black", {"or"}),
    ("hello AND NOT station", {"quote", "not", "near"}),
    ("&|!", set()),
    ("!!(disturb)", {"not"}),
    ("disturb:*", {"not"}),
    ("hello <-> left", {"quote"}),
    ("hello\x00station", {"quote", "near"}),  # NUL separates words
    ("\x00", set()),
    ("\\", set()),
    ("%_", set()),
    ("'; DROP TABLE memory_entries; --", set()),
    ('{"$ne": null}', set()),
    ("hello\ud800", {"quote"}),  # a lone surrogate separates words too
    ("🙂", set()),
    ("x" * 5000 + " hello", {"quote"}),  # an over-long word is dropped
    ("hello " * 20_000, {"quote"}),
    (_FILLER + " station", set()),  # only the first MAX_QUERY_TERMS words count
    ("ПРИВЕТ", {"unicode"}),
    ("CAFÉ", {"unicode"}),
    ("Ελληνικά", {"unicode"}),
    ("日本語", {"unicode"}),
]


def _keys(hits: list[SearchHit]) -> list[str | None]:
    return [hit.entry.key for hit in hits]


def _shown(keys: Iterable[str | None]) -> list[str]:
    return sorted(str(key) for key in keys)


class SearchContract:
    """Full-text search tests; they use the ``contract`` fixture of :class:`StoreContract`."""

    @staticmethod
    async def _require_search(contract: StoreDriver) -> None:
        if not await contract.can_search():
            pytest.skip(
                f"{type(contract.store).__name__} does not implement full-text search yet "
                "(its units of work have no read_search)"
            )

    async def test_search_fields_round_trip(self, contract: StoreDriver) -> None:
        await self._require_search(contract)
        ns = contract.ns()
        entry = make_entry(key="k", search_text="Ada Lovelace", search_language="english")
        await contract.save(ns, entry)
        [loaded] = await contract.load(ns)
        assert (loaded.search_text, loaded.search_language) == ("Ada Lovelace", "english")
        await contract.save(ns, loaded.copy_entry(search_text=None, search_language=None))
        [loaded] = await contract.load(ns)
        assert (loaded.search_text, loaded.search_language) == (None, None)

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("search_text", "x" * (MAX_SEARCH_TEXT_LENGTH + 1)),
            ("search_text", "a\x00b"),
            ("search_text", 42),
            ("search_language", "English"),
            ("search_language", "english; drop"),
            ("search_language", ""),
        ],
        ids=["text-too-long", "text-nul", "text-int", "lang-upper", "lang-sql", "lang-empty"],
    )
    async def test_bad_search_fields_are_refused(
        self, contract: StoreDriver, field: str, value: Any
    ) -> None:
        ns = contract.ns()
        entry = make_entry(key="k")
        setattr(entry, field, value)
        with pytest.raises(EntryValidationError) as info:
            await contract.save(ns, entry)
        assert info.value.field == field
        assert await contract.load(ns) == []

    async def test_search_matches_words_of_live_entries(self, contract: StoreDriver) -> None:
        await self._require_search(contract)
        ns, other = contract.ns("a"), contract.ns("b")
        for key, text in [
            ("ada", "Ada Lovelace wrote the first program"),
            ("grace", "Grace Hopper wrote a compiler"),
            ("none", None),
            ("empty", ""),
        ]:
            await contract.save(ns, make_entry(key=key, search_text=text))
        await contract.save(ns, make_entry(key="gone", search_text="ada", expires_at=in_past()))
        await contract.save(other, make_entry(key="elsewhere", search_text="ada lovelace"))
        async with contract.unit_of_work() as uow:
            assert _keys(await uow.search(ns, "LOVELACE")) == ["ada"]
            assert set(_keys(await uow.search(ns, "wrote"))) == {"ada", "grace"}
            assert set(_keys(await uow.search(ns, "hopper lovelace"))) == {"ada", "grace"}
            assert await uow.search(ns, "love") == []  # words, not substrings
            assert await uow.search(ns, "") == []
            assert await uow.search(ns, " \t\n ") == []
            assert await uow.search(ns, "?!") == []
            assert await uow.search(contract.ns("unknown"), "ada") == []
            [hit] = await uow.search(other, "ada")
            assert hit.entry.namespace == other and hit.entry.search_text == "ada lovelace"
            assert isinstance(hit.score, float) and hit.score > 0

    async def test_search_ranks_by_relevance_then_importance_then_recency(
        self, contract: StoreDriver
    ) -> None:
        await self._require_search(contract)
        ns = contract.ns()
        base = to_ms(utcnow() - timedelta(minutes=10))
        rows = [
            ("both", "ada lovelace notes", 0.1),
            ("one", "ada babbage notes", 0.9),
            ("tie-low", "grace hopper notes", 0.3),
            ("tie-high", "grace hopper notes", 0.8),
            ("old", "kiwi fruit notes", 0.5),
            ("new", "kiwi fruit notes", 0.5),
        ]
        rows += [(f"filler-{i}", f"unrelated filler text {i}", 0.5) for i in range(6)]
        for i, (key, text, importance) in enumerate(rows):
            entry = make_entry(
                key=key,
                search_text=text,
                importance=importance,
                created_at=base + timedelta(seconds=i),
            )
            await contract.save(ns, entry)
        async with contract.unit_of_work() as uow:
            hits = await uow.search(ns, "ada lovelace")
            assert _keys(hits) == ["both", "one"]  # more of the words beats importance
            assert hits[0].score > hits[1].score
            assert _keys(await uow.search(ns, "grace hopper")) == ["tie-high", "tie-low"]
            assert _keys(await uow.search(ns, "kiwi")) == ["new", "old"]
            every = await uow.search(ns, "notes ada grace kiwi", limit=None)
            assert len(every) == 6
            scores = [hit.score for hit in every]
            assert scores == sorted(scores, reverse=True)
            assert _keys(await uow.search(ns, "notes ada grace kiwi", limit=2)) == _keys(every[:2])
            assert await uow.search(ns, "notes", limit=0) == []

    async def test_search_filters(self, contract: StoreDriver) -> None:
        await self._require_search(contract)
        ns = contract.ns()
        rows = [
            ("fact:1", "ann", 0.9),
            ("fact:2", "bob", 0.4),
            ("note:1", "ann", 0.2),
            (None, None, 0.7),
        ]
        for key, user, importance in rows:
            entry = make_entry(
                key=key, user_id=user, importance=importance, search_text="shared word"
            )
            await contract.save(ns, entry)
        async with contract.unit_of_work() as uow:
            assert len(await uow.search(ns, "word")) == 4
            assert _keys(await uow.search(ns, "word", user_id="ann")) == ["fact:1", "note:1"]
            assert _keys(await uow.search(ns, "word", key_prefix="fact:")) == ["fact:1", "fact:2"]
            assert len(await uow.search(ns, "word", key_prefix="")) == 3  # any key
            assert _keys(await uow.search(ns, "word", min_importance=0.7)) == ["fact:1", None]
            assert _keys(
                await uow.search(ns, "word", user_id="ann", key_prefix="fact", min_importance=0.5)
            ) == ["fact:1"]
            assert await uow.search(ns, "word", user_id="nobody") == []
            assert len(await uow.search(ns, "word", language="english")) == 4

    @pytest.mark.parametrize(
        ("options", "field"),
        [
            ({"limit": -1}, "limit"),
            ({"limit": "3"}, "limit"),
            ({"limit": True}, "limit"),
            ({"min_importance": math.nan}, "min_importance"),
            ({"min_importance": "high"}, "min_importance"),
            ({"user_id": ""}, "user_id"),
            ({"key_prefix": "a\x00"}, "key_prefix"),
            ({"language": "english'; --"}, "language"),
        ],
        ids=lambda v: str(v),
    )
    async def test_search_refuses_bad_arguments(
        self, contract: StoreDriver, options: dict[str, Any], field: str
    ) -> None:
        await self._require_search(contract)
        ns = contract.ns()
        async with contract.unit_of_work() as uow:
            with pytest.raises(EntryValidationError) as info:
                await uow.search(ns, "word", **options)
            assert info.value.field == field
            with pytest.raises(EntryValidationError) as info:
                await uow.search(ns, 42)  # type: ignore[arg-type]
            assert info.value.field == "query"
            with pytest.raises(TypeError, match="limt"):
                await uow.search(ns, "word", limt=1)  # type: ignore[call-arg]

    async def test_hostile_queries_are_searched_as_text(self, contract: StoreDriver) -> None:
        await self._require_search(contract)
        ns = contract.ns()
        for key, text in HOSTILE_DOCUMENTS.items():
            await contract.save(ns, make_entry(key=key, search_text=text))
        wrong: list[str] = []
        async with contract.unit_of_work() as uow:
            for query, expected in HOSTILE_QUERIES:
                found = set(_keys(await uow.search(ns, query, limit=None)))
                if found != expected:
                    wrong.append(f"{query[:40]!r}: found {_shown(found)}, want {_shown(expected)}")
        assert wrong == []
        assert len(await contract.load(ns)) == len(HOSTILE_DOCUMENTS)  # nothing was dropped

    async def test_search_sees_staged_writes(self, contract: StoreDriver) -> None:
        await self._require_search(contract)
        ns = contract.ns()
        stored = [
            make_entry(key=f"s{i}", search_text="kiwi", importance=0.9 - i / 10, user_id=user)
            for i, user in enumerate(["ann", "bob", "ann", "bob", "cy"])
        ]
        for entry in stored:
            await contract.save(ns, entry)
        async with contract.unit_of_work() as uow:
            await uow.delete(ns, [stored[0].entry_id, stored[1].entry_id])
            assert _keys(await uow.search(ns, "kiwi", limit=2)) == ["s2", "s3"]
            await uow.save(ns, stored[4].copy_entry(importance=1.0))
            assert _keys(await uow.search(ns, "kiwi", limit=2)) == ["s4", "s2"]
            await uow.save(ns, stored[2].copy_entry(search_text="mango"))
            assert _keys(await uow.search(ns, "kiwi")) == ["s4", "s3"]
            assert _keys(await uow.search(ns, "mango")) == ["s2"]
            await uow.save(ns, make_entry(key="new", search_text="kiwi mango", importance=0.0))
            assert _keys(await uow.search(ns, "mango kiwi", limit=1)) == ["new"]
            if contract.can_erase_users():
                await uow.erase_user("bob")
                assert _keys(await uow.search(ns, "kiwi")) == ["s4", "new"]
            # Not visible outside before commit.
            async with contract.unit_of_work(read_only=True) as outside:
                assert len(await outside.search(ns, "kiwi")) == 5
            await uow.commit()
        async with contract.unit_of_work() as uow:
            expected = ["s4", "new"] if contract.can_erase_users() else ["s4", "s3", "new"]
            assert _keys(await uow.search(ns, "kiwi")) == expected
            await uow.clear(ns)
            assert await uow.search(ns, "kiwi") == []

    async def test_search_follows_committed_changes(self, contract: StoreDriver) -> None:
        await self._require_search(contract)
        ns = contract.ns()
        entry = make_entry(key="k", search_text="alpha")
        await contract.save(ns, entry)

        async def found(query: str) -> list[str | None]:
            async with contract.unit_of_work() as uow:
                return _keys(await uow.search(ns, query))

        assert await found("alpha") == ["k"]
        await contract.save(ns, entry.copy_entry(search_text="beta"))  # an upsert
        assert (await found("alpha"), await found("beta")) == ([], ["k"])
        await contract.save(ns, entry.copy_entry(search_text="beta", content="changed"))
        assert await found("beta") == ["k"]
        await contract.save(ns, entry.copy_entry(search_text=None))
        assert await found("beta") == []
        await contract.save(ns, entry.copy_entry(search_text="gamma"))
        assert await found("gamma") == ["k"]
        await contract.delete(ns, entry.entry_id)
        assert await found("gamma") == []
        await contract.save(ns, make_entry(key="again", search_text="gamma"))
        assert await found("gamma") == ["again"]
        await contract.clear(ns)
        assert await found("gamma") == []

    async def test_search_text_of_the_largest_size(self, contract: StoreDriver) -> None:
        await self._require_search(contract)
        ns = contract.ns()
        words: list[str] = []
        size = 0
        while size < MAX_SEARCH_TEXT_LENGTH - 20:
            words.append(f"w{len(words)}")
            size += len(words[-1]) + 1
        text = " ".join(words).ljust(MAX_SEARCH_TEXT_LENGTH, "z")
        assert len(text) == MAX_SEARCH_TEXT_LENGTH
        await contract.save(ns, make_entry(key="big", search_text=text))
        await contract.save(ns, make_entry(key="small", search_text=f"w7 {words[-1]}"))
        async with contract.unit_of_work() as uow:
            # As sets: how document length weighs differs between stores.
            assert set(_keys(await uow.search(ns, f"{words[-1]} w0"))) == {"big", "small"}
            assert _keys(await uow.search(ns, "w0")) == ["big"]
