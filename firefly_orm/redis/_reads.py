"""The reads of a :class:`~firefly_orm.redis.RedisStore`: Lua scripts, one consistent page each.

A list read walks one sorted-set index (:mod:`firefly_orm.redis._layout`) from
one end of a range and fetches the body of each member's entry, in one script:
Redis runs a script atomically, so a page is one snapshot, read in one round
trip.  A page looks at most :data:`PAGE` members (a long read does not hold the
server); the next page starts after the last member seen, so entries written
meanwhile are neither skipped nor seen twice by position.  Members whose body
has expired are passed over (Redis dropped the body at ``expires_at``).

Full-text search is one script too: the union of the query words' id sets
(``ZUNION ... WITHSCORES`` counts how many of the words each entry holds),
then each candidate's body.  Its cost follows the entries holding a query
word, not the size of the namespace.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from redis import Redis

from firefly_orm._search import SearchHit, SearchRequest, best_hits, tokenised_score
from firefly_orm.entry import MemoryEntry
from firefly_orm.redis._layout import Keys, as_bytes, decode_entry

__all__ = ["PAGE", "Reader"]

#: The most index members one read script looks at.
PAGE = 256

_WINDOW = """
local key, lo, hi = KEYS[1], ARGV[1], ARGV[2]
local rev = ARGV[3] == '1'
local want = tonumber(ARGV[4])
local budget = tonumber(ARGV[5])
local body = ARGV[6]
local page
if rev then
  page = redis.call('ZREVRANGEBYLEX', key, hi, lo, 'LIMIT', 0, budget)
else
  page = redis.call('ZRANGEBYLEX', key, lo, hi, 'LIMIT', 0, budget)
end
local out = {'', #page < budget and 1 or 0}
for i = 1, #page do
  local id = string.match(page[i], '%z([^%z]*)$')
  local value = redis.call('GET', body .. id)
  if value then
    out[#out + 1] = value
    if want >= 0 and #out - 2 >= want then
      out[1] = page[i]
      out[2] = i == #page and out[2] or 0
      return out
    end
  end
end
if #page > 0 then out[1] = page[#page] end
return out
"""

_SEARCH = """
local args = {'ZUNION', #KEYS}
for i = 1, #KEYS do args[#args + 1] = KEYS[i] end
args[#args + 1] = 'WITHSCORES'
local found = redis.call(unpack(args))
local out = {}
for i = 1, #found, 2 do
  local value = redis.call('GET', ARGV[1] .. found[i])
  if value then
    out[#out + 1] = found[i + 1]
    out[#out + 1] = value
  end
end
return out
"""


class Reader:
    """The store's reads over one client (scripts registered once)."""

    def __init__(self, client: Redis, keys: Keys) -> None:
        self._client = client
        self._keys = keys
        self._window = client.register_script(_WINDOW)
        self._search = client.register_script(_SEARCH)

    def entry(self, namespace: str, entry_id: str) -> MemoryEntry | None:
        """The live entry with this id in ``namespace``, or ``None``."""
        raw = self._client.get(self._keys.body(entry_id))
        if raw is None:
            return None
        entry = decode_entry(as_bytes(raw))
        if entry.namespace != namespace or entry.is_expired:
            return None
        return entry

    def window(
        self, index: bytes, lo: bytes, hi: bytes, *, newest_first: bool, limit: int | None
    ) -> list[MemoryEntry]:
        """Live entries of ``index`` between ``lo`` and ``hi``, in its order, at most ``limit``."""
        if limit is not None and limit <= 0:
            return []
        found: list[MemoryEntry] = []
        seen: set[str] = set()
        for entry in self._pages(index, lo, hi, newest_first, limit):
            if entry.entry_id in seen or entry.is_expired:
                continue  # our clock says expired, the server's not yet
            seen.add(entry.entry_id)
            found.append(entry)
            if limit is not None and len(found) >= limit:
                break
        return found

    def _pages(
        self, index: bytes, lo: bytes, hi: bytes, newest_first: bool, limit: int | None
    ) -> Iterator[MemoryEntry]:
        want = -1 if limit is None else limit
        while True:
            reply: list[Any] = self._window(
                keys=[index],
                args=[lo, hi, 1 if newest_first else 0, want, PAGE, self._keys.body_prefix],
            )
            last, done, bodies = reply[0], reply[1], reply[2:]
            for body in bodies:
                yield decode_entry(body)
            if done or not last:
                return
            if newest_first:
                hi = b"(" + last
            else:
                lo = b"(" + last

    def search(self, request: SearchRequest) -> list[SearchHit]:
        """The committed matches of ``request`` (:mod:`firefly_orm._search`), best first, cut."""
        words = [self._keys.word(request.namespace, term) for term in request.terms]
        reply: list[Any] = self._search(keys=words, args=[self._keys.body_prefix])
        hits: list[SearchHit] = []
        for i in range(0, len(reply), 2):
            entry = decode_entry(reply[i + 1])
            if entry.namespace != request.namespace or not request.accepts(entry):
                continue
            hits.append(SearchHit(entry, tokenised_score(int(float(reply[i])), request)))
        return best_hits(hits, request.limit)
