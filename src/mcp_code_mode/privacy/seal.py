"""The key from ``CODE_MODE_PII_KEY``, AES-GCM sealing and the HMACs the persisted forms of the vault use.

Whatever personal data the host keeps outside its memory (the persisted vault, the values behind a stored
run's tokens) is kept sealed: encrypted and authenticated with AES-256-GCM under a key only the host has.
Whatever must be found again without being readable (a client's name, a value, to find its token) is kept as
an HMAC-SHA256 under the same key. Without the key neither can be read or checked against a guess; with it,
every process that has it (the replicas of one deployment) reads what the others wrote.

The key (``load_key``) is one of:

- 64 hexadecimal characters (32 bytes);
- the base64 of exactly 32 bytes, in the standard or the URL-safe alphabet, with or without its padding;
- a passphrase of at least ``MIN_PASSPHRASE`` characters, stretched to 32 bytes with scrypt
  (``SCRYPT_N``, ``SCRYPT_R``, ``SCRYPT_P``) over the fixed salt ``PASSPHRASE_SALT``. The salt is fixed so
  that every process derives the same key from the same passphrase; it therefore does not slow down a guess
  of a common passphrase made against every deployment at once: prefer a random key.

Spaces and line breaks around the text are ignored. A text that reads as one of the first two forms is taken
as that form, never as a passphrase. A ``Sealer`` never uses the key itself: it derives one subkey for
sealing, one for MACs and one for its fingerprint (``key_id``), with HKDF-SHA256 and distinct ``info``
strings, so that no two uses share a key. Without ``CODE_MODE_PII_KEY`` the host uses ``Sealer.ephemeral``:
a random key that lives and dies with the process, so what it sealed can be opened by no one else, not even
the same deployment after a restart.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

ENV_VAR = "CODE_MODE_PII_KEY"
KEY_BYTES = 32
MIN_PASSPHRASE = 20
"""The shortest passphrase accepted, in characters."""
PASSPHRASE_SALT = b"mcp-code-mode/CODE_MODE_PII_KEY/passphrase/v1"
"""scrypt's salt for a passphrase: fixed and public, so that every process derives the same key."""
SCRYPT_N = 2**15
SCRYPT_R = 8
SCRYPT_P = 1
"""scrypt's cost: 32 MiB of memory and about a tenth of a second, once per process."""

VERSION = 1
"""The first byte of a sealed blob: the format (this key derivation, AES-256-GCM, a 12-byte nonce)."""
NONCE_BYTES = 12
TAG_BYTES = 16
OVERHEAD = 1 + NONCE_BYTES + TAG_BYTES
"""How many bytes a sealed blob has beyond its data."""

Bytes = bytes | bytearray | memoryview
_BYTES = (bytes, bytearray, memoryview)
_SEAL_INFO = b"mcp-code-mode pii seal v1"
_MAC_INFO = b"mcp-code-mode pii mac v1"
_ID_INFO = b"mcp-code-mode pii key id v1"
_HEX_KEY = re.compile(r"[0-9a-fA-F]{64}")
_BASE64_KEY = re.compile(r"[A-Za-z0-9+/]{43}=?|[A-Za-z0-9_-]{43}=?")
_FORMS = (
    f"{ENV_VAR} is not a usable key: give 64 hexadecimal characters (32 bytes), the base64 of exactly "
    f"32 bytes (standard or URL-safe alphabet, padding optional), or a passphrase of at least "
    f"{MIN_PASSPHRASE} characters"
)


def load_key(text: str) -> bytes:
    """The 32-byte key a ``CODE_MODE_PII_KEY`` text stands for (the forms are in the module's description).

    Raises ``ValueError`` naming ``CODE_MODE_PII_KEY`` and the accepted forms for any other text; the message
    never contains the text itself, which may be a mistyped key.
    """
    key = text.strip()
    if _HEX_KEY.fullmatch(key):
        return bytes.fromhex(key)
    if _BASE64_KEY.fullmatch(key):
        standard = key.rstrip("=").replace("-", "+").replace("_", "/") + "="
        try:
            decoded = base64.b64decode(standard, validate=True)
        except binascii.Error:  # not reached for 43 characters of the alphabet; kept for safety
            decoded = b""
        if len(decoded) == KEY_BYTES:
            return decoded
    if len(key) >= MIN_PASSPHRASE:
        return hashlib.scrypt(
            key.encode("utf-8", "surrogatepass"),
            salt=PASSPHRASE_SALT,
            n=SCRYPT_N,
            r=SCRYPT_R,
            p=SCRYPT_P,
            maxmem=256 * SCRYPT_N * SCRYPT_R,
            dklen=KEY_BYTES,
        )
    reason = "it is empty" if not key else f"it is shorter than {MIN_PASSPHRASE} characters"
    raise ValueError(f"{_FORMS} ({reason})")


def _derive(key: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=info).derive(key)


def _encode(parts: tuple[str, ...]) -> bytes:
    """The parts as one byte string from which they can be read back: each one's UTF-8 length, then it."""
    chunks: list[bytes] = []
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        chunks.append(len(data).to_bytes(8, "big"))
        chunks.append(data)
    return b"".join(chunks)


class Sealer:
    """Seals (AES-256-GCM) and MACs (HMAC-SHA256) under one 32-byte key. Thread-safe; holds no other state.

    A sealed blob is ``VERSION`` (one byte), a random 12-byte nonce, then the ciphertext and its 16-byte tag;
    the version byte and the caller's ``aad`` are authenticated with it. ``open`` gives the data back only
    for the same key and the same ``aad``, and None for anything else. With random nonces one key may seal
    about 2**32 blobs before a nonce is likely to repeat; the vault seals one per value it holds.
    """

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"a sealing key is {KEY_BYTES} bytes, got {len(key)}")
        self._aead = AESGCM(_derive(key, _SEAL_INFO))
        self._mac_key = _derive(key, _MAC_INFO)
        self._key_id = hmac.digest(_derive(key, _ID_INFO), b"key id", "sha256").hex()[:8]

    @classmethod
    def ephemeral(cls) -> Sealer:
        """A sealer with a random key held only by this process (what the host uses when no key is set)."""
        return cls(os.urandom(KEY_BYTES))

    @classmethod
    def from_text(cls, text: str) -> Sealer:
        """A sealer for a ``CODE_MODE_PII_KEY`` text (``load_key``: ``ValueError`` for a bad one)."""
        return cls(load_key(text))

    @property
    def key_id(self) -> str:
        """8 hexadecimal characters that tell keys apart (in logs, ``doctor``): not secret, and no help in
        finding the key. Two processes whose ids differ cannot read each other's sealed values."""
        return self._key_id

    def seal(self, data: bytes, aad: bytes = b"") -> bytes:
        """``data`` encrypted and authenticated, bound to ``aad`` (which is not stored: ``open`` needs it)."""
        nonce = os.urandom(NONCE_BYTES)
        version = bytes((VERSION,))
        return version + nonce + self._aead.encrypt(nonce, data, version + aad)

    def open(self, blob: Bytes, aad: Bytes = b"") -> bytes | None:
        """The data ``seal`` sealed with this key and this ``aad``; None for anything else: another key or
        ``aad``, a blob altered or cut short, an unknown version, something that is not bytes. Never raises."""
        if not isinstance(blob, _BYTES) or not isinstance(aad, _BYTES):  # pyright: ignore[reportUnnecessaryIsInstance]
            return None  # an untyped caller's mistake
        raw, extra = bytes(blob), bytes(aad)
        if len(raw) < OVERHEAD or raw[0] != VERSION:
            return None
        nonce = raw[1 : 1 + NONCE_BYTES]
        try:
            return self._aead.decrypt(nonce, raw[1 + NONCE_BYTES :], raw[:1] + extra)
        except (InvalidTag, ValueError, OverflowError, TypeError):
            return None

    def mac(self, *parts: str) -> bytes:
        """HMAC-SHA256 (32 bytes) of the parts under the MAC subkey. The parts are length-prefixed, so
        ``mac("a", "bc")``, ``mac("ab", "c")`` and ``mac("abc")`` differ; the same parts under the same key
        always give the same MAC (that is what lets a value's token be found again)."""
        return hmac.digest(self._mac_key, _encode(parts), "sha256")

    def __repr__(self) -> str:
        return f"Sealer(key_id={self._key_id})"


__all__ = [
    "ENV_VAR",
    "KEY_BYTES",
    "MIN_PASSPHRASE",
    "OVERHEAD",
    "PASSPHRASE_SALT",
    "VERSION",
    "Sealer",
    "load_key",
]
