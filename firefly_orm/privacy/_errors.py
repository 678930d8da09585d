"""The errors of :mod:`firefly_orm.privacy` (re-exported there).

Every one is a :class:`~firefly_orm.errors.FireflyOrmError`; none of their
messages ever holds a key, a plaintext or a ciphertext.
"""

from __future__ import annotations

from firefly_orm.errors import FireflyOrmError, StoreCorruptedError, StoreError

__all__ = [
    "DecryptionError",
    "EncryptedSearchError",
    "EncryptionConfigError",
    "EncryptionError",
    "UnknownKeyError",
]


class EncryptionError(StoreError):
    """Base class of the errors of field-level encryption."""


class EncryptionConfigError(FireflyOrmError, ValueError):
    """A key or an encryption option is unusable (bad base64, wrong length, no key).

    Raised when the configuration is built, before anything is read or written.
    """


class UnknownKeyError(EncryptionError):
    """A row names a key id the key provider does not have (an old key dropped too soon?)."""


class DecryptionError(EncryptionError, StoreCorruptedError):
    """A row cannot be decrypted: the wrong key, or the row was altered or moved.

    Also raised for a row of an encrypted namespace that holds unencrypted
    content (unless :class:`~firefly_orm.privacy.Encryption` was told
    ``allow_plaintext=True``), so a plaintext row cannot be slipped in.
    """


class EncryptedSearchError(EncryptionError):
    """Full-text search in an encrypted namespace whose search text is not kept in clear.

    The search text of such rows is never stored (it would be plaintext in an
    index); name the namespace in ``Encryption(searchable=...)`` to keep it.
    """
