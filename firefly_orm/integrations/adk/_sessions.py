"""FireflySessionService: ADK's ``BaseSessionService`` on a firefly_orm store."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from google.adk.sessions.state import State
from pydantic_core import PydanticSerializationError, to_jsonable_python

from firefly_orm.bridges._steps import Operation, Transaction, arun, retrying
from firefly_orm.entry import validate_user_id
from firefly_orm.errors import EntryValidationError
from firefly_orm.integrations.adk import _rows as rows
from firefly_orm.protocols import MemoryStore

__all__ = ["FireflySessionService"]

logger = logging.getLogger("firefly_orm")

_STALE = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)

_SessionKey = tuple[str, str, str]

T = TypeVar("T")


def _read(step: Transaction[T]) -> Operation[T]:
    """A read transaction as an operation (reads are not retried: they conflict with nothing)."""
    return (yield from step)


def _name(value: Any, field: str) -> str:
    """An app name or session id: a non-empty string without NUL characters."""
    if not isinstance(value, str) or not value or "\x00" in value:
        raise EntryValidationError(field, "must be a non-empty string without NUL characters")
    return value


def _json(values: dict[str, Any]) -> dict[str, Any]:
    try:
        result: dict[str, Any] = to_jsonable_python(values)
    except PydanticSerializationError as exc:
        raise TypeError(f"session state must be JSON-serialisable: {exc}") from None
    return result


def split_state(state: Mapping[str, Any] | None) -> rows.StateDeltas:
    """``state`` split by ADK's scopes: ``app:`` and ``user:`` (prefix removed), the session's.

    ``temp:`` keys are dropped (never stored).  Values are made JSON values
    (datetimes, pydantic models...) the way ADK's database service stores them.

    Raises:
        TypeError: A value has no JSON form (nothing is written).
    """
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    own: dict[str, Any] = {}
    for key, value in (state or {}).items():
        if key.startswith(State.APP_PREFIX):
            app[key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            user[key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            own[key] = value
    return rows.StateDeltas(app=_json(app), user=_json(user), session=_json(own))


def _merged(
    own: dict[str, Any], app_state: dict[str, Any], user_state: dict[str, Any]
) -> dict[str, Any]:
    merged = dict(own)
    merged.update({State.APP_PREFIX + k: v for k, v in app_state.items()})
    merged.update({State.USER_PREFIX + k: v for k, v in user_state.items()})
    return merged


def _session(
    app_name: str,
    head: rows.StoredSession,
    app_state: dict[str, Any],
    user_state: dict[str, Any],
    events: list[Event],
) -> Session:
    session = Session(
        id=head.session_id,
        app_name=app_name,
        user_id=head.user_id,
        state=_merged(head.state, app_state, user_state),
        events=events,
        last_update_time=head.last_update_time,
    )
    session._storage_update_marker = head.marker
    return session


class FireflySessionService(BaseSessionService):
    """ADK sessions, their events and their ``app:`` / ``user:`` / session state in ``store``.

    Every call is one unit of work of the store (one transaction on SQL), run
    through the store's async path, and retried on a write conflict.  The
    layout is in :mod:`firefly_orm.integrations.adk._rows`.

    What it guarantees, as ADK's ``DatabaseSessionService`` does:

    * ``create_session`` raises ADK's ``AlreadyExistsError`` for an id in use
      (two racing creates: one wins, the other raises);
    * ``append_event`` stores the event and applies its ``state_delta`` (session,
      ``app:`` and ``user:`` keys; ``temp:`` keys only reach the session
      object) in one unit of work: all or nothing;
    * it raises ADK's ``StaleSessionError`` when the stored session changed
      since the session object was read (by another service or process),
      and ``SessionNotFoundError`` for a deleted session; appends to one
      session through one service are serialised, so racing appends with the
      same session object all land;
    * the app and user states are read-modify-written under a lock where the
      store can (``FOR UPDATE`` on PostgreSQL) and compare-and-set everywhere,
      so concurrent appends of different sessions never lose each other's keys;
    * events are stored losslessly (``model_dump_json``) and read back equal;
      ``get_session`` honours ``GetSessionConfig`` (``num_recent_events``,
      ``after_timestamp``), events ordered by timestamp then append order.

    Args:
        store: Any firefly_orm store (SQLite, PostgreSQL, MongoDB, Redis, files,
            in-process).  The service neither opens nor closes it.

    Raises:
        TypeError: ``store`` is not a firefly_orm store.
    """

    def __init__(self, store: MemoryStore) -> None:
        if not isinstance(store, MemoryStore):
            raise TypeError(f"store must be a firefly_orm store, got {type(store).__name__}")
        self._store = store
        self._locks: weakref.WeakValueDictionary[_SessionKey, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    @property
    def store(self) -> MemoryStore:
        """The store the sessions live in."""
        return self._store

    def __repr__(self) -> str:
        return f"FireflySessionService(store={type(self._store).__name__})"

    @asynccontextmanager
    async def _session_lock(self, key: _SessionKey) -> AsyncIterator[None]:
        """Serialise this service's appends to one session (ADK's database service does too)."""
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        async with lock:
            yield

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Create a session (a new UUID unless ``session_id`` is given) with its initial state.

        ``app:`` and ``user:`` keys of ``state`` update the app's and the user's
        state; ``temp:`` keys are dropped.

        Raises:
            AlreadyExistsError: ``session_id`` is in use (nothing written).
            EntryValidationError: A bad app name, user id or session id.
            TypeError: A state value is not JSON-serialisable (nothing written).
        """
        app_name = _name(app_name, "app_name")
        user_id = validate_user_id(user_id)
        session_id = str(uuid.uuid4()) if session_id is None else _name(session_id, "session_id")
        deltas = split_state(state)
        step = Transaction.write(
            rows.create_session, app_name, user_id, session_id, deltas, time.time()
        )
        try:
            read = await arun(self._store, retrying(step))
        except rows.AlreadyExists:
            raise AlreadyExistsError(f"Session with id {session_id} already exists.") from None
        logger.debug("adk: created session %r of app %r", session_id, app_name)
        return _session(app_name, read.head, read.app_state, read.user_state, [])

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """The session with its merged state and events, or ``None``.

        ``config.num_recent_events``: only the newest that many events (``0``:
        none); ``config.after_timestamp``: only events at or after it.
        """
        app_name, session_id = _name(app_name, "app_name"), _name(session_id, "session_id")
        user_id = validate_user_id(user_id)
        recent = None if config is None else config.num_recent_events
        after = None if config is None else config.after_timestamp
        step = Transaction.read(rows.read_session, app_name, user_id, session_id, recent, after)
        read = await arun(self._store, _read(step))
        if read is None:
            return None
        events = [Event.model_validate_json(e) for e in read.events]
        return _session(app_name, read.head, read.app_state, read.user_state, events)

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """The app's sessions (the user's, or every user's), least recently updated first.

        Each has its merged state and no events.
        """
        app_name = _name(app_name, "app_name")
        user_id = None if user_id is None else validate_user_id(user_id)
        heads, app_state, users = await arun(
            self._store, _read(Transaction.read(rows.list_sessions, app_name, user_id))
        )
        sessions = [_session(app_name, h, app_state, users.get(h.user_id, {}), []) for h in heads]
        return ListSessionsResponse(sessions=sessions)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session and its events (no error when it does not exist).

        The app's and the user's state stay, as in ADK.
        """
        app_name, session_id = _name(app_name, "app_name"), _name(session_id, "session_id")
        user_id = validate_user_id(user_id)
        step = Transaction.write(rows.delete_session, app_name, user_id, session_id)
        await arun(self._store, retrying(step))
        logger.debug("adk: deleted session %r of app %r", session_id, app_name)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's state in the app, keys without the ``user:`` prefix (``{}``: none)."""
        app_name, user_id = _name(app_name, "app_name"), validate_user_id(user_id)
        state: dict[str, Any] = await arun(
            self._store, _read(Transaction.read(rows.read_user_state, app_name, user_id))
        )
        return state

    async def append_event(self, session: Session, event: Event) -> Event:
        """Store ``event`` and apply its state delta in one unit of work; update ``session``.

        A partial event is returned as it is, unstored.  ``temp:`` keys of the
        delta reach ``session.state`` only.

        Raises:
            StaleSessionError: The stored session changed since ``session`` was
                read (nothing written); reload it and append again.
            SessionNotFoundError: The session does not exist (nothing written).
            TypeError: A state value is not JSON-serialisable (nothing written).
        """
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        deltas = split_state(event.actions.state_delta if event.actions else None)
        event_json = event.model_dump_json(exclude_none=True)
        async with self._session_lock((session.app_name, session.user_id, session.id)):
            request = rows.EventAppend(
                app_name=session.app_name,
                user_id=session.user_id,
                session_id=session.id,
                marker=session._storage_update_marker,
                last_update_time=session.last_update_time,
                last_event_id=session.events[-1].id if session.events else None,
                deltas=deltas,
                timestamp=event.timestamp,
                event_json=event_json,
            )
            try:
                appended = await arun(
                    self._store, retrying(Transaction.write(rows.append_event, request))
                )
            except rows.NoSession:
                raise SessionNotFoundError(f"Session {session.id} not found.") from None
            except rows.Stale:
                raise StaleSessionError(_STALE) from None
            session.last_update_time = appended.last_update_time
            session._storage_update_marker = appended.marker
        return self._commit_event_to_session(session, event)
