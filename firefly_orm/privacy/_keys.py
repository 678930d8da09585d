"""Key providers of field-level encryption: where the AES-256 keys come from.

A key provider answers two questions (:class:`KeyProvider`): which key id
encrypts new rows (:meth:`~KeyProvider.current_key_id`), and the 32 bytes of a
key id (:meth:`~KeyProvider.key`), for every key a stored row may still name.
Three are built in:

* :class:`KeyRing`: keys held in memory; :meth:`KeyRing.from_env` reads them
  from :data:`~firefly_orm.envnames.ENV_ENCRYPTION_KEYS`, :meth:`KeyRing.from_file`
  from a file.  The text format is ``kid:base64key`` items separated by commas
  or new lines (``#`` starts a comment), **the current key first**; the others
  only decrypt rows not yet rotated.
* :class:`CallbackKeys`: a callable fetches a key by id (a KMS, a vault), each
  key fetched once and kept.

A key id is 1-64 characters of ``A-Z a-z 0-9 . _ -``; it is stored in every
encrypted row, so never put a secret in it.  :func:`generate_key` makes a new
random key in the text format's base64.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

from firefly_orm.envnames import ENV_ENCRYPTION_KEYS
from firefly_orm.privacy._errors import EncryptionConfigError, UnknownKeyError

__all__ = [
    "KEY_BYTES",
    "CallbackKeys",
    "KeyProvider",
    "KeyRing",
    "check_key_id",
    "generate_key",
    "parse_keys",
]

#: AES-256: every key is exactly this many bytes.
KEY_BYTES = 32
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


@runtime_checkable
class KeyProvider(Protocol):
    """Where the encryption keys come from (see the module docstring)."""

    def current_key_id(self) -> str:
        """The key id that encrypts new rows (and that rotation moves rows to)."""
        ...

    def key(self, key_id: str) -> bytes:
        """The 32 bytes of ``key_id``.

        Raises:
            UnknownKeyError: The provider does not have that key.
        """
        ...


def check_key_id(key_id: object) -> str:
    """``key_id`` if it is a valid key id, else :class:`EncryptionConfigError`."""
    if not isinstance(key_id, str) or _KEY_ID.fullmatch(key_id) is None:
        raise EncryptionConfigError(
            f"a key id must be 1-64 characters of A-Z a-z 0-9 . _ -, got {key_id!r}"
        )
    return key_id


def _check_key(key_id: str, key: object) -> bytes:
    if isinstance(key, str):
        text = key.strip().replace("-", "+").replace("_", "/")  # the URL-safe alphabet too
        try:
            key = base64.b64decode(text.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise EncryptionConfigError(f"key {key_id!r} is not valid base64") from None
    if not isinstance(key, bytes | bytearray):
        raise EncryptionConfigError(f"key {key_id!r} must be bytes or base64 text")
    if len(key) != KEY_BYTES:
        raise EncryptionConfigError(
            f"key {key_id!r} is {len(key)} bytes; AES-256 needs exactly {KEY_BYTES}"
        )
    return bytes(key)


def generate_key() -> str:
    """A new random 256-bit key, base64-encoded (the text format's value)."""
    return base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode("ascii")


def parse_keys(text: str, *, source: str) -> tuple[str, dict[str, bytes]]:
    """``(current key id, {key id: key})`` of the text format (see the module docstring).

    Args:
        text: ``kid:base64key`` items separated by commas or new lines; ``#``
            starts a comment that runs to the end of its line.
        source: Names where the text came from in errors (never the text).

    Raises:
        EncryptionConfigError: No key, a malformed item, a key id twice, a bad key.
    """
    items: list[str] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        items.extend(part.strip() for part in line.split(",") if part.strip())
    if not items:
        raise EncryptionConfigError(f"{source} holds no key")
    keys: dict[str, bytes] = {}
    for number, item in enumerate(items, start=1):
        key_id, colon, value = item.partition(":")
        if not colon:
            raise EncryptionConfigError(
                f"{source}: item {number} is not 'kid:base64key' (no ':' found)"
            )
        key_id = check_key_id(key_id.strip())
        if key_id in keys:
            raise EncryptionConfigError(f"{source}: key id {key_id!r} is given twice")
        keys[key_id] = _check_key(key_id, value)
    return next(iter(keys)), keys


class KeyRing:
    """Keys held in memory: a fixed set, one of them current.

    Args:
        keys: ``{key id: key}``, each key 32 bytes or their base64 text.
        current: The key id that encrypts new rows; default: the first of ``keys``.

    Raises:
        EncryptionConfigError: No key, a bad key id or key, ``current`` not in ``keys``.
    """

    def __init__(self, keys: Mapping[str, bytes | str], *, current: str | None = None) -> None:
        if not keys:
            raise EncryptionConfigError("a KeyRing needs at least one key")
        self._keys = {check_key_id(kid): _check_key(kid, key) for kid, key in keys.items()}
        self._current = next(iter(self._keys)) if current is None else check_key_id(current)
        if self._current not in self._keys:
            raise EncryptionConfigError(f"the current key {self._current!r} is not in the ring")

    @classmethod
    def from_env(cls, var: str = ENV_ENCRYPTION_KEYS) -> KeyRing:
        """The keys in the environment variable ``var`` (the text format, current first).

        Raises:
            EncryptionConfigError: ``var`` is unset or empty, or malformed
                (the message names the variable, never its value).
        """
        text = os.environ.get(var, "")
        if not text.strip():
            raise EncryptionConfigError(f"{var} is not set (kid:base64key,..., current first)")
        current, keys = parse_keys(text, source=var)
        return cls(keys, current=current)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> KeyRing:
        """The keys in the file at ``path`` (the text format, current first).

        Raises:
            EncryptionConfigError: The file cannot be read or is malformed.
        """
        file = Path(path)
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise EncryptionConfigError(
                f"cannot read the key file {file}: {type(exc).__name__}"
            ) from None
        current, keys = parse_keys(text, source=f"key file {file}")
        return cls(keys, current=current)

    @property
    def key_ids(self) -> list[str]:
        """Every key id of the ring, the current one first."""
        return [self._current, *(k for k in self._keys if k != self._current)]

    def current_key_id(self) -> str:
        """The key id that encrypts new rows."""
        return self._current

    def key(self, key_id: str) -> bytes:
        """The key ``key_id`` (:class:`UnknownKeyError` when the ring does not hold it)."""
        try:
            return self._keys[key_id]
        except KeyError:
            raise UnknownKeyError(f"the key ring has no key {key_id!r}") from None

    def __repr__(self) -> str:
        return f"KeyRing(current={self._current!r}, key_ids={self.key_ids!r})"


class CallbackKeys:
    """Keys fetched by a callable (a KMS, a secrets vault), each fetched once and kept.

    Args:
        current: The key id that encrypts new rows, or a callable answering it
            (asked on every write, so a rotation needs no restart).
        fetch: ``fetch(key_id) -> bytes`` (32 bytes, or their base64 text);
            it raises, or returns ``None``, for a key it does not have.
        cache: Keep each fetched key in memory (default ``True``).
    """

    def __init__(
        self,
        current: str | Callable[[], str],
        fetch: Callable[[str], bytes | str | None],
        *,
        cache: bool = True,
    ) -> None:
        if isinstance(current, str):
            check_key_id(current)
        self._current = current
        self._fetch = fetch
        self._cache = cache
        self._keys: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def current_key_id(self) -> str:
        """The key id that encrypts new rows."""
        current = self._current if isinstance(self._current, str) else self._current()
        return check_key_id(current)

    def key(self, key_id: str) -> bytes:
        """The key ``key_id``, fetched on first use."""
        with self._lock:
            found = self._keys.get(key_id)
        if found is not None:
            return found
        try:
            fetched = self._fetch(key_id)
        except Exception as exc:
            raise UnknownKeyError(
                f"the key provider could not fetch key {key_id!r}: {type(exc).__name__}"
            ) from exc
        if fetched is None:
            raise UnknownKeyError(f"the key provider has no key {key_id!r}")
        key = _check_key(key_id, fetched)
        if self._cache:
            with self._lock:
                self._keys[key_id] = key
        return key

    def __repr__(self) -> str:
        return f"CallbackKeys(fetch={getattr(self._fetch, '__name__', 'callable')})"
