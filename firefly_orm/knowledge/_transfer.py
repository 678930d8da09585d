"""A user's graph as JSON, and back: the ``knowledge`` section of an export file.

:func:`graph_to_json` turns the rows of :meth:`GraphRows.dump
<firefly_orm.knowledge._backend.GraphRows.dump>` into one JSON-ready object::

    {"user_id": "ann",
     "entities": [{"entity_id", "name", "entity_type", "attributes", "aliases",
                   "mentions", "created_at", "updated_at"}, ...],
     "facts": [{"fact_id", "subject_id", "predicate", "object_id", "object_value",
                "valid_from", "valid_to", "evidence", "confidence", "created_at"}, ...],
     "history": [{"action", "actor", "entity_id", "fact_id", "detail", "at"}, ...],
     "conversations": [{"conversation_id", "kind", "item_id", "first_at"}, ...]}

``conversations`` (which conversation mentioned an entity or taught a fact)
is written only when the graph has some, and optional on import, so files
written before it existed still import.

Times are ISO 8601 with their offset; ids are kept, so a fact's evidence,
validity interval and history survive the round trip.  :func:`graph_from_json`
checks all of it (every key, type, time and reference) before anything is
written, and gives back the rows to insert.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from firefly_orm.entry import validate_user_id
from firefly_orm.errors import EntryValidationError
from firefly_orm.knowledge._apply import normalize_predicate
from firefly_orm.knowledge._backend import normalize

__all__ = ["GRAPH_KEYS", "graph_from_json", "graph_to_json"]

#: The keys of one user's graph in an export file.
GRAPH_KEYS = frozenset({"user_id", "entities", "facts", "history"})
#: The optional key: the conversation scopes.
SCOPES_KEY = "conversations"
_SCOPE = ("conversation_id", "kind", "item_id")
_ENTITY = ("entity_id", "name", "entity_type", "attributes", "aliases", "mentions")
_ENTITY_TIMES = ("created_at", "updated_at")
_FACT = ("fact_id", "subject_id", "predicate", "object_id", "object_value", "evidence")
_FACT_TIMES = ("valid_from", "valid_to", "created_at")
_HISTORY = ("action", "actor", "entity_id", "fact_id", "detail")


def _time(value: Any) -> str | None:
    return None if value is None else value.isoformat()


def graph_to_json(user_id: str, rows: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The JSON-ready form of one user's dumped graph."""
    scopes = [
        {**{k: r[k] for k in _SCOPE}, "first_at": _time(r["first_at"])}
        for r in rows.get("scopes", [])
    ]
    return {
        "user_id": user_id,
        "entities": [
            {**{k: r[k] for k in _ENTITY}, **{k: _time(r[k]) for k in _ENTITY_TIMES}}
            for r in rows["entities"]
        ],
        "facts": [
            {
                **{k: r[k] for k in _FACT},
                "confidence": float(r["confidence"]),
                **{k: _time(r[k]) for k in _FACT_TIMES},
            }
            for r in rows["facts"]
        ],
        "history": [{**{k: r[k] for k in _HISTORY}, "at": _time(r["at"])} for r in rows["history"]],
        **({SCOPES_KEY: scopes} if scopes else {}),
    }


class _Reader:
    """Checks one section's values, naming the place of the first problem."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, what: str) -> EntryValidationError:
        return EntryValidationError(self.where, what)

    def row(self, raw: Any, keys: frozenset[str]) -> dict[str, Any]:
        if not isinstance(raw, dict) or set(raw) != keys:
            raise self.fail(f"give an object with exactly the keys {sorted(keys)}")
        return raw

    def text(self, value: Any, field: str, *, optional: bool = False) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value.strip() or "\x00" in value:
            raise self.fail(f"{field}: give a non-empty string")
        return value

    def time(self, value: Any, field: str, *, optional: bool = False) -> datetime | None:
        if value is None and optional:
            return None
        try:
            when = datetime.fromisoformat(value)
        except (TypeError, ValueError):
            raise self.fail(f"{field}: give an ISO 8601 time") from None
        if when.tzinfo is None:
            raise self.fail(f"{field}: give a time with its offset")
        return when

    def strings(self, value: Any, field: str) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(f"{field}: give a list of strings")
        return list(value)

    def mapping(self, value: Any, field: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(f"{field}: give an object")
        return dict(value)


def graph_from_json(data: Any, where: str = "knowledge") -> tuple[str, dict[str, list[Any]]]:
    """The user and the rows of one exported graph, every value checked.

    Raises:
        EntryValidationError: What is wrong and where (``knowledge.facts[2]:
            subject_id: no such entity``); nothing is read further.
    """
    top = _Reader(where)
    if not isinstance(data, dict) or set(data) - {SCOPES_KEY} != GRAPH_KEYS:
        raise top.fail(
            f"give an object with exactly the keys {sorted(GRAPH_KEYS)} (and {SCOPES_KEY!r})"
        )
    user_id = validate_user_id(data["user_id"])
    for name in ("entities", "facts", "history"):
        if not isinstance(data[name], list):
            raise top.fail(f'"{name}" must be a list')
    entities: list[dict[str, Any]] = []
    names: set[str] = set()
    for i, raw in enumerate(data["entities"]):
        r = _Reader(f"{where}.entities[{i}]")
        row = r.row(raw, frozenset(_ENTITY + _ENTITY_TIMES))
        checked = r.text(row["name"], "name")
        assert checked is not None
        name = checked
        mentions = row["mentions"]
        if isinstance(mentions, bool) or not isinstance(mentions, int) or mentions < 0:
            raise r.fail("mentions: give a whole number >= 0")
        if normalize(name) in names:
            raise r.fail(f"name: {name!r} is there twice")
        names.add(normalize(name))
        entities.append(
            {
                "entity_id": r.text(row["entity_id"], "entity_id"),
                "user_id": user_id,
                "name": name.strip(),
                "norm_name": normalize(name),
                "entity_type": r.text(row["entity_type"], "entity_type"),
                "attributes": r.mapping(row["attributes"], "attributes"),
                "aliases": r.strings(row["aliases"], "aliases"),
                "mentions": mentions,
                "created_at": r.time(row["created_at"], "created_at"),
                "updated_at": r.time(row["updated_at"], "updated_at"),
            }
        )
    known = {e["entity_id"] for e in entities}
    if len(known) != len(entities):
        raise top.fail("an entity_id is there twice")
    facts = [
        _fact(raw, f"{where}.facts[{i}]", user_id, known) for i, raw in enumerate(data["facts"])
    ]
    if len({f["fact_id"] for f in facts}) != len(facts):
        raise top.fail("a fact_id is there twice")
    history: list[dict[str, Any]] = []
    for i, raw in enumerate(data["history"]):
        r = _Reader(f"{where}.history[{i}]")
        row = r.row(raw, frozenset((*_HISTORY, "at")))
        history.append(
            {
                "user_id": user_id,
                "action": r.text(row["action"], "action"),
                "actor": r.text(row["actor"], "actor"),
                "entity_id": r.text(row["entity_id"], "entity_id", optional=True),
                "fact_id": r.text(row["fact_id"], "fact_id", optional=True),
                "detail": r.mapping(row["detail"], "detail"),
                "at": r.time(row["at"], "at"),
            }
        )
    ids = {"entity": known, "fact": {f["fact_id"] for f in facts}}
    scopes = _scopes(data.get(SCOPES_KEY, []), f"{where}.{SCOPES_KEY}", user_id, ids)
    return user_id, {"entities": entities, "facts": facts, "history": history, "scopes": scopes}


def _scopes(data: Any, where: str, user_id: str, ids: dict[str, set[str]]) -> list[dict[str, Any]]:
    """The checked scope rows (each names a known entity or fact, once per conversation)."""
    if not isinstance(data, list):
        raise _Reader(where).fail("give a list")
    scopes: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for i, raw in enumerate(data):
        r = _Reader(f"{where}[{i}]")
        row = r.row(raw, frozenset((*_SCOPE, "first_at")))
        conversation_id = r.text(row["conversation_id"], "conversation_id")
        kind, item_id = row["kind"], r.text(row["item_id"], "item_id")
        if kind not in ids:
            raise r.fail('kind: give "entity" or "fact"')
        if item_id not in ids[kind]:
            raise r.fail(f"item_id: no such {kind} {item_id!r}")
        assert conversation_id is not None and item_id is not None
        if (conversation_id, item_id) in seen:
            raise r.fail("this conversation and item are there twice")
        seen.add((conversation_id, item_id))
        scopes.append(
            {
                "user_id": user_id,
                "conversation_id": conversation_id,
                "item_id": item_id,
                "kind": kind,
                "first_at": r.time(row["first_at"], "first_at"),
            }
        )
    return scopes


def _fact(raw: Any, where: str, user_id: str, known: set[str]) -> dict[str, Any]:
    r = _Reader(where)
    row = r.row(raw, frozenset((*_FACT, "confidence", *_FACT_TIMES)))
    subject_id = r.text(row["subject_id"], "subject_id")
    object_id = r.text(row["object_id"], "object_id", optional=True)
    for field, ref in (("subject_id", subject_id), ("object_id", object_id)):
        if ref is not None and ref not in known:
            raise r.fail(f"{field}: no such entity {ref!r}")
    value = r.text(row["object_value"], "object_value", optional=True)
    if (object_id is None) == (value is None):
        raise r.fail("give exactly one of object_id and object_value")
    predicate = r.text(row["predicate"], "predicate")
    assert predicate is not None
    if normalize_predicate(predicate) != predicate:
        raise r.fail(f"predicate: {predicate!r} is not in normal form")
    confidence = row["confidence"]
    if isinstance(confidence, bool) or not isinstance(confidence, int | float):
        raise r.fail("confidence: give a number from 0 to 1")
    if not 0.0 <= confidence <= 1.0:
        raise r.fail("confidence: give a number from 0 to 1")
    valid_from = r.time(row["valid_from"], "valid_from")
    valid_to = r.time(row["valid_to"], "valid_to", optional=True)
    assert valid_from is not None
    if valid_to is not None and valid_to < valid_from:
        raise r.fail("valid_to is before valid_from")
    return {
        "fact_id": r.text(row["fact_id"], "fact_id"),
        "user_id": user_id,
        "subject_id": subject_id,
        "predicate": predicate,
        "object_id": object_id,
        "object_value": value,
        "valid_from": valid_from,
        "valid_to": valid_to,
        "evidence": r.strings(row["evidence"], "evidence"),
        "confidence": float(confidence),
        "created_at": r.time(row["created_at"], "created_at"),
    }
