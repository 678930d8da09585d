"""The unit-of-work half of the contract suite (mixed into :class:`StoreContract`).

Every test drives the unit of work that :func:`firefly_orm.uow.unit_of_work_for`
/ :func:`~firefly_orm.uow.async_unit_of_work_for` give for the store: all or
nothing, reads of its own writes, ``expected_version`` preconditions; and,
through :mod:`firefly_orm.testing._search_contract`, full-text search.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from firefly_orm.entry import MemoryEntry, utcnow
from firefly_orm.errors import ConcurrencyError, EntryValidationError, StoreError
from firefly_orm.protocols import ListOptions
from firefly_orm.testing._drivers import StoreDriver
from firefly_orm.testing._samples import ids_of, in_past, make_entry, to_ms
from firefly_orm.testing._search_contract import SearchContract

__all__ = ["UnitOfWorkContract"]


async def _refused_with_bystander(
    contract: StoreDriver, ns: str, entry: MemoryEntry, expected_version: int
) -> None:
    """A unit of work saving a bystander, then ``entry`` at a wrong ``expected_version``.

    It must raise :class:`~firefly_orm.errors.ConcurrencyError` on commit and
    write nothing: the bystander is not stored either.
    """
    with pytest.raises(ConcurrencyError):
        async with contract.unit_of_work() as uow:
            await uow.save(ns, make_entry(key="bystander"))
            await uow.save(ns, entry, expected_version=expected_version)
            await uow.commit()
    assert await contract.load_by_key(ns, "bystander") is None


class UnitOfWorkContract(SearchContract):
    """Unit-of-work tests; they use the ``contract`` fixture of :class:`StoreContract`.

    The full-text search tests (:class:`~firefly_orm.testing._search_contract.SearchContract`)
    come with them.
    """

    # ------------------------------------------------------------------ unit of work

    async def test_uow_commit_applies_everything(self, contract: StoreDriver) -> None:
        ns_a, ns_b = contract.ns("a"), contract.ns("b")
        existing = make_entry(key="existing")
        await contract.save(ns_a, existing)
        await contract.save(ns_b, make_entry(content="old-b"))
        first, second, fresh_b = (
            make_entry(key="one"),
            make_entry(key="two"),
            make_entry(content="new-b"),
        )
        async with contract.unit_of_work() as uow:
            await uow.save(ns_a, first)
            await uow.save(ns_a, second)
            await uow.delete(ns_a, existing.entry_id)
            await uow.clear(ns_b)
            await uow.save(ns_b, fresh_b)
            await uow.commit()
        assert ids_of(await contract.load(ns_a)) == ids_of([first, second])
        assert [e.content for e in await contract.load(ns_b)] == ["new-b"]
        one = await contract.load_by_key(ns_a, "one")
        assert one is not None and one.version == 1

    async def test_uow_without_commit_writes_nothing(self, contract: StoreDriver) -> None:
        ns_a, ns_b = contract.ns("a"), contract.ns("b")
        existing, in_b = make_entry(content="a"), make_entry(content="b")
        await contract.save(ns_a, existing)
        await contract.save(ns_b, in_b)
        async with contract.unit_of_work() as uow:
            await uow.save(ns_a, make_entry(content="staged"))
            await uow.save(ns_a, existing.copy_entry(content="changed"))
            await uow.clear(ns_b)
        [stored] = await contract.load(ns_a)
        assert (stored.content, stored.version) == ("a", 1)
        assert ids_of(await contract.load(ns_b)) == [in_b.entry_id]

    async def test_uow_error_rolls_back(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        existing = make_entry(content="a")
        await contract.save(ns, existing)

        class Boom(Exception):
            pass

        with pytest.raises(Boom):
            async with contract.unit_of_work() as uow:
                await uow.save(ns, make_entry(content="staged"))
                await uow.delete(ns, existing.entry_id)
                raise Boom
        assert ids_of(await contract.load(ns)) == [existing.entry_id]

    async def test_uow_reads_its_own_writes(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        existing = make_entry(key="existing", content="x")
        await contract.save(ns, existing)
        staged = make_entry(key="staged", content="y")
        async with contract.unit_of_work() as uow:
            await uow.save(ns, staged)
            got = await uow.get(ns, staged.entry_id)
            assert got is not None and got.content == "y"
            by_key = await uow.get_by_key(ns, "staged")
            assert by_key is not None and by_key.entry_id == staged.entry_id
            assert ids_of(await uow.list(ns)) == ids_of([existing, staged])
            # Not visible outside before commit.
            assert ids_of(await contract.load(ns)) == [existing.entry_id]
            await uow.delete(ns, existing.entry_id)
            assert await uow.get(ns, existing.entry_id) is None
            assert await uow.get_by_key(ns, "existing") is None
            await uow.clear(ns)
            assert await uow.list(ns) == []
            after_clear = make_entry(key="after", content="z")
            await uow.save(ns, after_clear)
            assert ids_of(await uow.list(ns)) == [after_clear.entry_id]
            await uow.commit()
        assert [e.content for e in await contract.load(ns)] == ["z"]

    async def test_uow_repository_list_and_get(self, contract: StoreDriver) -> None:
        ns, other = contract.ns("a"), contract.ns("b")
        base = to_ms(utcnow() - timedelta(minutes=10))
        entries = [
            make_entry(key=key, created_at=base + timedelta(seconds=i))
            for i, key in enumerate(["turn:2", "turn:1", "head", "turn:3", None])
        ]
        entries.append(make_entry(key="turn:0", expires_at=in_past()))
        for entry in entries:
            await contract.save(ns, entry)
        elsewhere = make_entry(key="turn:9")
        await contract.save(other, elsewhere)
        live = entries[:5]
        async with contract.unit_of_work() as uow:
            assert ids_of(await uow.list(ns)) == ids_of(live)
            assert ids_of(await uow.list(ns, newest_first=True)) == ids_of(reversed(live))
            assert ids_of(await uow.list(ns, limit=2)) == ids_of(live[:2])
            assert ids_of(await uow.list(ns, newest_first=True, limit=2)) == ids_of(live[:-3:-1])
            by_key = await uow.list(ns, key_prefix="turn:")
            assert [e.key for e in by_key] == ["turn:1", "turn:2", "turn:3"]
            assert [e.key for e in await uow.list(ns, key_prefix="turn:", limit=1)] == ["turn:1"]
            assert await uow.get(ns, elsewhere.entry_id) is None
            assert await uow.get(ns, entries[5].entry_id) is None  # expired
            assert await uow.get_by_key(ns, "turn:0") is None
            got = await uow.get(ns, entries[2].entry_id)
            assert got is not None and got.key == "head"
            await uow.delete(ns, [entries[0].entry_id, entries[1].entry_id])
            await uow.commit()
        assert ids_of(await contract.load(ns)) == ids_of(live[2:])

    async def test_uow_list_contents_matches_list(self, contract: StoreDriver) -> None:
        ns, other = contract.ns("a"), contract.ns("b")
        base = to_ms(utcnow() - timedelta(minutes=10))
        keys = ["turn:2", "turn:1", "head", "turn:3", None]
        contents: list[Any] = [{"n": 0}, [1, "one"], "two", 3.5, None]
        entries = [
            make_entry(key=key, content=content, created_at=base + timedelta(seconds=i))
            for i, (key, content) in enumerate(zip(keys, contents, strict=True))
        ]
        entries.append(make_entry(key="turn:0", content="expired", expires_at=in_past()))
        for entry in entries:
            await contract.save(ns, entry)
        await contract.save(other, make_entry(key="turn:9", content="elsewhere"))
        cases: list[tuple[ListOptions, list[Any]]] = [
            ({}, contents),
            ({"newest_first": True}, contents[::-1]),
            ({"limit": 2}, contents[:2]),
            ({"newest_first": True, "limit": 2}, contents[:-3:-1]),
            ({"limit": 0}, []),
            ({"key_prefix": "turn:"}, [[1, "one"], {"n": 0}, 3.5]),
            ({"key_prefix": "turn:", "newest_first": True, "limit": 2}, [3.5, {"n": 0}]),
            ({"key_prefix": "nothing"}, []),
        ]
        async with contract.unit_of_work() as uow:
            for options, expected in cases:
                listed = [e.content for e in await uow.list(ns, **options)]
                assert listed == expected, options
                assert await uow.list_contents(ns, **options) == expected, options

    async def test_uow_list_contents_sees_staged_writes(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        base = to_ms(utcnow() - timedelta(minutes=10))
        stored = [
            make_entry(
                key=f"turn:{i}", content=f"stored {i}", created_at=base + timedelta(seconds=i)
            )
            for i in range(3)
        ]
        for entry in stored:
            await contract.save(ns, entry)
        async with contract.unit_of_work() as uow:
            await uow.save(
                ns,
                make_entry(key="turn:3", content="staged", created_at=base + timedelta(seconds=3)),
            )
            await uow.save(ns, stored[1].copy_entry(content="changed"))
            await uow.delete(ns, stored[0].entry_id)
            await uow.save(
                ns, make_entry(key="head", content="head", created_at=base + timedelta(seconds=4))
            )
            assert await uow.list_contents(ns) == ["changed", "stored 2", "staged", "head"]
            assert await uow.list_contents(ns, key_prefix="turn:", newest_first=True, limit=2) == [
                "staged",
                "stored 2",
            ]
            assert await uow.list_contents(ns, limit=1) == ["changed"]
            await uow.clear(ns)
            assert await uow.list_contents(ns) == []
            # Not visible outside before commit.
            assert [e.content for e in await contract.load(ns)] == [
                "stored 0",
                "stored 1",
                "stored 2",
            ]

    async def test_uow_list_by_user(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        base = to_ms(utcnow() - timedelta(minutes=10))
        owners = ["ann", "bob", None, "ann", "ann"]
        entries = [
            make_entry(
                key=f"c:{i}", content=i, user_id=owner, created_at=base + timedelta(seconds=i)
            )
            for i, owner in enumerate(owners)
        ]
        for entry in entries:
            await contract.save(ns, entry)
        [loaded] = [e for e in await contract.load(ns) if e.entry_id == entries[1].entry_id]
        assert loaded.user_id == "bob"
        async with contract.unit_of_work() as uow:
            assert await uow.list_contents(ns, user_id="ann") == [0, 3, 4]
            assert await uow.list_contents(ns, user_id="ann", newest_first=True, limit=2) == [4, 3]
            assert await uow.list_contents(ns, user_id="ann", key_prefix="c:", limit=1) == [0]
            assert await uow.list_contents(ns, user_id="nobody") == []
            # Staged writes are filtered too: a new entry of ann, one moved to bob.
            await uow.save(ns, make_entry(key="c:5", content=5, user_id="ann"))
            await uow.save(ns, entries[3].copy_entry(user_id="bob"))
            assert await uow.list_contents(ns, user_id="ann") == [0, 4, 5]
            assert ids_of(await uow.list(ns, user_id="bob")) == [
                entries[1].entry_id,
                entries[3].entry_id,
            ]
            await uow.commit()
        async with contract.unit_of_work() as uow:
            assert await uow.list_contents(ns, user_id="ann") == [0, 4, 5]

    async def test_uow_erase_user_removes_every_row_of_that_user_only(
        self, contract: StoreDriver
    ) -> None:
        first, second = contract.ns("a"), contract.ns("b")
        ann_rows = [
            make_entry(key="k1", user_id="ann"),
            make_entry(key="k2", user_id="ann", expires_at=in_past()),
        ]
        for entry in ann_rows:
            await contract.save(first, entry)
        await contract.save(second, make_entry(key="k3", user_id="ann"))
        kept = [make_entry(key="k4", user_id="bob"), make_entry(key="k5")]
        for entry in kept:
            await contract.save(first, entry)
        if not contract.can_erase_users():  # a plain five-method store cannot find them
            with pytest.raises(StoreError, match="nothing was written"):
                async with contract.unit_of_work() as uow:
                    await uow.save(first, make_entry(key="k6"))
                    await uow.erase_user("ann")
                    await uow.commit()
            assert len(await contract.load(first)) == 3
            return
        async with contract.unit_of_work() as uow:
            await uow.save(first, make_entry(key="staged-before", user_id="ann"))
            await uow.erase_user("ann")
            assert await uow.get_by_key(first, "k1") is None
            assert ids_of(await uow.list(first)) == ids_of(kept)
            assert await uow.list(second) == []
            later = make_entry(key="after", user_id="ann")
            await uow.save(second, later)  # written after the erase: kept
            await uow.commit()
        assert ids_of(await contract.load(first)) == ids_of(kept)
        assert ids_of(await contract.load(second)) == [later.entry_id]

    @pytest.mark.parametrize("user_id", ["", "a\x00b", "x" * 256, 7])
    async def test_bad_user_id_is_refused_and_nothing_written(
        self, contract: StoreDriver, user_id: Any
    ) -> None:
        ns = contract.ns()
        with pytest.raises(EntryValidationError, match="user_id"):
            await contract.save(ns, make_entry(user_id=user_id))
        assert await contract.load(ns) == []

    @pytest.mark.parametrize(
        ("prefix", "expected"),
        [
            ("k\ud7ff", ["k\ud7ff", "k\ud7ffa", "k\ud7ff\U0010ffff"]),
            ("k\U0010ffff", ["k\U0010ffff", "k\U0010ffffz"]),
            ("k\uffff", ["k\uffff"]),
        ],
        ids=["d7ff", "10ffff", "ffff"],
    )
    async def test_uow_key_prefix_at_code_point_edges(
        self, contract: StoreDriver, prefix: str, expected: list[str]
    ) -> None:
        # Keys compare by code point (UTF-8 bytes): U+D7FF is followed by
        # U+E000 (no surrogates in text) and nothing follows U+10FFFF.
        ns = contract.ns()
        keys = [
            "k",
            "k\ud7fe",
            "k\ud7ff",
            "k\ud7ffa",
            "k\ud7ff\U0010ffff",
            "k\ue000",
            "k\uffff",
            "k\U00010000",
            "k\U0010ffff",
            "k\U0010ffffz",
            "l",
        ]
        for key in keys:
            await contract.save(ns, make_entry(key=key, content=key))
        async with contract.unit_of_work() as uow:
            assert [e.key for e in await uow.list(ns, key_prefix=prefix)] == expected
            assert (
                await uow.list_contents(ns, key_prefix=prefix, newest_first=True) == expected[::-1]
            )

    @pytest.mark.parametrize("option", ["limt", "newest_frist", "prefix"])
    async def test_uow_list_rejects_unknown_options(
        self, contract: StoreDriver, option: str
    ) -> None:
        ns = contract.ns()
        await contract.save(ns, make_entry(key="k"))
        misspelt: dict[str, Any] = {option: 1}
        async with contract.unit_of_work() as uow:
            with pytest.raises(TypeError, match=option):
                await uow.list(ns, **misspelt)
            with pytest.raises(TypeError, match=option):
                await uow.list_contents(ns, **misspelt)

    async def test_uow_expected_version_zero_means_must_not_exist(
        self, contract: StoreDriver
    ) -> None:
        ns = contract.ns()
        entry = make_entry(key="head", content="v1")
        async with contract.unit_of_work() as uow:
            await uow.save(ns, entry, expected_version=0)
            await uow.commit()
        [stored] = await contract.load(ns)
        assert (stored.content, stored.version) == ("v1", 1)
        await _refused_with_bystander(contract, ns, entry.copy_entry(content="dup"), 0)
        [stored] = await contract.load(ns)
        assert (stored.entry_id, stored.content, stored.version) == (entry.entry_id, "v1", 1)

    async def test_uow_expected_version_must_match(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        entry = make_entry(key="head", content="v1")
        await contract.save(ns, entry)
        loaded = await contract.load_by_key(ns, "head")
        assert loaded is not None and loaded.version == 1
        async with contract.unit_of_work() as uow:
            await uow.save(ns, loaded.copy_entry(content="v2"), expected_version=1)
            await uow.commit()
        current = await contract.load_by_key(ns, "head")
        assert current is not None and (current.content, current.version) == ("v2", 2)
        # A writer still holding version 1 loses.
        await _refused_with_bystander(contract, ns, loaded.copy_entry(content="stale"), 1)
        current = await contract.load_by_key(ns, "head")
        assert current is not None and (current.content, current.version) == ("v2", 2)
        # A precondition on an entry that does not exist fails too.
        with pytest.raises(ConcurrencyError):
            async with contract.unit_of_work() as uow:
                await uow.save(ns, make_entry(key="ghost"), expected_version=3)
                await uow.commit()
        assert await contract.load_by_key(ns, "ghost") is None

    async def test_uow_versions_bump_on_write(self, contract: StoreDriver) -> None:
        ns = contract.ns()
        entry = make_entry(key="k")
        for expected in (1, 2, 3):
            async with contract.unit_of_work() as uow:
                await uow.save(ns, entry.copy_entry(content=expected))
                await uow.commit()
            found = await contract.load_by_key(ns, "k")
            assert found is not None and (found.content, found.version) == (expected, expected)
