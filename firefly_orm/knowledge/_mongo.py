"""The knowledge graph on MongoDB: :class:`MongoRows` (internal).

Documents in the collections of :mod:`firefly_orm.mongo._graph`, reached with
``MongoDBStore.run_database_call`` (the store's client, on its loop).  Entities
are unique per user and normalised name by a unique index, so concurrent
writers never duplicate one.  Without multi-document transactions each
primitive is one single-document (or one ``*_many``) write: a write of
:class:`~firefly_orm.knowledge.KnowledgeGraph` is a short sequence of them,
ordered so that a crash part-way leaves facts that are each valid (at worst a
superseded fact still open beside its successor, closed by the next write of
that subject and predicate).  Traversals are one ``$graphLookup`` over the
facts' ``ends`` (both entity ids), restricted to the user and to the facts
valid at the asked time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from datetime import datetime
from typing import Any, TypeVar

from firefly_orm.knowledge._backend import PendingRow, normalize
from firefly_orm.knowledge._model import Entity, Fact
from firefly_orm.mongo._driver import DuplicateKeyError, ReturnDocument
from firefly_orm.mongo._graph import GraphCollections, create_graph_indexes, graph_collections
from firefly_orm.protocols import RunsDatabaseCalls

__all__ = ["MongoRows"]

T = TypeVar("T")
Doc = dict[str, Any]


def _entity(doc: Doc) -> Entity:
    return Entity(
        entity_id=doc["_id"],
        user_id=doc["user_id"],
        name=doc["name"],
        entity_type=doc["entity_type"],
        attributes=dict(doc["attributes"]),
        aliases=list(doc["aliases"]),
        mentions=int(doc["mentions"]),
        created_at=doc["created_at"],
        updated_at=doc["updated_at"],
    )


def _valid_at(as_of: datetime | None) -> Doc:
    if as_of is None:
        return {"valid_to": None}
    return {
        "valid_from": {"$lte": as_of},
        "$or": [{"valid_to": None}, {"valid_to": {"$gt": as_of}}],
    }


def _edges(user_id: str, as_of: datetime | None) -> Doc:
    """The facts a traversal follows: the user's, between two entities, valid at the time."""
    return {"user_id": user_id, "object_id": {"$ne": None}, **_valid_at(as_of)}


async def _facts(c: GraphCollections, query: Doc) -> list[Fact]:
    """The facts matching ``query``, oldest first, with their entities' names."""
    docs = await c.facts.find(query).sort([("valid_from", 1), ("_id", 1)]).to_list(None)
    ids = {d["subject_id"] for d in docs} | {d["object_id"] for d in docs if d["object_id"]}
    names = {
        e["_id"]: e["name"]
        async for e in c.entities.find({"_id": {"$in": sorted(ids)}}, {"name": 1})
    }
    return [_fact(d, names) for d in docs]


def _fact(doc: Doc, names: dict[str, str]) -> Fact:
    object_id = doc["object_id"]
    return Fact(
        fact_id=doc["_id"],
        subject=names.get(doc["subject_id"], ""),
        predicate=doc["predicate"],
        object=names.get(object_id, "") if object_id else doc["object_value"],
        object_is_entity=object_id is not None,
        valid_from=doc["valid_from"],
        valid_to=doc["valid_to"],
        evidence=list(doc["evidence"]),
        confidence=float(doc["confidence"]),
        subject_id=doc["subject_id"],
        object_id=object_id,
    )


async def _walk(
    c: GraphCollections, user_id: str, start_id: str, depth: int, as_of: datetime | None
) -> dict[str, list[Doc]]:
    """The facts a walk of ``depth`` hops from ``start_id`` may use, by the entities they end at.

    One ``$graphLookup`` from the start entity over ``ends`` (either direction),
    restricted to the facts of :func:`_edges`.  The restriction is checked
    again here: a server may widen the walk (SecantusDB, the test server,
    ignores ``restrictSearchWithMatch``), never narrow it, so the callers'
    breadth-first searches over these facts answer the same everywhere.
    """
    pipeline: list[Doc] = [
        {"$match": {"_id": start_id}},
        {
            "$graphLookup": {
                "from": c.facts.name,
                "startWith": "$_id",
                "connectFromField": "ends",
                "connectToField": "ends",
                "as": "walk",
                "maxDepth": depth - 1,
                "restrictSearchWithMatch": _edges(user_id, as_of),
            }
        },
        {
            "$project": {
                "walk._id": 1,
                "walk.ends": 1,
                "walk.subject_id": 1,
                "walk.object_id": 1,
                "walk.user_id": 1,
                "walk.valid_from": 1,
                "walk.valid_to": 1,
            }
        },
    ]
    found = await (await c.entities.aggregate(pipeline)).to_list(None)
    touching: dict[str, list[Doc]] = {}
    for doc in found[0]["walk"] if found else []:
        if doc["user_id"] == user_id and doc["object_id"] is not None and _holds(doc, as_of):
            for end in set(doc["ends"]):
                touching.setdefault(end, []).append(doc)
    for docs in touching.values():
        docs.sort(key=lambda d: str(d["_id"]))
    return touching


def _holds(doc: Doc, as_of: datetime | None) -> bool:
    if as_of is None:
        return doc["valid_to"] is None
    return bool(doc["valid_from"] <= as_of) and (doc["valid_to"] is None or doc["valid_to"] > as_of)


def _far(doc: Doc, node: str) -> str:
    return str(doc["object_id"] if doc["subject_id"] == node else doc["subject_id"])


def _distances(touching: dict[str, list[Doc]], start_id: str, depth: int) -> dict[str, int]:
    """Breadth-first: each entity within ``depth`` hops of ``start_id`` and its distance."""
    seen = {start_id: 0}
    frontier = [start_id]
    for hops in range(1, depth + 1):
        step: list[str] = []
        for node in frontier:
            for doc in touching.get(node, []):
                far = _far(doc, node)
                if far not in seen:
                    seen[far] = hops
                    step.append(far)
        frontier = step
    del seen[start_id]
    return seen


class MongoRows:
    """:class:`~firefly_orm.knowledge._backend.GraphRows` on a MongoDB store's collections."""

    def __init__(self, store: RunsDatabaseCalls) -> None:
        self._store = store
        self._indexed = False

    def _do(self, op: Callable[[GraphCollections], Awaitable[T]]) -> T:
        async def run(database: Any, collection_name: str) -> T:
            collections = graph_collections(database, collection_name)
            if not self._indexed:
                await create_graph_indexes(collections)
                self._indexed = True
            return await op(collections)

        return self._store.run_database_call(run)

    # ---------------------------------------------------------------- entities
    def find_entity(self, user_id: str, name: str) -> Entity | None:
        norm = normalize(name)

        async def op(c: GraphCollections) -> Doc | None:
            found = await c.entities.find_one({"user_id": user_id, "norm_name": norm})
            if found is None:
                found = await c.entities.find_one({"user_id": user_id, "norm_aliases": norm})
            return found

        doc = self._do(op)
        return None if doc is None else _entity(doc)

    def insert_entity(self, values: dict[str, Any]) -> bool:
        doc = _entity_doc(values)

        async def op(c: GraphCollections) -> bool:
            try:
                await c.entities.insert_one(doc)
            except DuplicateKeyError:  # another writer created it first
                return False
            return True

        return self._do(op)

    def update_entity(self, entity_id: str, changes: dict[str, Any], mentions: int) -> Entity:
        update: Doc = {}
        if changes:
            sets = dict(changes)
            if "aliases" in sets:
                sets["norm_aliases"] = [normalize(a) for a in sets["aliases"]]
            update["$set"] = sets
        if mentions:
            update["$inc"] = {"mentions": mentions}

        async def op(c: GraphCollections) -> Doc | None:
            if not update:
                return await c.entities.find_one({"_id": entity_id})
            return await c.entities.find_one_and_update(
                {"_id": entity_id}, update, return_document=ReturnDocument.AFTER
            )

        doc = self._do(op)
        assert doc is not None
        return _entity(doc)

    def _ranked(self, query: Doc, limit: int) -> list[Entity]:
        async def op(c: GraphCollections) -> list[Doc]:
            order = [("mentions", -1), ("name", 1)]
            return await c.entities.find(query).sort(order).limit(limit).to_list(None)

        return [_entity(doc) for doc in self._do(op)]

    def list_entities(self, user_id: str, limit: int) -> list[Entity]:
        return self._ranked({"user_id": user_id}, limit)

    def search_entities(self, user_id: str, needle: str, limit: int) -> list[Entity]:
        # A plain substring (no regex): matched in Python over the user's names and aliases.
        async def op(c: GraphCollections) -> list[str]:
            fields = {"norm_name": 1, "norm_aliases": 1}
            return [
                d["_id"]
                async for d in c.entities.find({"user_id": user_id}, fields)
                if needle in d["norm_name"] or any(needle in a for a in d["norm_aliases"])
            ]

        ids = self._do(op)
        return self._ranked({"_id": {"$in": ids}}, limit) if ids else []

    def repoint_facts(self, old_id: str, new_id: str) -> None:
        async def op(c: GraphCollections) -> None:
            async for doc in c.facts.find({"ends": old_id}):
                subject = new_id if doc["subject_id"] == old_id else doc["subject_id"]
                obj = new_id if doc["object_id"] == old_id else doc["object_id"]
                sets = {"subject_id": subject, "object_id": obj, "ends": _ends(subject, obj)}
                await c.facts.update_one({"_id": doc["_id"]}, {"$set": sets})

        self._do(op)

    def delete_entity_row(self, entity_id: str) -> None:
        async def op(c: GraphCollections) -> None:
            await c.entities.delete_one({"_id": entity_id})

        self._do(op)

    def delete_entity(self, entity_id: str) -> int:
        async def op(c: GraphCollections) -> int:
            fact_ids = await c.facts.distinct("_id", {"ends": entity_id})
            if fact_ids:
                await c.history.delete_many({"fact_id": {"$in": fact_ids}})
                await c.facts.delete_many({"_id": {"$in": fact_ids}})
            await c.history.delete_many({"entity_id": entity_id})
            await c.scopes.delete_many({"item_id": {"$in": [*fact_ids, entity_id]}})
            await c.entities.delete_one({"_id": entity_id})
            return len(fact_ids)

        return self._do(op)

    def entities_by_ids(self, user_id: str, ids: Collection[str]) -> list[Entity]:
        async def op(c: GraphCollections) -> list[Doc]:
            query = {"user_id": user_id, "_id": {"$in": sorted(ids)}}
            return await c.entities.find(query).to_list(None)

        return [_entity(doc) for doc in self._do(op)] if ids else []

    # ---------------------------------------------------------------- conversation scopes
    def add_scope(
        self, user_id: str, conversation_id: str, kind: str, item_id: str, at: datetime
    ) -> None:
        key = {"user_id": user_id, "conversation_id": conversation_id, "item_id": item_id}

        async def op(c: GraphCollections) -> None:
            new = {"kind": kind, "first_at": at}
            try:
                await c.scopes.update_one(key, {"$setOnInsert": new}, upsert=True)
            except DuplicateKeyError:  # a concurrent upsert of the same scope won
                return

        self._do(op)

    def scoped_ids(self, user_id: str, conversation_id: str, kind: str) -> set[str]:
        async def op(c: GraphCollections) -> list[Any]:
            query = {"user_id": user_id, "conversation_id": conversation_id, "kind": kind}
            return list(await c.scopes.distinct("item_id", query))

        return {str(item_id) for item_id in self._do(op)}

    def scopes_of(self, item_id: str) -> list[tuple[str, datetime]]:
        async def op(c: GraphCollections) -> list[Doc]:
            return await c.scopes.find({"item_id": item_id}).to_list(None)

        return [(d["conversation_id"], d["first_at"]) for d in self._do(op)]

    def delete_scopes(self, item_ids: list[str]) -> None:
        async def op(c: GraphCollections) -> None:
            await c.scopes.delete_many({"item_id": {"$in": item_ids}})

        if item_ids:
            self._do(op)

    # ---------------------------------------------------------------- facts
    def _facts(self, query: Doc) -> list[Fact]:
        return self._do(lambda c: _facts(c, query))

    def current_facts(self, subject_id: str, predicate: str) -> list[Fact]:
        return self._facts({"subject_id": subject_id, "predicate": predicate, "valid_to": None})

    def fact(self, fact_id: str) -> Fact:
        return self._facts({"_id": fact_id})[0]

    def insert_fact(self, values: dict[str, Any]) -> None:
        doc = _fact_doc(values)

        async def op(c: GraphCollections) -> None:
            await c.facts.insert_one(doc)

        self._do(op)

    def update_fact(self, fact_id: str, values: dict[str, Any]) -> None:
        async def op(c: GraphCollections) -> None:
            await c.facts.update_one({"_id": fact_id}, {"$set": dict(values)})

        self._do(op)

    def facts_touching(self, user_id: str, entity_id: str, as_of: datetime | None) -> list[Fact]:
        return self._facts({"user_id": user_id, "ends": entity_id, **_valid_at(as_of)})

    def neighbors(
        self, user_id: str, start_id: str, depth: int, as_of: datetime | None
    ) -> list[tuple[Entity, int]]:
        async def op(c: GraphCollections) -> list[tuple[Entity, int]]:
            nearest = _distances(await _walk(c, user_id, start_id, depth, as_of), start_id, depth)
            found = c.entities.find({"_id": {"$in": sorted(nearest)}})
            entities = [_entity(d) async for d in found]
            return sorted(
                ((e, nearest[e.entity_id]) for e in entities), key=lambda p: (p[1], p[0].name)
            )

        return self._do(op)

    def paths(
        self,
        user_id: str,
        a_id: str,
        b_id: str,
        max_depth: int,
        limit: int,
        as_of: datetime | None,
    ) -> list[list[Fact]]:
        """The facts within reach (one ``$graphLookup``), then a breadth-first search of
        simple paths in memory, ordered like the SQL stores' (hops, then the fact ids)."""

        async def op(c: GraphCollections) -> list[list[str]]:
            touching = await _walk(c, user_id, a_id, max_depth, as_of)
            return _simple_paths(touching, a_id, b_id, max_depth, limit)

        found = self._do(op)
        wanted = sorted({fact_id for path in found for fact_id in path})
        by_id = {f.fact_id: f for f in self._facts({"_id": {"$in": wanted}})} if wanted else {}
        return [[by_id[fact_id] for fact_id in path] for path in found]

    # ---------------------------------------------------------------- history
    def record_change(self, row: dict[str, Any]) -> None:
        async def op(c: GraphCollections) -> None:
            await c.history.insert_one(dict(row))

        self._do(op)

    def history(self, user_id: str, limit: int) -> list[dict[str, Any]]:
        async def op(c: GraphCollections) -> list[Doc]:
            order = [("at", -1), ("_id", -1)]
            return await c.history.find({"user_id": user_id}).sort(order).limit(limit).to_list(None)

        return [{"change_id": str(doc.pop("_id")), **doc} for doc in self._do(op)]

    # ---------------------------------------------------------------- export / import
    def dump(self, user_id: str) -> dict[str, list[dict[str, Any]]]:
        async def op(c: GraphCollections) -> dict[str, list[Doc]]:
            mine = {"user_id": user_id}
            entities = c.entities.find(mine, {"norm_aliases": 0}).sort([("created_at", 1)])
            facts = c.facts.find(mine, {"ends": 0}).sort([("valid_from", 1), ("_id", 1)])
            history = c.history.find(mine, {"_id": 0}).sort([("at", 1), ("_id", 1)])
            order = [("conversation_id", 1), ("first_at", 1), ("item_id", 1)]
            scopes = c.scopes.find(mine, {"_id": 0}).sort(order)
            return {
                "entities": [_renamed(d, "entity_id") for d in await entities.to_list(None)],
                "facts": [_renamed(d, "fact_id") for d in await facts.to_list(None)],
                "history": await history.to_list(None),
                "scopes": await scopes.to_list(None),
            }

        return self._do(op)

    def load(self, rows: dict[str, list[dict[str, Any]]]) -> None:
        entities = [_entity_doc(row) for row in rows["entities"]]
        facts = [_fact_doc(row) for row in rows["facts"]]
        history = [dict(row) for row in rows["history"]]
        scopes = [dict(row) for row in rows.get("scopes", [])]

        async def op(c: GraphCollections) -> None:
            for collection, docs in ((c.entities, entities), (c.facts, facts)):
                if docs:
                    await collection.insert_many(docs, ordered=True)
            if history:
                await c.history.insert_many(history, ordered=True)
            if scopes:
                await c.scopes.insert_many(scopes, ordered=True)

        self._do(op)

    def graph_users(self) -> list[str]:
        async def op(c: GraphCollections) -> list[str]:
            return sorted(str(u) for u in await c.entities.distinct("user_id"))

        return self._do(op)

    # ---------------------------------------------------------------- pending extractions
    def queue(self, row: dict[str, Any]) -> None:
        doc = {key: value for key, value in row.items() if key != "pending_id"}
        doc["_id"] = row["pending_id"]

        async def op(c: GraphCollections) -> None:
            await c.pending.insert_one(doc)

        self._do(op)

    def waiting(self, limit: int) -> list[PendingRow]:
        async def op(c: GraphCollections) -> list[Doc]:
            order = [("updated_at", 1), ("_id", 1)]
            return (
                await c.pending.find({"status": "pending"}).sort(order).limit(limit).to_list(None)
            )

        return [
            PendingRow(
                d["_id"],
                d["user_id"],
                d["turn_ref"],
                d["text"],
                d["observed_at"],
                d.get("conversation_id"),
            )
            for d in self._do(op)
        ]

    def attempts(self, pending_id: str) -> int:
        async def op(c: GraphCollections) -> Doc | None:
            return await c.pending.find_one({"_id": pending_id}, {"attempts": 1})

        doc = self._do(op)
        assert doc is not None
        return int(doc["attempts"])

    def update_pending(self, pending_id: str, values: dict[str, Any]) -> None:
        async def op(c: GraphCollections) -> None:
            await c.pending.update_one({"_id": pending_id}, {"$set": dict(values)})

        self._do(op)

    def dequeue(self, pending_id: str) -> None:
        async def op(c: GraphCollections) -> None:
            await c.pending.delete_one({"_id": pending_id})

        self._do(op)

    def statuses(self) -> dict[str, int]:
        async def op(c: GraphCollections) -> list[Doc]:
            pipeline: list[Doc] = [{"$group": {"_id": "$status", "n": {"$sum": 1}}}]
            return await (await c.pending.aggregate(pipeline)).to_list(None)

        return {doc["_id"]: int(doc["n"]) for doc in self._do(op)}


def _ends(subject_id: str, object_id: str | None) -> list[str]:
    return [subject_id] if object_id is None else [subject_id, object_id]


def _renamed(doc: Doc, key: str) -> Doc:
    """A document with its ``_id`` under the SQL column's name ``key``."""
    row = {name: value for name, value in doc.items() if name != "_id"}
    return {key: doc["_id"], **row}


def _fact_doc(values: dict[str, Any]) -> Doc:
    doc = {key: value for key, value in values.items() if key != "fact_id"}
    doc["_id"] = values["fact_id"]
    doc["ends"] = _ends(values["subject_id"], values["object_id"])
    return doc


def _entity_doc(values: dict[str, Any]) -> Doc:
    doc = {key: value for key, value in values.items() if key != "entity_id"}
    doc["_id"] = values["entity_id"]
    doc["norm_aliases"] = [normalize(alias) for alias in values["aliases"]]
    return doc


def _simple_paths(
    touching: dict[str, list[Doc]], a_id: str, b_id: str, max_depth: int, limit: int
) -> list[list[str]]:
    """Fact-id paths from ``a_id`` to ``b_id`` visiting no entity twice, shortest first."""
    found: list[list[str]] = []
    frontier: list[tuple[str, list[str], list[str]]] = [(a_id, [a_id], [])]
    for _ in range(max_depth):
        step: list[tuple[str, list[str], list[str]]] = []
        arrived: list[list[str]] = []
        for node, nodes, facts in frontier:
            for doc in touching.get(node, []):
                far = _far(doc, node)
                if far in nodes:
                    continue
                path = [*facts, str(doc["_id"])]
                if far == b_id:
                    arrived.append(path)
                else:
                    step.append((far, [*nodes, far], path))
        found.extend(sorted(arrived, key="/".join))
        if len(found) >= limit:
            break
        frontier = step
    return found[:limit]
