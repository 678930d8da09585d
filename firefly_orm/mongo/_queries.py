"""The reads a :class:`~firefly_orm.mongo.MongoDBStore` runs: ordered finds and word searches.

Both return live entries only.

Finds (:func:`find_live`)
    The server gets the query as it is (namespace, key, key range, user) and
    the expired entries are dropped here (:func:`~firefly_orm.mongo._document.is_live`,
    microsecond-exact): a condition on ``expires_at`` (which must match a
    missing field, ``$not``) makes SecantusDB, the test server, scan the whole
    collection instead of the ``(namespace, ...)`` index, so a lookup in one
    conversation would cost the size of every conversation.  When expired
    entries took places under the limit, the window is read again, twice as
    large each time (the TTL index removes expired entries within about a
    minute, so there are few).
Searches (:func:`search_live`)
    The live filter is the server's (:func:`~firefly_orm.mongo._document.live_filter`,
    one millisecond coarse), in the pipeline's second ``$match``; the entries
    expiring within the reading millisecond are dropped here.

Full-text search (:func:`search_live`)
    MongoDB's own text index (``$text``) is not used: SecantusDB, the server
    the test suite runs on, refuses text indexes ("text indexes are not
    supported by SecantusDB") and the ``$text`` operator, and a code path no
    test runs is not one this project ships.  Each document instead stores
    the words of its ``search_text`` (:data:`~firefly_orm.mongo._document.SEARCH_WORDS`,
    split by :func:`firefly_orm._search.text_terms`), and a search is one
    aggregation on the multikey index ``(namespace, search_words)``::

        $match  {namespace, search_words: {$in: <the query's words>}}
        $match  {user_id, key range, importance (those given), live}
        $set    {_firefly_matched: size of setIntersection(search_words, words)}
        $project {search_words: 0}
        $sort   {_firefly_matched: -1, importance: -1, created_at: -1,
                 created_at_us: -1, entry_id: -1}
        $limit  <limit>

    so the server reads the documents that hold one of the words (an index
    range per word), ranks them, and only the best ``limit`` come back.  The
    first ``$match`` is the index lookup alone on purpose: SecantusDB plans
    from the pipeline's first ``$match`` alone, and scans the collection when
    that stage has any other condition (``expires_at``'s ``$not``, ``user_id``, a key
    range; a ``hint`` makes it walk the whole index); MongoDB coalesces the
    two stages into one query and plans it with every index.  The
    query's words are the ones :func:`firefly_orm._search.query_terms` keeps
    (letters and digits): they are compared as values, never parsed, and
    several words are OR-ed (with ``$text``, quoted phrases would be AND-ed).
    The score is the share of the query's words an entry holds, the rule of
    the in-process stores (:mod:`firefly_orm._search`), so stored and staged
    results rank on one scale.  As there: no stemming, no stop words,
    ``language`` is ignored (``search_language`` is stored and returned).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

from firefly_orm._search import SearchHit, SearchRequest
from firefly_orm.entry import MemoryEntry, utcnow
from firefly_orm.mongo._document import (
    BY_TIME_NEWEST_FIRST,
    SEARCH_WORDS,
    VECTOR_FIELD,
    document_to_entry,
    is_live,
    key_prefix_filter,
    live_filter,
)
from firefly_orm.mongo._driver import Collection

__all__ = ["MATCHED", "find_live", "search_filters", "search_live", "search_pipeline"]

T = TypeVar("T")

#: The computed field holding how many of the query's words a document has.
MATCHED = "_firefly_matched"
#: Stored entries are read without their words (they can be as long as the text) and
#: without their vector (only a vector search reads it).
_WITHOUT_WORDS = {SEARCH_WORDS: 0, VECTOR_FIELD: 0}


async def _read_live(
    fetch: Callable[[datetime, int | None], Awaitable[list[T]]],
    entry_of: Callable[[T], MemoryEntry],
    limit: int | None,
) -> list[T]:
    """``fetch(now, window)`` with the entries expired at ``now`` dropped, cut to ``limit``.

    ``limit`` must be ``None`` or positive.
    """
    now = utcnow()
    wanted = limit
    while True:
        found = await fetch(now, wanted)
        live = [item for item in found if is_live(entry_of(item), now)]
        if limit is None or wanted is None or len(found) < wanted or len(live) >= limit:
            return live if limit is None else live[:limit]
        # Expired entries took places in the window: read a larger one (at
        # least twice as large, so a run of expired entries costs a few reads).
        wanted = max(2 * wanted, wanted + limit - len(live))


async def find_live(
    col: Collection,
    query: dict[str, Any],
    order: list[tuple[str, int]] | None,
    limit: int | None,
) -> list[MemoryEntry]:
    """Live entries matching ``query``, in ``order``, at most ``limit`` (positive or None).

    ``query`` goes to the server as it is; expired entries are dropped here.
    """

    async def fetch(now: datetime, wanted: int | None) -> list[MemoryEntry]:
        cursor = col.find(query, _WITHOUT_WORDS)
        if order is not None:
            cursor = cursor.sort(order)
        if wanted is not None:
            cursor = cursor.limit(wanted)
        return [document_to_entry(d) async for d in cursor]

    return await _read_live(fetch, lambda entry: entry, limit)


def search_filters(request: SearchRequest, now: datetime) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two ``$match`` filters of a search: the index lookup, then the rest.

    ``(namespace and words, user / key prefix / importance / live)``.
    """
    lookup: dict[str, Any] = {
        "namespace": request.namespace,
        SEARCH_WORDS: {"$in": list(request.terms)},
    }
    query: dict[str, Any] = {}
    if request.user_id is not None:
        query["user_id"] = request.user_id
    if request.key_prefix is not None:
        query.update(key_prefix_filter(request.key_prefix))
    if request.min_importance is not None:
        query["importance"] = {"$gte": request.min_importance}
    query.update(live_filter(now))
    return lookup, query


def search_pipeline(
    request: SearchRequest, now: datetime, limit: int | None
) -> list[dict[str, Any]]:
    """The aggregation of a search (see the module docstring), best first, at most ``limit``."""
    words = {"$literal": list(request.terms)}
    order = {MATCHED: -1, "importance": -1, **dict(BY_TIME_NEWEST_FIRST)}
    lookup, query = search_filters(request, now)
    pipeline: list[dict[str, Any]] = [
        {"$match": lookup},
        {"$match": query},
        {"$set": {MATCHED: {"$size": {"$setIntersection": [f"${SEARCH_WORDS}", words]}}}},
        {"$project": _WITHOUT_WORDS},
        {"$sort": order},
    ]
    if limit is not None:
        pipeline.append({"$limit": limit})
    return pipeline


async def search_live(col: Collection, request: SearchRequest) -> list[SearchHit]:
    """The stored live matches of ``request``, best first, cut to its limit.

    ``request`` must not be :attr:`~firefly_orm._search.SearchRequest.finds_nothing`.
    """
    terms = len(request.terms)

    async def fetch(now: datetime, wanted: int | None) -> list[SearchHit]:
        cursor = await col.aggregate(search_pipeline(request, now, wanted))
        # The score of the tokenised match (firefly_orm._search): the share of
        # the query's words the entry holds.
        return [SearchHit(document_to_entry(d), int(d[MATCHED]) / terms) async for d in cursor]

    return await _read_live(fetch, lambda hit: hit.entry, request.limit)
