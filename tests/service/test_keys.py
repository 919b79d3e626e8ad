"""``webhooks.configuration.keys``: tokens bound to their row and key, precise key errors without key material,
fingerprints that are keyed, the embedded default's key file, and generated secrets the kinds accept."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import stat
from pathlib import Path

import pytest

from webhooks.configuration.keys import (
    Keyring,
    UndecryptableError,
    UnknownKeyError,
    key_id_of,
    load_or_create_key_file,
)
from webhooks.errors import ConfigError

KEY_A = bytes(range(32))
KEY_B = bytes(range(100, 132))
B64_A = base64.b64encode(KEY_A).decode()
B64_B = base64.b64encode(KEY_B).decode()
ROW = {"table": "endpoint_secrets", "owner": "shop-eu", "secret_id": "sec_1"}
SECRET = b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
NOW = 1_700_000_000


def keyring(*items: str) -> Keyring:
    return Keyring.parse(",".join(items or (f"a:{B64_A}",)))


def sealed(ring: Keyring | None = None, plaintext: bytes = SECRET) -> str:
    """The one correct token every negative case derives from."""
    return (ring or keyring()).encrypt(plaintext, **ROW)


def relabelled(token: str, kid: str) -> str:
    version, _, nonce, ciphertext = token.split(":")
    return ":".join((version, kid, nonce, ciphertext))


def test_a_token_opens_for_its_own_row() -> None:
    token = sealed()
    assert token.startswith("v2:a:") and SECRET not in token.encode()
    assert keyring().decrypt(token, **ROW) == SECRET
    assert key_id_of(token) == "a"


def test_each_value_gets_its_own_nonce() -> None:
    assert sealed() != sealed()


@pytest.mark.parametrize("field", ["table", "owner", "secret_id"])
def test_a_token_copied_to_another_row_does_not_open(field: str) -> None:
    with pytest.raises(UndecryptableError, match="copied from another row"):
        keyring().decrypt(sealed(), **{**ROW, field: ROW[field] + "x"})


def test_the_row_fields_cannot_be_shifted_into_each_other() -> None:
    ring = keyring()
    # Each pair collides under some naive encoding: plain concatenation, a comma join, a quoted join.
    for made_for, opened_as in [
        (("t", "ab", "c"), ("t", "a", "bc")),
        (("t", "a,b", "c"), ("t", "a", "b,c")),
        (("t", 'a","b', "c"), ("t", "a", 'b","c')),
    ]:
        token = ring.encrypt(SECRET, table=made_for[0], owner=made_for[1], secret_id=made_for[2])
        with pytest.raises(UndecryptableError):
            ring.decrypt(token, table=opened_as[0], owner=opened_as[1], secret_id=opened_as[2])


def test_a_token_relabelled_with_another_kid_does_not_open_even_under_the_same_key() -> None:
    ring = keyring(f"a:{B64_A}", f"twin:{B64_A}")  # the kid is bound, not merely looked up
    with pytest.raises(UndecryptableError):
        ring.decrypt(relabelled(sealed(ring), "twin"), **ROW)


@pytest.mark.parametrize("part", [2, 3])
def test_a_tampered_token_does_not_open(part: int) -> None:
    pieces = sealed().split(":")
    raw = bytearray(base64.urlsafe_b64decode(pieces[part] + "=" * (-len(pieces[part]) % 4)))
    raw[0] ^= 1
    pieces[part] = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    with pytest.raises(UndecryptableError):
        keyring().decrypt(":".join(pieces), **ROW)


@pytest.mark.parametrize(
    "token", ["", "v1:a:x", "v3:a:AAAAAAAAAAAAAAAA:AAAAAAAAAAAAAAAAAAAAAA", "v1:a:AAAA:AAAA", "v1:a:!!:!!"]
)
def test_a_malformed_token_is_undecryptable(token: str) -> None:
    with pytest.raises(UndecryptableError):
        keyring().decrypt(token, **ROW)


def test_a_token_under_a_key_no_longer_configured_names_the_kid() -> None:
    token = sealed(keyring(f"k1:{B64_A}"))
    with pytest.raises(UnknownKeyError) as raised:
        keyring(f"k2:{B64_B}").decrypt(token, **ROW)
    assert raised.value.kid == "k1"
    assert isinstance(raised.value, ConfigError)  # start-up fails closed with one line
    message = str(raised.value)
    assert message.startswith("encryption key 'k1' is not in WEBHOOKS_ENCRYPTION_KEYS: add it back")
    assert "\n" not in message and B64_A not in message


def test_two_keys_the_first_encrypts_and_both_decrypt() -> None:
    old = keyring(f"old:{B64_A}")
    rotating = keyring(f"new:{B64_B}", f"old:{B64_A}")
    old_token = sealed(old)
    assert rotating.decrypt(old_token, **ROW) == SECRET
    new_token = sealed(rotating)
    assert key_id_of(new_token) == "new" and rotating.decrypt(new_token, **ROW) == SECRET
    assert rotating.needs_rotation(old_token) and not rotating.needs_rotation(new_token)
    assert rotating.key_ids == ("new", "old") and rotating.current_key_id == "new"


def test_items_may_be_spaced_and_keys_urlsafe_or_unpadded() -> None:
    key = b"\xfb\xff" * 16  # "+/" in standard base64, "-_" in the URL-safe alphabet
    urlsafe = base64.urlsafe_b64encode(key).decode().rstrip("=")
    ring = Keyring.parse(f"  b : {urlsafe} ,\ta:{B64_A} ")
    assert ring.key_ids == ("b", "a")
    assert keyring(f"b:{base64.b64encode(key).decode()}").decrypt(sealed(ring), **ROW) == SECRET


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "WEBHOOKS_ENCRYPTION_KEYS: item 1 is empty; expected kid:base64-32-bytes"),
        (f"a:{B64_A},", "WEBHOOKS_ENCRYPTION_KEYS: item 2 is empty"),
        (f"a:{B64_A}, ,b:{B64_B}", "WEBHOOKS_ENCRYPTION_KEYS: item 2 is empty"),
        (B64_A, "WEBHOOKS_ENCRYPTION_KEYS: item 1 has no ':'"),
        (f"a:{B64_A},{B64_B}", "WEBHOOKS_ENCRYPTION_KEYS: item 2 has no ':'"),
        (f"{B64_A}:a", "WEBHOOKS_ENCRYPTION_KEYS: item 1: the key id must be 1 to 32 of A-Z a-z 0-9 _ . -"),
        (f"bad kid:{B64_A}", "item 1: the key id must be"),
        (f":{B64_A}", "item 1: the key id must be"),
        (f"{'k' * 33}:{B64_A}", "item 1: the key id must be"),
        (f"a:{B64_A},b:{B64_B[:-4]}!!!!", "WEBHOOKS_ENCRYPTION_KEYS: item 2: key 'b' is not base64"),
        (f"a:{base64.b64encode(KEY_A[:16]).decode()}", "item 1: key 'a' decodes to 16 bytes, not 32"),
        (f"a:{base64.b64encode(KEY_A + b'x').decode()}", "item 1: key 'a' decodes to 33 bytes, not 32"),
        (f"a:{B64_A},b:{B64_B},a:{B64_B}", "WEBHOOKS_ENCRYPTION_KEYS: item 3: key id 'a' is already item 1"),
    ],
)
def test_each_parse_error_is_one_precise_line_without_the_key(value: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        Keyring.parse(value)
    text = str(raised.value)
    assert message in text and "\n" not in text
    for material in (B64_A, B64_B, B64_A[:16], B64_B[:16], B64_B[:-4]):
        assert material not in text


def test_a_keyring_never_shows_its_keys() -> None:
    ring = keyring(f"a:{B64_A}", f"b:{B64_B}")
    assert repr(ring) == str(ring) == "Keyring(key_ids=('a', 'b'))"


def test_a_fingerprint_is_keyed_stable_and_short() -> None:
    ring = keyring(f"a:{B64_A}", f"b:{B64_B}")
    fingerprint = ring.fingerprint(SECRET)
    assert fingerprint == ring.fingerprint(SECRET) and fingerprint.startswith("fp_a_") and len(fingerprint) == 21
    assert fingerprint != ring.fingerprint(SECRET + b"x")
    plain = hashlib.sha256(SECRET).hexdigest()
    assert fingerprint.removeprefix("fp_a_") not in plain
    assert keyring(f"a:{B64_B}").fingerprint(SECRET) != fingerprint  # another key: another fingerprint


def test_a_stored_fingerprint_still_matches_after_rotation_until_its_key_is_removed() -> None:
    stored = keyring(f"a_1:{B64_A}").fingerprint(SECRET)
    rotated = keyring(f"b:{B64_B}", f"a_1:{B64_A}")
    assert rotated.fingerprint(SECRET).startswith("fp_b_")
    assert rotated.fingerprint_matches(SECRET, stored)
    assert not rotated.fingerprint_matches(b"another", stored)
    assert not rotated.fingerprint_matches(SECRET, "fp_a_1_zz") and not rotated.fingerprint_matches(SECRET, "é")
    with pytest.raises(UnknownKeyError, match="'a_1'"):
        keyring(f"b:{B64_B}").fingerprint_matches(SECRET, stored)


def test_the_key_file_is_created_0600_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "webhooks.db.key"
    value, created = load_or_create_key_file(path)
    assert created and stat.S_IMODE(path.stat().st_mode) == 0o600
    ring = Keyring.parse(value)
    assert len(ring.key_ids) == 1 and re.fullmatch(r"local-[0-9a-f]{8}", ring.key_ids[0])  # an id of its own
    assert load_or_create_key_file(path) == (value, False)
    assert Keyring.parse(load_or_create_key_file(path)[0]).decrypt(sealed(ring), **ROW) == SECRET
    assert os.listdir(tmp_path) == ["webhooks.db.key"]  # no temporary file left behind


def test_the_key_file_is_0600_whatever_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0)
    try:
        load_or_create_key_file(tmp_path / "k.key")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "k.key").stat().st_mode) == 0o600


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660], ids=oct)
def test_a_key_file_others_may_read_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "webhooks.db.key"
    value, _ = load_or_create_key_file(path)
    path.chmod(mode)
    with pytest.raises(ConfigError) as raised:
        load_or_create_key_file(path)
    assert str(raised.value) == f"key file {path} is mode {mode:o}, open to group or others: chmod 600 {path}"
    assert value.split(":")[1] not in str(raised.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "is empty"),
        ("no colon here\n", "item 1 has no ':'"),
        ("local1:c2hvcnQ=\n", "key 'local1' decodes to 5 bytes"),
    ],
)
def test_a_malformed_key_file_is_refused_and_kept(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "webhooks.db.key"
    path.write_text(content)
    path.chmod(0o600)
    with pytest.raises(ConfigError, match=message) as raised:
        load_or_create_key_file(path)
    assert str(path) in str(raised.value) and "\n" not in str(raised.value)
    assert path.read_text() == content  # never overwritten: a replaced key strands every ciphertext


def test_two_processes_creating_the_key_file_at_once_keep_the_first_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "webhooks.db.key"
    winner = f"local1:{B64_B}"
    link = os.link

    def another_process_links_first(source: str | Path, target: str | Path) -> None:
        (tmp_path / "theirs").write_text(winner + "\n")
        (tmp_path / "theirs").chmod(0o600)
        link(tmp_path / "theirs", target)
        (tmp_path / "theirs").unlink()
        link(source, target)  # FileExistsError, as the loser of the race gets it

    monkeypatch.setattr(os, "link", another_process_links_first)
    assert load_or_create_key_file(path) == (winner, False)
    assert os.listdir(tmp_path) == ["webhooks.db.key"]


@pytest.mark.parametrize("field", ["purpose", "bound"])
def test_a_token_opens_only_for_its_purpose_and_where_it_was_bound(field: str) -> None:
    """#37: a credential sealed for one host (``bound``) or purpose does not open for another."""
    where = {"purpose": "api_key", "bound": '{"api_base":"https://api.stripe.com","item":"endpoint"}'}
    token = keyring().encrypt(SECRET, **ROW, **where)
    assert keyring().decrypt(token, **ROW, **where) == SECRET
    with pytest.raises(UndecryptableError, match="set the credential again"):
        keyring().decrypt(token, **ROW, **{**where, field: where[field] + "x"})


def test_a_v1_token_still_opens_and_asks_for_rotation() -> None:
    """Tokens written before the purpose and host were bound (format v1) open for their row, and
    ``keys rotate`` seals them again as v2 under the same key."""
    from tests.service.test_credential_binding import API_KEY, RING, V1_API_KEY

    secret_id, token = V1_API_KEY
    row = {"table": "config_secrets", "owner": "stripe-eu", "secret_id": secret_id}
    assert RING.decrypt(token, **row, purpose="api_key", bound="anything") == API_KEY.encode()
    assert RING.needs_rotation(token)
    with pytest.raises(UndecryptableError):
        RING.decrypt(token, **{**row, "owner": "stripe-us"})
