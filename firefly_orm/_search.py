"""Full-text search over ``MemoryEntry.search_text``: the rules every store shares.

``uow.entries.search(namespace, query, limit=10, user_id=None, key_prefix=None,
min_importance=None, language=None)`` returns :class:`SearchHit` ``(entry,
score)`` pairs: the live entries of ``namespace`` whose ``search_text`` matches
``query``, best first.

The query is text, never syntax
    It is split into words (:func:`query_terms`): maximal runs of letters and
    digits (``str.isalnum``, plus combining diacritical marks), lower-cased.
    Everything else separates words and is otherwise ignored: quotes,
    ``- * ^ : ( ) & | !``, column filters such as ``col:term`` (two words,
    ``col`` and ``term``), NUL characters.  ``OR``, ``AND``, ``NOT`` and
    ``NEAR`` are searched as the words they are.  Each store receives only
    these words, quoted (SQLite FTS5: ``"w1" OR "w2"``; PostgreSQL:
    ``websearch_to_tsquery(language, '"w1" or "w2"')``), so no user text ever
    reaches a query parser.  The first :data:`MAX_QUERY_TERMS` distinct words
    are used; words longer than :data:`MAX_TERM_LENGTH` characters are dropped.
    A query without words (empty, blank, only punctuation) finds nothing: ``[]``.

Case
    Words are split from the original text, then each is lower-cased on its
    own (:func:`fold_word`), in queries and in stored text alike.  The SQL
    stores receive each word both as the query spelled it and lower-cased
    (:attr:`SearchRequest.spellings`): the database folds the spelling with
    the rules it indexed the stored text with, so a word always finds itself,
    including the characters whose lower case changes length or differs
    between Python and the database (``"İ"``: Python ``"i̇"``, SQLite's
    ``unicode61`` ``"İ"``, PostgreSQL ``"i"`` under a libc locale).  They also
    receive each run of letters, digits and combining marks that the word rule
    splits (Devanagari vowel signs, Arabic harakat: marks beyond U+0300-U+036F),
    as SQLite's tokenizer keeps such a run whole.

Matching and order
    An entry matches when its ``search_text`` contains at least one of the
    words (the words are OR-ed; entries with more of them score higher).
    Results are ordered by score (descending), then ``importance``, then
    ``created_at`` and ``entry_id`` (newest first), and cut to ``limit``
    (``None``: every match).  ``user_id``, ``key_prefix`` and
    ``min_importance`` (inclusive) filter before the cut.

Scores (higher is better; compare them only within one result list)
    * SQLite: ``-bm25()`` of an FTS5 external-content table
      (``unicode61 remove_diacritics 0`` tokens), kept in sync by triggers.
    * PostgreSQL: ``ts_rank()`` against a ``tsvector`` column set by a trigger
      (migration 0007) with a GIN index; each entry is indexed with its
      ``search_language`` (stemming and stop words of that configuration) and
      the query is parsed with the ``language`` argument (default
      :data:`~firefly_orm.entry.DEFAULT_SEARCH_LANGUAGE`);
      PostgreSQL's parser keeps e-mail addresses, URLs and numbers such as
      ``1.5`` as single words.
    * :class:`~firefly_orm.store.InMemoryStore`, :class:`~firefly_orm.FileStore`,
      plain five-method stores, and the not yet committed writes of a staged
      unit of work: a simple tokenised match, score = the share of the query's
      words found among the entry's words (0 < score <= 1); no stemming, no
      stop words, ``language`` ignored.

Cost
    SQLite reads the FTS5 table first (``CROSS JOIN``), then one row per match
    by rowid; PostgreSQL's planner picks the GIN index (or, for a selective
    ``user_id``/``key_prefix`` filter, that filter's B-tree index).  Either way
    the work follows the rows holding a query word, not the size of the table.
    MongoDB stores each entry's words (``search_words``) and runs one
    aggregation on the multikey ``(namespace, search_words)`` index, scored
    like the in-process stores (the test server, SecantusDB, has no ``$text``).
    The in-process stores keep an inverted index per namespace (words to
    entries); a plain five-method store loads the namespace.
"""

from __future__ import annotations

import functools
import heapq
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, TypedDict

from firefly_orm.entry import (
    DEFAULT_SEARCH_LANGUAGE,
    MemoryEntry,
    validate_namespace,
    validate_search_language,
    validate_user_id,
)
from firefly_orm.entry._rules import is_number
from firefly_orm.errors import EntryValidationError

__all__ = [
    "MAX_QUERY_TERMS",
    "MAX_TERM_LENGTH",
    "PG_SEARCH_FUNCTION",
    "PG_SEARCH_INDEX",
    "PG_SEARCH_TRIGGER_FUNCTION",
    "PG_SEARCH_VECTOR",
    "SQLITE_FTS_CONTENT_VIEW",
    "SQLITE_FTS_TABLE",
    "SQLITE_FTS_TABLES",
    "SearchHit",
    "SearchOptions",
    "SearchRequest",
    "TermIndex",
    "best_hits",
    "check_min_importance",
    "fts5_query",
    "is_search_index_object",
    "match_entries",
    "fold_word",
    "query_terms",
    "query_words",
    "text_terms",
    "tokenised_score",
    "websearch_query",
]

#: The most distinct words of a query that are searched (the first ones).
MAX_QUERY_TERMS = 32
#: Longer words are dropped from queries (no store could match them consistently:
#: PostgreSQL does not index words over 2047 bytes).
MAX_TERM_LENGTH = 100

#: SQLite: the FTS5 external-content table over ``memory_entries.search_text``
#: (only rows whose ``search_text`` is not NULL, since migration 0007).
SQLITE_FTS_TABLE = "memory_entries_fts"
#: SQLite: that table and the shadow tables FTS5 keeps for it.
SQLITE_FTS_TABLES = frozenset(
    {SQLITE_FTS_TABLE, *(f"{SQLITE_FTS_TABLE}_{s}" for s in ("data", "idx", "docsize", "config"))}
)
#: SQLite: the view of the rows with ``search_text`` that is the FTS5 table's content.
SQLITE_FTS_CONTENT_VIEW = "memory_entries_searchable"
#: PostgreSQL: the ``tsvector`` column (not in the SQLAlchemy model), filled by triggers.
PG_SEARCH_VECTOR = "search_vector"
#: PostgreSQL: the GIN index on :data:`PG_SEARCH_VECTOR`.
PG_SEARCH_INDEX = "ix_memory_entries_search"
#: PostgreSQL: ``(language text, text text) -> tsvector``, the vector of a row's text.
PG_SEARCH_FUNCTION = "firefly_orm_search_vector"
#: PostgreSQL: the trigger function that sets :data:`PG_SEARCH_VECTOR` with
#: :data:`PG_SEARCH_FUNCTION` (rows without ``search_text`` never call it).
PG_SEARCH_TRIGGER_FUNCTION = "firefly_orm_search_vector_fill"

# A word: letters and digits, with combining diacritical marks kept inside
# (as SQLite's unicode61 tokenizer keeps them).
_WORD = re.compile(r"(?:[^\W_]|[\u0300-\u036f])+")


def is_search_index_object(name: str | None, type_: str) -> bool:
    """Whether a reflected database object is part of the search index (not in the model).

    The SQLite FTS5 tables, and PostgreSQL's ``tsvector`` column and
    its GIN index; Alembic comparisons leave them out
    (:func:`firefly_orm.migrate.include_name`).
    """
    if type_ == "table":
        return name in SQLITE_FTS_TABLES
    if type_ == "column":
        return name == PG_SEARCH_VECTOR
    if type_ == "index":
        return name == PG_SEARCH_INDEX
    return False


# --------------------------------------------------------------------------- words


def fold_word(word: str) -> str:
    """The in-process form of one word: ``word.lower()``, the word on its own.

    Words are split from the original text first and lower-cased one by one,
    so a word folds the same wherever it stands: lower-casing a whole text
    picks a Greek capital sigma's form from the characters around it
    (``"ΔΣ.Δ"`` gives a small sigma, ``"ΔΣ"`` alone ``ς``).  A dotted capital I
    (``"İ"``) becomes ``"i̇"`` (``i`` and a combining dot above) on both sides.
    """
    return word.lower()


def _words(text: str) -> Iterable[tuple[str, str]]:
    """``(spelling, folded word)`` of each word of ``text`` kept for search, in text order."""
    for match in _WORD.finditer(text):
        spelling = match.group()
        word = fold_word(spelling)
        if len(word) <= MAX_TERM_LENGTH:
            yield spelling, word


@functools.cache
def _database_word() -> re.Pattern[str]:
    """A word as a database's tokenizer may see it: letters and digits with every combining mark.

    SQLite's ``unicode61`` keeps combining marks (the vowel signs of
    Devanagari, Arabic harakat, ...) inside a token, where :data:`_WORD`
    keeps only U+0300-U+036F.  Built on first use (the marks of planes 0, 1
    and 14 of this Python's Unicode tables).
    """
    marks: list[str] = []
    for low, high in ((0, 0x20000), (0xE0000, 0xE1000)):
        run: list[int] = []
        for code in range(low, high):
            if unicodedata.category(chr(code))[0] == "M":
                if run and run[-1] == code - 1:
                    run[-1] = code
                else:
                    if run:
                        marks.append(_char_range(*run))
                    run = [code, code]
        if run:
            marks.append(_char_range(*run))
    return re.compile(r"(?:[^\W_]|[" + "".join(marks) + "])+")


def _char_range(low: int, high: int) -> str:
    return re.escape(chr(low)) + ("" if low == high else "-" + re.escape(chr(high)))


def query_words(query: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(terms, spellings)`` of ``query``: :func:`query_terms`, :attr:`SearchRequest.spellings`.

    The spellings are each term's first spelling in the query and the term,
    and each run of letters, digits and combining marks that :data:`_WORD`
    splits (as a database's tokenizer may keep it whole) holding a term, as
    typed and lower-cased.

    Raises:
        EntryValidationError: ``query`` is not a string.
    """
    if not isinstance(query, str):
        raise EntryValidationError("query", f"must be a string, got {type(query).__name__}")
    terms: dict[str, None] = {}
    spellings: dict[str, None] = {}
    for spelling, word in _words(query):
        if word in terms:
            continue
        terms[word] = None
        spellings[spelling] = None
        spellings[word] = None
        if len(terms) == MAX_QUERY_TERMS:
            break
    if len(spellings) < 4 * MAX_QUERY_TERMS and not query.isascii():
        for match in _database_word().finditer(query):
            run = match.group()
            if (
                len(run) > MAX_TERM_LENGTH
                or _WORD.fullmatch(run)  # a word of its own: its term is sent already
                or not any(w in terms for _, w in _words(run))
            ):
                continue
            spellings[run] = None
            spellings[fold_word(run)] = None
            if len(spellings) >= 4 * MAX_QUERY_TERMS:
                break
    return tuple(terms), tuple(spellings)


def query_terms(query: str) -> tuple[str, ...]:
    """The distinct words searched for ``query`` (see the module docstring), in query order.

    Raises:
        EntryValidationError: ``query`` is not a string.
    """
    return query_words(query)[0]


def text_terms(text: str | None) -> frozenset[str]:
    """The distinct words of an entry's ``search_text`` (longer words than any query's dropped)."""
    if not text:
        return frozenset()
    return frozenset(word for _, word in _words(text))


def fts5_query(terms: Iterable[str]) -> str:
    """An FTS5 ``MATCH`` expression: each word a quoted string, OR-ed."""
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def websearch_query(terms: Iterable[str]) -> str:
    """Text for ``websearch_to_tsquery``: each word quoted (so ``or`` stays a word), OR-ed."""
    return " or ".join('"' + term.replace('"', " ") + '"' for term in terms)


# --------------------------------------------------------------------------- requests


class SearchOptions(TypedDict, total=False):
    """The options of a full-text search (:meth:`~firefly_orm.protocols.EntryRepository.search`).

    The rules (query words, matching, order, scores per store) are in
    :mod:`firefly_orm._search`.

    Attributes:
        limit: At most this many results, the best ones (default 10; ``None``:
            every match; ``0``: none).
        user_id: Only entries of this user (``None``, the default: every entry).
        key_prefix: Only entries whose key starts with it (``None``: any entry,
            with or without a key).
        min_importance: Only entries with at least this importance (``None``: any).
        language: The PostgreSQL text-search configuration the query is parsed
            with (default ``"simple"``); use the ``search_language`` the
            entries were written with.  Other stores ignore it.
    """

    limit: int | None
    user_id: str | None
    key_prefix: str | None
    min_importance: float | None
    language: str | None


class SearchHit(NamedTuple):
    """One search result: the entry and its relevance (higher is better)."""

    entry: MemoryEntry
    score: float


def check_min_importance(min_importance: float | None) -> float | None:
    """The ``min_importance`` filter of a search as a float (``None``: any importance).

    Raises:
        EntryValidationError: ``min_importance`` is not a number or ``None``.
    """
    if min_importance is not None and not is_number(min_importance):
        raise EntryValidationError(
            "min_importance", f"must be a number or None, got {min_importance!r}"
        )
    return None if min_importance is None else float(min_importance)


@dataclass(frozen=True)
class SearchRequest:
    """A validated search: what every store's ``search`` / ``read_search`` works from."""

    namespace: str
    terms: tuple[str, ...]
    limit: int | None
    user_id: str | None
    key_prefix: str | None
    min_importance: float | None
    language: str
    #: The words as a database that folds case itself receives them: each
    #: term's first spelling in the query and its folded form
    #: (:func:`query_words`).  The database folds the spelling exactly as it
    #: folded the stored text (SQLite's ``unicode61`` leaves ``"İ"`` as it is,
    #: PostgreSQL's ``lower()`` follows the database's locale), so a word is
    #: found by itself whatever either side makes of its capitals.
    spellings: tuple[str, ...] = ()

    @classmethod
    def build(
        cls,
        namespace: str,
        query: str,
        *,
        limit: int | None = 10,
        user_id: str | None = None,
        key_prefix: str | None = None,
        min_importance: float | None = None,
        language: str | None = None,
    ) -> SearchRequest:
        """Validate the arguments of a search (raise :class:`EntryValidationError`)."""
        validate_namespace(namespace)
        terms, spellings = query_words(query)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise EntryValidationError("limit", f"must be an integer or None, got {limit!r}")
        if limit is not None and limit < 0:
            raise EntryValidationError("limit", f"must not be negative, got {limit}")
        if user_id is not None:
            validate_user_id(user_id)
        if key_prefix is not None and (not isinstance(key_prefix, str) or "\x00" in key_prefix):
            raise EntryValidationError("key_prefix", "must be a string without NUL characters")
        floor = check_min_importance(min_importance)
        if language is not None:
            validate_search_language(language, field="language")
        return cls(
            namespace=namespace,
            terms=terms,
            limit=limit,
            user_id=user_id,
            key_prefix=key_prefix,
            min_importance=floor,
            language=language or DEFAULT_SEARCH_LANGUAGE,
            spellings=spellings,
        )

    @property
    def database_words(self) -> tuple[str, ...]:
        """The words a database's own text index is asked for (:attr:`spellings`)."""
        return self.spellings or self.terms

    @property
    def finds_nothing(self) -> bool:
        """True when the answer is ``[]`` without asking the store (no words, or limit 0)."""
        return not self.terms or self.limit == 0

    def accepts(self, entry: MemoryEntry) -> bool:
        """Whether ``entry`` passes the filters: live, user, key prefix, importance."""
        return self.admits(
            user_id=entry.user_id,
            key=entry.key,
            importance=entry.importance,
            expired=entry.is_expired,
        )

    def admits(
        self, *, user_id: str | None, key: str | None, importance: float, expired: bool
    ) -> bool:
        """The filters of :meth:`accepts`, over an entry's fields (a store's packed copy)."""
        if self.user_id is not None and user_id != self.user_id:
            return False
        if self.key_prefix is not None and (key is None or not key.startswith(self.key_prefix)):
            return False
        if self.min_importance is not None and importance < self.min_importance:
            return False
        return not expired

    def options(self, *, limit: int | None) -> SearchOptions:
        """The keyword arguments that repeat this search with another ``limit``."""
        return {
            "limit": limit,
            "user_id": self.user_id,
            "key_prefix": self.key_prefix,
            "min_importance": self.min_importance,
            "language": self.language,
        }


def _rank(hit: SearchHit) -> tuple[float, float, Any, str]:
    entry = hit.entry
    return (hit.score, entry.importance, entry.created_at, entry.entry_id)


def best_hits(hits: Iterable[SearchHit], limit: int | None) -> list[SearchHit]:
    """``hits`` best first (score, importance, created_at, entry_id: all descending), cut."""
    if limit is None:
        return sorted(hits, key=_rank, reverse=True)
    return heapq.nlargest(limit, hits, key=_rank)


def _score(matched: int, request: SearchRequest) -> float:
    return matched / len(request.terms)


def tokenised_score(matched: int, request: SearchRequest) -> float:
    """The score of the tokenised match: the share of the query's words an entry holds."""
    return _score(matched, request)


def match_entries(entries: Iterable[MemoryEntry], request: SearchRequest) -> list[SearchHit]:
    """The tokenised match over ``entries`` (each tokenised now), best first, cut to the limit.

    The entries are not copied.
    """
    wanted = set(request.terms)
    hits: list[SearchHit] = []
    for entry in entries:
        if entry.search_text is None or not request.accepts(entry):
            continue
        matched = len(wanted & text_terms(entry.search_text))
        if matched:
            hits.append(SearchHit(entry, _score(matched, request)))
    return best_hits(hits, request.limit)


class TermIndex:
    """An inverted index ``word -> entry ids`` of the entries of one namespace.

    The in-process stores keep one per namespace, so a search visits only the
    entries that contain one of the query's words.
    """

    def __init__(self) -> None:
        self._postings: dict[str, set[str]] = {}
        self._terms: dict[str, frozenset[str]] = {}

    def __len__(self) -> int:
        return len(self._terms)

    def add(self, entry_id: str, text: str | None) -> None:
        """Index ``text`` for ``entry_id`` (replacing what was indexed for it)."""
        self.remove(entry_id)
        terms = text_terms(text)
        if not terms:
            return
        self._terms[entry_id] = terms
        for term in terms:
            self._postings.setdefault(term, set()).add(entry_id)

    def remove(self, entry_id: str) -> None:
        """Forget ``entry_id`` (no error if it was not indexed)."""
        terms = self._terms.pop(entry_id, None)
        if terms is None:
            return
        for term in terms:
            ids = self._postings[term]
            ids.discard(entry_id)
            if not ids:
                del self._postings[term]

    def clear(self) -> None:
        """Forget every entry."""
        self._postings.clear()
        self._terms.clear()

    def counts(self, terms: Iterable[str]) -> dict[str, int]:
        """``entry id -> how many of terms it holds``, for the entries holding any."""
        counts: dict[str, int] = {}
        for term in terms:
            for entry_id in self._postings.get(term, ()):
                counts[entry_id] = counts.get(entry_id, 0) + 1
        return counts

    def hits(self, entries: Mapping[str, MemoryEntry], request: SearchRequest) -> list[SearchHit]:
        """The matches among ``entries`` (id -> entry), best first, cut (entries not copied)."""
        counts = self.counts(request.terms)
        found: list[SearchHit] = []
        for entry_id, matched in counts.items():
            entry = entries.get(entry_id)
            if entry is not None and request.accepts(entry):
                found.append(SearchHit(entry, _score(matched, request)))
        return best_hits(found, request.limit)
