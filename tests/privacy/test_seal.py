"""The key from CODE_MODE_PII_KEY, sealing and MACs: the forms a key may take, what opens and what does not."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

import pytest

from mcp_code_mode.privacy.seal import ENV_VAR, MIN_PASSPHRASE, OVERHEAD, VERSION, Sealer, load_key

KEY = bytes(range(32))


# ----- the key -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        KEY.hex(),
        KEY.hex().upper(),
        base64.b64encode(KEY).decode(),
        base64.b64encode(KEY).decode().rstrip("="),
        base64.urlsafe_b64encode(KEY).decode(),
        base64.urlsafe_b64encode(KEY).decode().rstrip("="),
        f"  {KEY.hex()}\n",
    ],
    ids=["hex", "HEX", "base64", "base64-unpadded", "urlsafe", "urlsafe-unpadded", "hex-with-spaces"],
)
def test_a_key_in_any_accepted_form_is_the_same_32_bytes(text: str) -> None:
    assert load_key(text) == KEY


def test_base64_in_both_alphabets_is_read_where_they_differ() -> None:
    key = bytes([0xFB, 0xFF] * 16)  # encodes to '+' and '/' (standard) or '-' and '_' (URL-safe)
    standard = base64.b64encode(key).decode()
    urlsafe = base64.urlsafe_b64encode(key).decode()
    assert standard != urlsafe
    assert load_key(standard) == load_key(urlsafe) == load_key(urlsafe.rstrip("=")) == key


def test_a_passphrase_is_stretched_the_same_way_every_time() -> None:
    phrase = "correct horse battery staple"
    key = load_key(phrase)
    assert len(key) == 32
    assert load_key(phrase) == key
    assert load_key(f" {phrase}\n") == key  # spaces around it are not part of it
    assert load_key(phrase + "!") != key
    assert key != phrase.encode()[:32]


def test_the_shortest_passphrase_is_accepted() -> None:
    assert len(load_key("p" * MIN_PASSPHRASE)) == 32


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n",
        "hunter2",
        "s3cr3t-but-short",
        "x" * (MIN_PASSPHRASE - 1),
        KEY.hex()[:18],
    ],
    ids=["empty", "blank", "short", "short-with-dash", "one-too-short", "short-hex"],
)
def test_other_texts_are_refused_naming_the_variable_and_the_forms_but_not_the_text(text: str) -> None:
    with pytest.raises(ValueError) as raised:
        load_key(text)
    message = str(raised.value)
    assert ENV_VAR in message
    assert "64 hexadecimal" in message and "base64" in message and "passphrase" in message
    if text.strip():
        assert text.strip() not in message


def test_a_key_of_the_wrong_length_is_refused_by_the_sealer() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        Sealer(b"k" * 16)


# ----- sealing -----------------------------------------------------------------------------------


def test_seal_and_open_round_trip() -> None:
    sealer = Sealer(KEY)
    for data, aad in [(b"alice@example.com", b""), (b"", b"row"), (os.urandom(5000), b"\x00" * 40)]:
        blob = sealer.seal(data, aad)
        assert blob[0] == VERSION
        assert len(blob) == len(data) + OVERHEAD
        assert data not in blob or not data
        assert sealer.open(blob, aad) == data
        assert Sealer(KEY).open(blob, aad) == data  # the same key in another object (another process)


def test_open_gives_none_for_a_wrong_key_aad_or_blob() -> None:
    sealer = Sealer(KEY)
    blob = sealer.seal(b"4111 1111 1111 1111", b"client|[CARD_1]")
    assert Sealer(os.urandom(32)).open(blob, b"client|[CARD_1]") is None
    assert sealer.open(blob, b"client|[CARD_2]") is None
    assert sealer.open(blob) is None
    for i in range(len(blob)):  # any byte altered: version, nonce, ciphertext or tag
        tampered = bytearray(blob)
        tampered[i] ^= 0x01
        assert sealer.open(bytes(tampered), b"client|[CARD_1]") is None
    for cut in (0, 1, OVERHEAD - 1, len(blob) - 1):
        assert sealer.open(blob[:cut], b"client|[CARD_1]") is None
    assert sealer.open(blob + b"\x00", b"client|[CARD_1]") is None
    assert sealer.open(bytes([2]) + blob[1:], b"client|[CARD_1]") is None  # an unknown version


def test_open_never_raises_for_what_is_not_a_blob() -> None:
    sealer = Sealer(KEY)
    blob = sealer.seal(b"x")
    for bad in (None, "text", 12, 10**12, [1, 2], b"\x01" * 10**3):
        assert sealer.open(bad) is None  # pyright: ignore[reportArgumentType]
    assert sealer.open(blob, "aad") is None  # pyright: ignore[reportArgumentType]
    assert sealer.open(bytearray(blob)) == b"x"
    assert sealer.open(memoryview(blob)) == b"x"


def test_every_seal_has_a_new_nonce() -> None:
    sealer = Sealer(KEY)
    blobs = {sealer.seal(b"same value", b"same aad") for _ in range(200)}
    assert len(blobs) == 200
    assert len({blob[1:13] for blob in blobs}) == 200


# ----- MACs and the key's id ---------------------------------------------------------------------


def test_mac_is_deterministic_per_key_and_differs_across_keys() -> None:
    one, same, other = Sealer(KEY), Sealer(KEY), Sealer(os.urandom(32))
    mac = one.mac("value", "session-a", "email", "alice@example.com")
    assert len(mac) == 32
    assert same.mac("value", "session-a", "email", "alice@example.com") == mac
    assert other.mac("value", "session-a", "email", "alice@example.com") != mac
    assert one.mac("value", "session-b", "email", "alice@example.com") != mac


def test_mac_is_unambiguous() -> None:
    sealer = Sealer(KEY)
    macs = [
        sealer.mac("a", "bc"),
        sealer.mac("ab", "c"),
        sealer.mac("abc"),
        sealer.mac("abc", ""),
        sealer.mac("", "abc"),
        sealer.mac(),
        sealer.mac(""),
        sealer.mac("\x00\x00\x00\x00\x00\x00\x00\x01", "a"),
    ]
    assert len(set(macs)) == len(macs)


def test_mac_takes_any_string() -> None:
    sealer = Sealer(KEY)
    assert sealer.mac("\ud800") != sealer.mac("\ud801")  # lone surrogates, as JSON may carry them
    assert sealer.mac("é") == sealer.mac("\u00e9") != sealer.mac("e\u0301")  # no normalisation: exact strings


def test_mac_does_not_use_the_key_itself() -> None:
    sealer = Sealer(KEY)
    assert sealer.mac("x") != hmac.digest(KEY, b"\x00\x00\x00\x00\x00\x00\x00\x01x", hashlib.sha256)


def test_key_id_is_short_stable_and_tells_keys_apart() -> None:
    sealer = Sealer(KEY)
    assert len(sealer.key_id) == 8
    assert all(c in "0123456789abcdef" for c in sealer.key_id)
    assert Sealer(KEY).key_id == sealer.key_id
    assert Sealer(os.urandom(32)).key_id != sealer.key_id
    assert sealer.key_id not in KEY.hex()
    assert KEY.hex() not in repr(sealer) and sealer.key_id in repr(sealer)


def test_ephemeral_keys_differ_and_work() -> None:
    one, two = Sealer.ephemeral(), Sealer.ephemeral()
    assert one.key_id != two.key_id
    blob = one.seal(b"only here")
    assert one.open(blob) == b"only here"
    assert two.open(blob) is None


def test_from_text_is_load_key_then_a_sealer() -> None:
    assert Sealer.from_text(KEY.hex()).key_id == Sealer(KEY).key_id
    with pytest.raises(ValueError, match=ENV_VAR):
        Sealer.from_text("short")
