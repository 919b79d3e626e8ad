"""Secrets at rest: the keyring of ``WEBHOOKS_ENCRYPTION_KEYS``, its tokens and its fingerprints.

Pure: no environment, no database; the caller passes the variable's value (``Keyring.parse``) or
the key file's path (``load_or_create_key_file``). The value is ``kid:base64-32-bytes`` items,
comma separated; the first key encrypts, every key decrypts, so a rotation is "put the new key
first, re-encrypt, then drop the old one when ``key_id_of`` counts none under it".

A value is stored as the token ``v2:<kid>:<nonce>:<ciphertext>`` (base64url, unpadded): AES-256-GCM
under the key ``kid`` with a random 12-byte nonce, and associated data that binds it to its row and
to where it may be sent (the JSON list of the format, table, owner name, secret id, kid, purpose and
``bound``: for a credential, the options that say which host receives it), so a token copied to
another row or purpose, relabelled with another kid, or whose item was re-pointed by an edit of its
clear options, does not decrypt. ``v1`` tokens (before #37: no purpose, no ``bound``) still open
with their own associated data; ``needs_rotation`` says yes to them, so ``webhooks keys rotate``
(or the item's next write) seals them again as ``v2``.

Errors, beside ``webhooks.errors``' tree::

    ConfigError
    └── UnknownKeyError     a token's kid is not configured (start-up fails closed, naming it)
    WebhooksError
    └── UndecryptableError  a token altered, malformed or copied from another row

No message ever holds key material, a plaintext or a token's ciphertext.
Proved by ``tests/service/test_keys.py``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
import secrets
from collections.abc import Sequence
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from webhooks.errors import ConfigError, WebhooksError

VARIABLE = "WEBHOOKS_ENCRYPTION_KEYS"
TOKEN_VERSION = "v2"
VERSIONS = ("v1", TOKEN_VERSION)  # what opens; only the last is written
KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12  # random per value: safe to 2**32 values per key (NIST SP 800-38D), far past any deployment
TAG_BYTES = 16
KEY_ID = re.compile(r"[A-Za-z0-9_.-]{1,32}")
FINGERPRINT_INFO = b"webhooks fingerprint"
FINGERPRINT_HEX = 16  # 64 bits: enough to tell secrets apart on a page, short enough to read
LOCAL_KEY_PREFIX = "local-"  # a generated key's id: the prefix and 8 random hex digits, its own


class UnknownKeyError(ConfigError):
    """A token names a key id the keyring lacks: its secret cannot be read until the key is back."""

    def __init__(self, kid: str) -> None:
        self.kid = kid
        super().__init__(
            f"encryption key {kid!r} is not in {VARIABLE}: add it back "
            f"(any position after the first) until `webhooks keys status` counts no row under it"
        )


class UndecryptableError(WebhooksError):
    """A token that does not open: malformed, altered, or bound to another row."""


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64url(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)


def _key_bytes(text: str) -> bytes:
    """Standard or URL-safe base64, padding optional: ``openssl rand -base64 32`` and Python's
    ``urlsafe_b64encode`` both paste as they are."""
    text = text.strip().replace("-", "+").replace("_", "/")
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


def _associated_data(version: str, table: str, owner: str, secret_id: str, kid: str, purpose: str, bound: str) -> bytes:
    # A JSON list is unambiguous whatever the names hold (``a,b`` + ``c`` never equals ``a`` + ``b,c``).
    fields = [version, table, owner, secret_id, kid] + ([purpose, bound] if version != "v1" else [])
    return json.dumps(fields, separators=(",", ":")).encode()


def _split(token: str) -> tuple[str, bytes, bytes]:
    """(kid, nonce, ciphertext with its tag) of a well-formed token."""
    parts = token.split(":")
    if len(parts) != 4 or parts[0] not in VERSIONS or not KEY_ID.fullmatch(parts[1]):
        raise UndecryptableError(f"not a {TOKEN_VERSION}:<kid>:<nonce>:<ciphertext> token")
    try:
        nonce, sealed = _unb64url(parts[2]), _unb64url(parts[3])
    except (binascii.Error, ValueError):
        raise UndecryptableError(f"token under key {parts[1]!r} is not base64url") from None
    if len(nonce) != NONCE_BYTES or len(sealed) < TAG_BYTES:
        raise UndecryptableError(f"token under key {parts[1]!r} is truncated")
    return parts[1], nonce, sealed


def key_id_of(token: str) -> str:
    """The key id a token was sealed under, without opening it (``webhooks keys status``)."""
    return _split(token)[0]


class Keyring:
    """The configured keys in order; the first encrypts and makes fingerprints, all decrypt."""

    def __init__(self, keys: Sequence[tuple[str, bytes]]) -> None:
        """Keys already checked (``parse`` says which item is wrong); a bad one here is a bug."""
        self._keys = dict(keys)
        if not keys or len(self._keys) != len(keys) or any(len(k) != KEY_BYTES for k in self._keys.values()):
            raise ValueError("a keyring needs distinct key ids, each with 32 bytes of key")
        self.key_ids: tuple[str, ...] = tuple(kid for kid, _ in keys)
        self._ciphers: dict[str, AESGCM] = {}

    def __repr__(self) -> str:  # never the keys: a keyring may end up in a traceback or a log
        return f"Keyring(key_ids={self.key_ids!r})"

    @classmethod
    def parse(cls, value: str, *, source: str = VARIABLE) -> Keyring:
        """The keyring of a ``kid:base64-32-bytes,…`` value; ``source`` names it in errors (the
        variable, or a key file's path). Callers treat an unset or blank variable as "no key"."""
        keys: list[tuple[str, bytes]] = []
        for position, item in enumerate(value.split(","), 1):
            item = item.strip()
            where = f"{source}: item {position}"
            if not item:
                raise ConfigError(f"{where} is empty; expected kid:base64-32-bytes, comma separated")
            kid, colon, material = item.partition(":")
            kid = kid.strip()
            if not colon:
                raise ConfigError(f"{where} has no ':'; expected kid:base64-32-bytes")
            if not KEY_ID.fullmatch(kid):
                # Not echoed: a key pasted before its id would be printed.
                raise ConfigError(f"{where}: the key id must be 1 to 32 of A-Z a-z 0-9 _ . -")
            try:
                key = _key_bytes(material)
            except (binascii.Error, ValueError):
                raise ConfigError(f"{where}: key {kid!r} is not base64") from None
            if len(key) != KEY_BYTES:
                raise ConfigError(
                    f"{where}: key {kid!r} decodes to {len(key)} bytes, not {KEY_BYTES} "
                    "(make one with: openssl rand -base64 32)"
                )
            if earlier := [p for p, (k, _) in enumerate(keys, 1) if k == kid]:
                raise ConfigError(f"{where}: key id {kid!r} is already item {earlier[0]}")
            keys.append((kid, key))
        return cls(keys)

    @property
    def current_key_id(self) -> str:
        return self.key_ids[0]

    def _key(self, kid: str) -> bytes:
        try:
            return self._keys[kid]
        except KeyError:
            raise UnknownKeyError(kid) from None

    def _cipher(self, kid: str) -> AESGCM:
        """The AES-GCM of key ``kid``, made once (a reload opens thousands of tokens)."""
        cipher = self._ciphers.get(kid)
        if cipher is None:
            cipher = self._ciphers[kid] = AESGCM(self._key(kid))
        return cipher

    def encrypt(
        self, plaintext: bytes, *, table: str, owner: str, secret_id: str, purpose: str = "", bound: str = ""
    ) -> str:
        """A token of ``plaintext`` under the first key, bound to this row, its purpose and ``bound``."""
        kid = self.current_key_id
        nonce = os.urandom(NONCE_BYTES)
        data = _associated_data(TOKEN_VERSION, table, owner, secret_id, kid, purpose, bound)
        sealed = AESGCM(self._keys[kid]).encrypt(nonce, plaintext, data)
        return f"{TOKEN_VERSION}:{kid}:{_b64url(nonce)}:{_b64url(sealed)}"

    def decrypt(
        self, token: str, *, table: str, owner: str, secret_id: str, purpose: str = "", bound: str = ""
    ) -> bytes:
        """The plaintext of a token made for this row, purpose and ``bound`` (a ``v1`` token: this
        row); ``UnknownKeyError`` when its key is not configured, ``UndecryptableError`` when it is
        altered, belongs to another row, or ``bound`` is not what it was sealed with."""
        kid, nonce, sealed = _split(token)
        data = _associated_data(token.split(":", 1)[0], table, owner, secret_id, kid, purpose, bound)
        try:
            return self._cipher(kid).decrypt(nonce, sealed, data)
        except InvalidTag:
            raise UndecryptableError(
                f"{table} {owner!r} secret {secret_id!r}: the token under key {kid!r} does not open "
                "(altered, copied from another row, or where it may be sent was changed outside the admin "
                "API: set the credential again)"
            ) from None

    def needs_rotation(self, token: str) -> bool:
        """Whether ``webhooks keys rotate`` should re-encrypt it (sealed under another than the first
        key, or in the ``v1`` format, which binds no purpose and no host)."""
        return key_id_of(token) != self.current_key_id or not token.startswith(TOKEN_VERSION + ":")

    def _fingerprint_under(self, kid: str, secret: bytes) -> str:
        hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=FINGERPRINT_INFO)
        digest = hmac.new(hkdf.derive(self._key(kid)), secret, hashlib.sha256).hexdigest()
        return f"fp_{kid}_{digest[:FINGERPRINT_HEX]}"

    def fingerprint(self, secret: bytes) -> str:
        """``fp_<kid>_<16 hex>``: an HMAC-SHA-256 of ``secret`` under a key derived (HKDF) from the
        first key, so a low-entropy secret (``basic_auth``) cannot be guessed from it without the key.

        Stable by storage, not by recomputation: the caller computes it once, when the secret is
        stored, and keeps it beside the token. Rotation re-encrypts the token but leaves the stored
        fingerprint alone, so the API, the console and the audit show one value for a secret's whole
        life; the kid in the text says which key ``fingerprint_matches`` recomputes under. Deriving
        from a fixed key instead (the oldest, the first by name) would change when that key is
        removed; a key of its own would be a second variable to lose.
        """
        return self._fingerprint_under(self.current_key_id, secret)

    def fingerprint_matches(self, secret: bytes, fingerprint: str) -> bool:
        """Whether ``fingerprint`` (from ``fingerprint``, under any configured key) is ``secret``'s;
        ``UnknownKeyError`` when its key has been removed, ``False`` when it is not a fingerprint."""
        prefix, _, digest = fingerprint.rpartition("_")
        kid = prefix.removeprefix("fp_")
        if not prefix.startswith("fp_") or not KEY_ID.fullmatch(kid) or len(digest) != FINGERPRINT_HEX:
            return False
        return hmac.compare_digest(self._fingerprint_under(kid, secret).encode(), fingerprint.encode())


def load_or_create_key_file(path: Path) -> tuple[str, bool]:
    """The ``WEBHOOKS_ENCRYPTION_KEYS`` value kept in ``path`` (``<database file>.key``), and
    whether this call created it, with one fresh key under an id of its own (``local-<8 hex>``:
    never a constant, so a key made anew for a restored database is told from the one its rows
    name, and the missing-key check says which). Refused (``ConfigError``) when
    group or others may read or write it, or when it does not parse."""
    value = _read_key_file(path)
    if value is not None:
        return value, False
    kid = LOCAL_KEY_PREFIX + secrets.token_hex(4)
    value = f"{kid}:{base64.b64encode(os.urandom(KEY_BYTES)).decode('ascii')}"
    # Written whole under a temporary name, then linked into place: ``os.link`` fails if the name
    # exists, so two processes starting at once never see a half-written file, and the loser
    # reads the winner's key instead of writing another (which would strand its ciphertexts).
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as file:
            os.fchmod(fd, 0o600)  # whatever the umask
            file.write(value + "\n")
            file.flush()
            os.fsync(fd)  # a lost key is every stored secret lost
        try:
            os.link(temporary, path)
        except FileExistsError:
            kept = _read_key_file(path)
            if kept is None:  # removed again between the link and the read: not ours to fix
                raise ConfigError(f"key file {path} vanished while it was created; start again") from None
            return kept, False
    finally:
        temporary.unlink(missing_ok=True)
    _sync_directory(path.parent)
    return value, True


def _read_key_file(path: Path) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, encoding="ascii", errors="replace") as file:
        mode = os.fstat(fd).st_mode & 0o777
        if mode & 0o077:
            raise ConfigError(f"key file {path} is mode {mode:o}, open to group or others: chmod 600 {path}")
        value = file.read().strip()
    if not value:
        raise ConfigError(f"key file {path} is empty; remove it only if no secret was ever stored with it")
    Keyring.parse(value, source=f"key file {path}")
    return value


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
