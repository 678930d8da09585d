"""Field-level encryption of ``MemoryEntry.content``: :class:`Encryption` and its envelope.

An encrypted row's ``content`` is one JSON object, the *envelope*::

    {"$enc": {"v": 1, "kid": "k2", "alg": "AES-256-GCM", "n": "<nonce>", "ct": "<ciphertext>"}}

``ct`` is the AES-256-GCM encryption (with its 16-byte tag) of the content's
compact JSON text, ``n`` its random 96-bit nonce (both base64), ``kid`` the key
id (:mod:`firefly_orm.privacy._keys`) and ``v`` the envelope's version.  The
key id lives inside the envelope, so no migration is needed and every store
(SQL, MongoDB, files, memory) stores it the same way.

The associated data binds the ciphertext to its row: the envelope's version,
algorithm and key id, the namespace, the entry id and the row's ``user_id``.
A ciphertext copied into another row (another id, another namespace, another
user's conversation), a row given to another user, or a ciphertext altered in
any bit fails to decrypt with :class:`DecryptionError`; so does
a row of an encrypted namespace whose content is not an envelope (unless
``allow_plaintext=True``, meant for a store that held plaintext before, until
:func:`~firefly_orm.privacy.rotate_keys` has encrypted every row).

Only ``content`` is encrypted: ``key``, ``user_id``, ``metadata``, the times,
``importance`` and ``version`` stay readable (the stores index and filter on
them).  ``search_text`` is the other field that can hold the same words; see
``searchable`` on :class:`Encryption`.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from firefly_orm.entry._json import load_json
from firefly_orm.errors import MissingExtraError
from firefly_orm.privacy._errors import DecryptionError, EncryptionConfigError, UnknownKeyError
from firefly_orm.privacy._keys import KeyProvider, check_key_id

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = ["ALGORITHM", "ENVELOPE_KEY", "ENVELOPE_VERSION", "Encryption", "envelope_key_id"]

#: The single key of an encrypted content.
ENVELOPE_KEY = "$enc"
#: The envelope's format version.
ENVELOPE_VERSION = 1
#: The one algorithm: AES-256 in Galois/Counter Mode (an AEAD).
ALGORITHM = "AES-256-GCM"
_NONCE_BYTES = 12
_FIELDS = frozenset({"v", "kid", "alg", "n", "ct"})


def _aesgcm_class() -> type[AESGCM]:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise MissingExtraError("field-level encryption", "encryption", "cryptography") from exc
    return AESGCM


def _prefixes(value: Sequence[str] | None, name: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise EncryptionConfigError(
            f"{name} must be a list of namespace prefixes (or None), got {type(value).__name__}"
        )
    for prefix in value:
        if not isinstance(prefix, str) or not prefix:
            raise EncryptionConfigError(f"{name} holds {prefix!r}: prefixes are non-empty strings")
    return tuple(value)


def envelope_key_id(content: Any) -> str | None:
    """The key id of an encrypted content, or ``None`` when ``content`` is no envelope."""
    if isinstance(content, dict) and len(content) == 1:
        body = content.get(ENVELOPE_KEY)
        if isinstance(body, dict):
            kid = body.get("kid")
            return kid if isinstance(kid, str) else None
    return None


class Encryption:
    """Which namespaces are encrypted, with which keys (an option of :func:`protect`).

    Args:
        keys: The key provider (:class:`~firefly_orm.privacy.KeyRing`,
            :class:`~firefly_orm.privacy.CallbackKeys` or your own).
        namespaces: Prefixes of the namespaces to encrypt (``"conversation:"``,
            ``"working:"``, ``"longterm"``...); ``None`` (the default): every namespace.
        searchable: Prefixes of encrypted namespaces whose ``search_text`` is
            kept **in clear**, so full-text search still works there (the words
            of long-term items are then readable in the table and its index).
            In every other encrypted namespace ``search_text`` is never stored
            and a search raises :class:`~firefly_orm.privacy.EncryptedSearchError`.
        allow_plaintext: Read rows of an encrypted namespace that hold plain
            content (written before encryption was turned on) instead of
            refusing them; :func:`~firefly_orm.privacy.rotate_keys` encrypts
            them.  Default ``False``: such a row is a :class:`DecryptionError`.

    Raises:
        EncryptionConfigError: A bad option.
        MissingExtraError: The ``encryption`` extra (``cryptography``) is not installed.
    """

    def __init__(
        self,
        keys: KeyProvider,
        *,
        namespaces: Sequence[str] | None = None,
        searchable: Sequence[str] = (),
        allow_plaintext: bool = False,
    ) -> None:
        if not isinstance(keys, KeyProvider):
            raise EncryptionConfigError(
                "keys must be a key provider (current_key_id(), key(kid)), "
                f"got {type(keys).__name__}"
            )
        self._aesgcm = _aesgcm_class()
        self.keys = keys
        self.namespaces = _prefixes(namespaces, "namespaces")
        self.searchable = _prefixes(searchable, "searchable") or ()
        self.allow_plaintext = bool(allow_plaintext)
        self._ciphers: dict[tuple[str, bytes], AESGCM] = {}
        self._lock = threading.Lock()
        check_key_id(keys.current_key_id())  # fail now, not on the first write

    def __repr__(self) -> str:
        return (
            f"Encryption(keys={self.keys!r}, namespaces={self.namespaces!r}, "
            f"searchable={self.searchable!r}, allow_plaintext={self.allow_plaintext})"
        )

    # ------------------------------------------------------------------ which rows

    def encrypts(self, namespace: str) -> bool:
        """Whether rows of ``namespace`` are encrypted."""
        prefixes = self.namespaces
        return prefixes is None or namespace.startswith(prefixes)

    def keeps_search_text(self, namespace: str) -> bool:
        """Whether ``search_text`` is stored (in clear) for ``namespace``."""
        return not self.encrypts(namespace) or namespace.startswith(self.searchable)

    def current_key_id(self) -> str:
        """The key id new rows are encrypted with."""
        return check_key_id(self.keys.current_key_id())

    # ------------------------------------------------------------------ the envelope

    def _cipher(self, key_id: str) -> AESGCM:
        key = self.keys.key(key_id)
        with self._lock:
            cipher = self._ciphers.get((key_id, key))
            if cipher is None:
                cipher = self._ciphers[(key_id, key)] = self._aesgcm(key)
        return cipher

    @staticmethod
    def _associated_data(key_id: str, namespace: str, entry_id: str, user_id: str | None) -> bytes:
        bound = [
            "firefly_orm.privacy",
            ENVELOPE_VERSION,
            ALGORITHM,
            key_id,
            namespace,
            entry_id,
            user_id,
        ]
        return json.dumps(bound, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    def seal(
        self,
        namespace: str,
        entry_id: str,
        content: Any,
        *,
        user_id: str | None = None,
        key_id: str | None = None,
    ) -> Any:
        """``content`` encrypted for the row ``(namespace, entry_id)`` of ``user_id``: its envelope.

        ``key_id`` defaults to the current key.
        """
        kid = self.current_key_id() if key_id is None else check_key_id(key_id)
        plain = json.dumps(content, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._cipher(kid).encrypt(
            nonce, plain.encode("utf-8"), self._associated_data(kid, namespace, entry_id, user_id)
        )
        return {
            ENVELOPE_KEY: {
                "v": ENVELOPE_VERSION,
                "kid": kid,
                "alg": ALGORITHM,
                "n": base64.b64encode(nonce).decode("ascii"),
                "ct": base64.b64encode(sealed).decode("ascii"),
            }
        }

    def open(
        self, namespace: str, entry_id: str, content: Any, *, user_id: str | None = None
    ) -> Any:
        """The plain content of the row ``(namespace, entry_id)`` of ``user_id``.

        Raises:
            DecryptionError: Not an envelope (and plaintext is not allowed),
                a malformed envelope, the wrong key, or an altered or moved row.
            UnknownKeyError: The envelope names a key the provider does not have.
        """
        where = f"entry {entry_id!r} in {namespace!r}"
        if envelope_key_id(content) is None:
            if self.allow_plaintext and not (isinstance(content, dict) and ENVELOPE_KEY in content):
                return content
            raise DecryptionError(
                f"{where} is not encrypted, but its namespace is (a row written around the "
                "encryption layer, or altered; allow_plaintext=True reads rows written "
                "before encryption was turned on)"
            )
        body = content[ENVELOPE_KEY]
        if set(body) != _FIELDS or body["v"] != ENVELOPE_VERSION or body["alg"] != ALGORITHM:
            raise DecryptionError(f"{where} holds a malformed or unknown encryption envelope")
        kid = body["kid"]
        try:
            nonce = base64.b64decode(str(body["n"]), validate=True)
            sealed = base64.b64decode(str(body["ct"]), validate=True)
        except (binascii.Error, ValueError):
            raise DecryptionError(f"{where} holds a malformed encryption envelope") from None
        try:
            cipher = self._cipher(kid)
        except UnknownKeyError as exc:
            raise UnknownKeyError(f"{where} is encrypted with key {kid!r}: {exc}") from None
        try:
            bound = self._associated_data(kid, namespace, entry_id, user_id)
            plain = cipher.decrypt(nonce, sealed, bound)
        except Exception:  # InvalidTag, or a nonce of the wrong length
            raise DecryptionError(
                f"{where} cannot be decrypted with key {kid!r}: the wrong key, or the row "
                "was altered (its content or owner) or copied from another row"
            ) from None
        try:
            return load_json(plain)
        except ValueError:
            raise DecryptionError(f"{where} decrypted to invalid JSON") from None
