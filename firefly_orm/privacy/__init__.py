"""Privacy at rest: field-level encryption, redaction, key rotation.

Wrap a store with :func:`protect` and hand the result to the memory layers::

    from firefly_orm.privacy import Encryption, KeyRing, protect

    keys = KeyRing.from_env()  # FIREFLY_AGENTIC_MEMORY_ENCRYPTION_KEYS="k2:...,k1:..."
    store = protect(SQLiteStore("memory.db"), encryption=Encryption(keys))
    manager = MemoryManager(store=store, user_id="u1")

* :class:`Encryption`: AES-256-GCM (the ``encryption`` extra) of every
  entry's ``content`` in the chosen namespaces, the key id stored in each row,
  the ciphertext bound to its row; ``search_text`` of an encrypted namespace is
  never stored unless kept in clear on purpose (``searchable=``).
* Key providers: :class:`KeyRing` (in memory, from the environment, from a
  file), :class:`CallbackKeys` (a KMS), or anything with
  ``current_key_id()`` and ``key(kid)`` (:class:`KeyProvider`).
* :func:`rotate_keys` / :func:`async_rotate_keys` (and ``firefly-orm
  rotate-keys``): re-encrypt every row under the current key in bounded
  batches, resumable after a crash.
* Redaction: a redactor given to :func:`protect` runs before encryption on
  every save; the saved entry's ``metadata["redactions"]`` records what was
  redacted (never the value).

The guide: ``docs/guide/encryption.md``.
"""

from __future__ import annotations

from firefly_orm.privacy._detectors import (
    DEFAULT_DETECTORS,
    CardDetector,
    Detector,
    EmailDetector,
    IbanDetector,
    PhoneDetector,
    RedactionError,
    RegexDetector,
)
from firefly_orm.privacy._encryption import (
    ALGORITHM,
    ENVELOPE_KEY,
    Encryption,
    envelope_key_id,
)
from firefly_orm.privacy._errors import (
    DecryptionError,
    EncryptedSearchError,
    EncryptionConfigError,
    EncryptionError,
    UnknownKeyError,
)
from firefly_orm.privacy._hook import (
    REDACTIONS_KEY,
    ContentRedactor,
    ProtectedStore,
    Protection,
    RedactionRecord,
    protect,
)
from firefly_orm.privacy._keys import CallbackKeys, KeyProvider, KeyRing, generate_key
from firefly_orm.privacy._redaction import (
    DEFAULT_REPLACEMENT,
    MAX_REDACTION_PASSES,
    Redaction,
    Redactor,
)
from firefly_orm.privacy._rotate import (
    RotationProgress,
    RotationReport,
    async_rotate_keys,
    rotate_keys,
    store_namespaces,
)

__all__ = [
    "ALGORITHM",
    "DEFAULT_DETECTORS",
    "DEFAULT_REPLACEMENT",
    "ENVELOPE_KEY",
    "MAX_REDACTION_PASSES",
    "REDACTIONS_KEY",
    "CallbackKeys",
    "CardDetector",
    "ContentRedactor",
    "DecryptionError",
    "Detector",
    "EmailDetector",
    "EncryptedSearchError",
    "Encryption",
    "EncryptionConfigError",
    "EncryptionError",
    "IbanDetector",
    "KeyProvider",
    "KeyRing",
    "PhoneDetector",
    "ProtectedStore",
    "Protection",
    "Redaction",
    "RedactionError",
    "RedactionRecord",
    "Redactor",
    "RegexDetector",
    "RotationProgress",
    "RotationReport",
    "UnknownKeyError",
    "async_rotate_keys",
    "envelope_key_id",
    "generate_key",
    "protect",
    "rotate_keys",
    "store_namespaces",
]
