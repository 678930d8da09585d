"""Where ADK sessions live in a store, and the transactions over them.

Plain functions over a :class:`~firefly_orm.protocols.UnitOfWork` (the session
service runs each in one unit of work through the step driver); they know
nothing of ADK's classes, only JSON values, so they run on every store.

Layout (app names, user ids and session ids are percent-escaped where they
form a namespace or key, so a ``:`` in them cannot run two names together):

* namespace ``adk:<app>``: the app state (key ``app-state``), each user's
  state (key ``user-state:<user>``, owned by the user), and one head row per
  session (key ``session:<user>:<session>``, owned by the user) holding the
  session's own state, its ``last_update_time``, its event count and a
  revision nonce (the stale-session marker is ``<nonce>:<row version>``);
* namespace ``adk-events:<app>:<user>:<session>``: one row per event (owned by
  the user), key ``e:<timestamp, fixed width>:<sequence>`` so that key order is
  ADK's order (timestamp, then append order), content ``{"timestamp": t,
  "event": <the Event's model_dump_json>}``.

Every row of a user carries its ``user_id``, so the store's ``erase_user``
forgets a user's sessions, events and user state together.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from firefly_orm.entry import MemoryEntry, MemoryScope, derived_entry_id
from firefly_orm.protocols import UnitOfWork

__all__ = [
    "AlreadyExists",
    "Appended",
    "EventAppend",
    "NoSession",
    "SessionRead",
    "Stale",
    "StateDeltas",
    "StoredSession",
    "append_event",
    "create_session",
    "delete_session",
    "events_namespace",
    "list_sessions",
    "read_session",
    "read_user_state",
]

#: The key of an app's state row.
APP_STATE_KEY = "app-state"
#: Key prefix of the users' state rows.
USER_STATE_PREFIX = "user-state:"
#: Key prefix of the session head rows.
SESSION_PREFIX = "session:"
#: Key prefix of the event rows.
EVENT_PREFIX = "e:"


class AlreadyExists(Exception):
    """A session with this id exists already (the service raises ADK's error)."""


class NoSession(Exception):
    """No such session (the service raises ADK's ``SessionNotFoundError``)."""


class Stale(Exception):
    """The session object is older than the stored session (ADK's ``StaleSessionError``)."""


def _q(part: str) -> str:
    return quote(part, safe="")


def app_namespace(app_name: str) -> str:
    """The namespace of an app's state, user states and session heads."""
    return f"adk:{_q(app_name)}"


def events_namespace(app_name: str, user_id: str, session_id: str) -> str:
    """The namespace of one session's events."""
    return f"adk-events:{_q(app_name)}:{_q(user_id)}:{_q(session_id)}"


def _session_key(user_id: str, session_id: str) -> str:
    return f"{SESSION_PREFIX}{_q(user_id)}:{_q(session_id)}"


def _user_state_key(user_id: str) -> str:
    return f"{USER_STATE_PREFIX}{_q(user_id)}"


def _event_key(timestamp: float, sequence: int) -> str:
    """Keys sort as ADK orders events: by timestamp (microseconds), then append order."""
    return f"{EVENT_PREFIX}{max(timestamp, 0.0):020.6f}:{sequence:012d}"


def _row(
    namespace: str, key: str, content: Any, user_id: str | None, scope: MemoryScope
) -> MemoryEntry:
    return MemoryEntry(
        entry_id=derived_entry_id(namespace, key),
        namespace=namespace,
        key=key,
        content=content,
        user_id=user_id,
        scope=scope,
    )


def _marker(head: MemoryEntry) -> str:
    """The stale-session marker of a head row: its nonce and version."""
    return f"{head.content['nonce']}:{head.version}"


@dataclass(frozen=True)
class StateDeltas:
    """A state split by ADK's scopes (prefixes removed; ``temp:`` keys dropped)."""

    app: dict[str, Any] = field(default_factory=dict)
    user: dict[str, Any] = field(default_factory=dict)
    session: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StoredSession:
    """A session head as read: ids, own state, ``last_update_time``, marker."""

    user_id: str
    session_id: str
    state: dict[str, Any]
    last_update_time: float
    marker: str


@dataclass(frozen=True)
class SessionRead:
    """One session read whole: its head, app and user state, its events' JSON (oldest first)."""

    head: StoredSession
    app_state: dict[str, Any]
    user_state: dict[str, Any]
    events: list[str]


def _stored(head: MemoryEntry) -> StoredSession:
    content = head.content
    return StoredSession(
        user_id=content["user_id"],
        session_id=content["id"],
        state=dict(content["state"]),
        last_update_time=float(content["last_update_time"]),
        marker=_marker(head),
    )


def _merge(
    uow: UnitOfWork, namespace: str, key: str, user_id: str | None, delta: dict[str, Any]
) -> dict[str, Any]:
    """The state row ``key`` with ``delta`` applied (saved, compare-and-set, when non-empty)."""
    row = uow.entries.get_by_key(namespace, key, for_update=bool(delta))
    state: dict[str, Any] = dict(row.content["state"]) if row is not None else {}
    if delta:
        state.update(delta)
        entry = _row(namespace, key, {"state": state}, user_id, MemoryScope.WORKING)
        uow.entries.save(namespace, entry, expected_version=0 if row is None else row.version)
    return state


def _state(uow: UnitOfWork, namespace: str, key: str) -> dict[str, Any]:
    row = uow.entries.get_by_key(namespace, key)
    return {} if row is None else dict(row.content["state"])


def create_session(
    uow: UnitOfWork,
    app_name: str,
    user_id: str,
    session_id: str,
    deltas: StateDeltas,
    now: float,
) -> SessionRead:
    """Store a new session with its initial state; the app and user states merged into it.

    Raises:
        AlreadyExists: The session exists (a racing create makes the save fail
            with ``ConcurrencyError``; the retry finds the session and raises this).
    """
    namespace, key = app_namespace(app_name), _session_key(user_id, session_id)
    if uow.entries.get_by_key(namespace, key) is not None:
        raise AlreadyExists(session_id)
    app_state = _merge(uow, namespace, APP_STATE_KEY, None, deltas.app)
    user_state = _merge(uow, namespace, _user_state_key(user_id), user_id, deltas.user)
    content = {
        "id": session_id,
        "user_id": user_id,
        "state": deltas.session,
        "last_update_time": now,
        "events": 0,
        "nonce": secrets.token_hex(8),
    }
    head = _row(namespace, key, content, user_id, MemoryScope.CONVERSATION)
    uow.entries.save(namespace, head, expected_version=0)
    head.version = 1
    return SessionRead(_stored(head), app_state, user_state, [])


def read_session(
    uow: UnitOfWork,
    app_name: str,
    user_id: str,
    session_id: str,
    num_recent_events: int | None,
    after_timestamp: float | None,
) -> SessionRead | None:
    """A session with the events ADK's ``GetSessionConfig`` asks for, or ``None``."""
    namespace = app_namespace(app_name)
    head = uow.entries.get_by_key(namespace, _session_key(user_id, session_id))
    if head is None:
        return None
    events: list[str] = []
    if num_recent_events != 0:
        ev_namespace = events_namespace(app_name, user_id, session_id)
        limit = num_recent_events if not after_timestamp else None
        rows = uow.entries.list_contents(
            ev_namespace, key_prefix=EVENT_PREFIX, newest_first=True, limit=limit
        )
        for row in rows:  # newest first
            if after_timestamp and row["timestamp"] < after_timestamp:
                break
            events.append(row["event"])
            if num_recent_events is not None and len(events) == num_recent_events:
                break
        events.reverse()
    return SessionRead(
        _stored(head),
        _state(uow, namespace, APP_STATE_KEY),
        _state(uow, namespace, _user_state_key(user_id)),
        events,
    )


def list_sessions(
    uow: UnitOfWork, app_name: str, user_id: str | None
) -> tuple[list[StoredSession], dict[str, Any], dict[str, dict[str, Any]]]:
    """An app's sessions (one user's, or all), least recently updated first; the states.

    Returns:
        ``(sessions, app_state, user_states)``, ``user_states`` by user id.
    """
    namespace = app_namespace(app_name)
    prefix = SESSION_PREFIX if user_id is None else f"{SESSION_PREFIX}{_q(user_id)}:"
    heads = [_stored(h) for h in uow.entries.list(namespace, key_prefix=prefix)]
    heads.sort(key=lambda s: (s.last_update_time, s.user_id, s.session_id))
    if user_id is None:
        rows = uow.entries.list(namespace, key_prefix=USER_STATE_PREFIX)
        users = {r.user_id: dict(r.content["state"]) for r in rows if r.user_id is not None}
    else:
        users = {user_id: _state(uow, namespace, _user_state_key(user_id))}
    return heads, _state(uow, namespace, APP_STATE_KEY), users


def read_user_state(uow: UnitOfWork, app_name: str, user_id: str) -> dict[str, Any]:
    """A user's state in an app (``{}`` when none is stored)."""
    return _state(uow, app_namespace(app_name), _user_state_key(user_id))


def delete_session(uow: UnitOfWork, app_name: str, user_id: str, session_id: str) -> None:
    """Delete a session's head and its events (nothing when it does not exist)."""
    namespace = app_namespace(app_name)
    head = uow.entries.get_by_key(namespace, _session_key(user_id, session_id))
    if head is not None:
        uow.entries.delete(namespace, head.entry_id)
    uow.entries.clear(events_namespace(app_name, user_id, session_id))


@dataclass(frozen=True)
class EventAppend:
    """What ``append_event`` stores, and what the caller's session object knows.

    Attributes:
        marker: The session object's marker (``None``: a session not loaded by
            this service; then ``last_update_time`` and ``last_event_id`` decide).
        last_update_time: The session object's ``last_update_time``.
        last_event_id: The id of its newest event (``None``: it has none).
        deltas: The event's state delta by scope (``temp:`` keys dropped).
        timestamp: The event's timestamp (the session's new ``last_update_time``).
        event_json: The event, ``model_dump_json``.
    """

    app_name: str
    user_id: str
    session_id: str
    marker: str | None
    last_update_time: float
    last_event_id: str | None
    deltas: StateDeltas
    timestamp: float
    event_json: str


@dataclass(frozen=True)
class Appended:
    """The session after an append: its new marker and ``last_update_time``."""

    marker: str
    last_update_time: float


def _newest_event_id(uow: UnitOfWork, namespace: str) -> str | None:
    rows = uow.entries.list_contents(namespace, key_prefix=EVENT_PREFIX, newest_first=True, limit=1)
    if not rows:
        return None
    event_id: str | None = _event_id(rows[0]["event"])
    return event_id


def _event_id(event_json: str) -> str | None:
    value = json.loads(event_json).get("id")
    return value if isinstance(value, str) else None


def append_event(uow: UnitOfWork, request: EventAppend) -> Appended:
    """Store an event and apply its state delta, checking the session is not stale.

    The head row is locked where the store can (``FOR UPDATE``), and every row
    written is saved compare-and-set, so a racing writer fails with
    ``ConcurrencyError`` (retried by the service) instead of losing an update.

    Raises:
        NoSession: The session does not exist.
        Stale: The stored session changed since the caller's object was read.
    """
    app_name, user_id = request.app_name, request.user_id
    namespace = app_namespace(app_name)
    key = _session_key(user_id, request.session_id)
    head = uow.entries.get_by_key(namespace, key, for_update=True)
    if head is None:
        raise NoSession(request.session_id)
    ev_namespace = events_namespace(app_name, user_id, request.session_id)
    if request.marker is not None:
        if request.marker != _marker(head):
            raise Stale(request.session_id)
    elif (
        # ADK's fallback for a session object without a marker: stale only when
        # the stored events moved past the object's newest event.
        float(head.content["last_update_time"]) > request.last_update_time
        and _newest_event_id(uow, ev_namespace) != request.last_event_id
    ):
        raise Stale(request.session_id)
    _merge(uow, namespace, APP_STATE_KEY, None, request.deltas.app)
    _merge(uow, namespace, _user_state_key(user_id), user_id, request.deltas.user)
    content = dict(head.content)
    content["state"] = {**content["state"], **request.deltas.session}
    content["last_update_time"] = request.timestamp
    sequence = int(content["events"])
    content["events"] = sequence + 1
    updated = _row(namespace, key, content, user_id, MemoryScope.CONVERSATION)
    uow.entries.save(namespace, updated, expected_version=head.version)
    event_key = _event_key(request.timestamp, sequence)
    event = {"timestamp": request.timestamp, "event": request.event_json}
    uow.entries.save(
        ev_namespace, _row(ev_namespace, event_key, event, user_id, MemoryScope.CONVERSATION)
    )
    updated.version = head.version + 1
    return Appended(_marker(updated), request.timestamp)
