"""``privacy.detect``: each detector's shapes (found and not found), the overlap rule, custom kinds, the secret
finder, pathological inputs, and precision/recall on the labelled set (``data/pii_labelled.jsonl``)."""

from __future__ import annotations

import json
import random
import time
from collections import Counter

import pytest
from phonenumbers import Leniency, PhoneNumberMatcher

from mcp_code_mode.privacy.detect import (
    KINDS,
    MIN_SECRET_CHARS,
    CustomKind,
    Detectors,
    Found,
    Secrets,
    iban_valid,
    luhn_valid,
)

from .labelled import LABELLED, score

REGIONS = ("US", "GB", "DE", "FR")
"""The regions the labelled set's national-format numbers are read in."""


def found(text: str, kinds: tuple[str, ...] = KINDS, regions: tuple[str, ...] = REGIONS) -> list[tuple[str, str]]:
    results = Detectors(kinds, phone_regions=regions).find(text)
    for f in results:
        assert text[f.start : f.end] == f.value
    return [(f.kind, f.value) for f in results]


def values(text: str, kind: str, regions: tuple[str, ...] = REGIONS) -> list[str]:
    return [value for _, value in found(text, (kind,), regions)]


def secret_texts(text: str, literals: tuple[str, ...] = ()) -> list[str]:
    return [text[s:e] for s, e in Secrets(literals).find(text)]


# ----- e-mail -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("write to alice@example.com today", "alice@example.com"),
        ("bob.smith+newsletter@mail.example.co.uk", "bob.smith+newsletter@mail.example.co.uk"),
        ("j_doe-1985@sub.domain.example.org", "j_doe-1985@sub.domain.example.org"),
        ("ALICE.MARTIN@EXAMPLE.COM", "ALICE.MARTIN@EXAMPLE.COM"),
        ("Alice <alice@example.com>", "alice@example.com"),
        ('{"email":"grace@navy.example.mil"}', "grace@navy.example.mil"),
        ("Email me at x@y.io.", "x@y.io"),
        ("alice.o'neil@example.com", "alice.o'neil@example.com"),
        ("VALUES ('carla@example.de')", "carla@example.de"),
        ("?user=dmitri@example.net&ref=1", "dmitri@example.net"),
        ("bookings: sales@example.travel", "sales@example.travel"),
        ("1234@example.com", "1234@example.com"),
        ("wei@example.cn。", "wei@example.cn"),
    ],
)
def test_email_found(text: str, expected: str) -> None:
    assert values(text, "email") == [expected]


@pytest.mark.parametrize(
    "text",
    [
        "postgres://app@localhost:5432/db",  # no dot in the domain: a name on a host, not an address
        "alice@example is not an address",
        "name@domain.c",
        "write to user at example dot com",
        "john[at]example[dot]com",
        "icon@2x.png logo@3x.jpg",
        "npm install lodash@4.17.21 @types/node@20.11.5",
        "nginx@sha256:0d17b565c37bcbd895e9d92315a05c1c3c9a29f762b011a10c54a66cd53c9b31",
        "@alice and firstname.lastname@",
        "A@b@c@example.com",
        "alice@example.com_x",
        "alice@exa_mple.com",
    ],
)
def test_email_not_found(text: str) -> None:
    assert values(text, "email") == []


# ----- phone --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "number",
    ["(415) 555-0132", "415-555-0132", "415.555.0132", "415 555 0132", "+1 415 555 0132", "+14155550132",
     "+1 (646) 555-0123", "1-800-555-0199"],
)  # fmt: skip
def test_phone_us_formats(number: str) -> None:
    assert values(f"call {number} now", "phone", ("US",)) == [number]


@pytest.mark.parametrize(
    ("number", "region"),
    [("020 7946 0958", "GB"), ("030 1234567", "DE"), ("0171 2345678", "DE"), ("01 23 45 67 89", "FR"),
     ("06 12 34 56 78", "FR")],
)  # fmt: skip
def test_phone_national_format_needs_its_region(number: str, region: str) -> None:
    assert values(f"Tel. {number}", "phone", (region,)) == [number]
    assert values(f"Tel. {number}", "phone", ("US",)) == []


@pytest.mark.parametrize("number", ["+44 20 7946 0958", "+49 (0)30 2345678", "+33 1 42 68 53 00", "+81 3-1234-5678"])
def test_phone_e164_found_whatever_the_regions(number: str) -> None:
    for regions in [(), ("US",), ("DE",)]:
        assert values(f"Tel. {number}", "phone", regions) == [number]


@pytest.mark.parametrize(
    "text",
    [
        "released 2026-12-01 at 10:30",
        "due 01.02.2026 or 12/31/2025",
        "at 10:20:30.123456",
        "Python 3.11.2 and build 1.4.2.1",
        "Order 1234567 and order 123-456-7890",
        "(000) 000-0000 and 555-1234",
        "lat=37.7749295 lon=-122.4194155",
        "192.168.100.200",
        "sequence 1 2 3 4 5 6 7 8 9 10",
        "ISBN 978-3-16-148410-0",
        "x4155550132 and 4155550132.00 and 4155550132x",
        "/orders/4155550132 and ORD-4155550132",
    ],
)
def test_phone_not_found(text: str) -> None:
    assert values(text, "phone") == []


def test_phone_card_number_is_not_a_phone() -> None:
    # the phone detector alone, without the card detector to take the span from it
    assert values("card 4111 1111 1111 1111 and 5555-5555-5555-4444", "phone") == []


def test_phone_bare_digits_only_when_labelled() -> None:
    assert values("Invoice 4155550190 is due", "phone") == []
    assert values('{"order_id": 2125550143}', "phone") == []
    assert values("phone: 4155550190", "phone") == ["4155550190"]
    assert values('{"mobile_number": "4155550190"}', "phone") == ["4155550190"]
    assert values("+14155550190", "phone") == ["+14155550190"]


def test_phone_regions_checked() -> None:
    with pytest.raises(ValueError, match="XX"):
        Detectors(phone_regions=("XX",))
    assert Detectors(phone_regions=("gb",)).phone_regions == ("GB",)


# ----- card ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "card",
    ["4111 1111 1111 1111", "4111-1111-1111-1111", "4111111111111111", "5555 5555 5555 4444", "2223003122003222",
     "378282246310005", "3782 822463 10005", "6011111111111117", "3530111333300000", "30569309025904",
     "6200000000000005", "4012888888881881"],
)  # fmt: skip
def test_card_found(card: str) -> None:
    assert values(f"card: {card}, exp 12/28", "card") == [card]


@pytest.mark.parametrize(
    "text",
    [
        "4111 1111 1111 1112",  # Luhn fails
        "9999999999999995",  # Luhn-valid, no issuer
        "1234567890123452",  # Luhn-valid, no issuer
        "commit a4111111111111111b",  # inside a hex hash
        "4111111111111111ff and x4111111111111111",
        "41111111111111111111",  # a longer run
        "12 4111 1111 1111 1111 and 4111 1111 1111 1111 1111",
        "4111 1111-1111 1111",  # mixed separators
        "4111  1111  1111  1111",  # double spaces
        "4006381333931 and 4027380675693",  # EAN-13s (the second is Luhn-valid: a 13-digit Visa is no card here)
        "490154203237518",  # a Luhn-valid IMEI: Visa's prefix, not its length
        "4111 **** **** 1111",
    ],
)
def test_card_not_found(text: str) -> None:
    assert values(text, "card") == []


def test_luhn() -> None:
    assert luhn_valid("4111111111111111") and luhn_valid("79927398713")
    assert not luhn_valid("4111111111111112") and not luhn_valid("79927398710")


# ----- IBAN ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "iban",
    ["DE89 3704 0044 0532 0130 00", "DE89370400440532013000", "GB29NWBK60161331926819",
     "GB29 NWBK 6016 1331 9268 19", "FR14 2004 1010 0505 0001 3M02 606", "NL91ABNA0417164300", "BE68 5390 0754 7034",
     "NO93 8601 1117 947", "MT84 MALT 0110 0001 2345 MTLC AST0 01S", "de89370400440532013000"],
)  # fmt: skip
def test_iban_found(iban: str) -> None:
    assert values(f"IBAN: {iban}.", "iban") == [iban]


def test_iban_followed_by_a_short_word() -> None:
    assert values("BE68 5390 0754 7034 EUR 120.00", "iban") == ["BE68 5390 0754 7034"]


@pytest.mark.parametrize(
    "text",
    [
        "DE89 3704 0044 0532 0130 01",  # checksum
        "GB00NWBK60161331926819",
        "DE89 3704 0044 0532 0130",  # too short for DE
        "NL91ABNA04171643001",  # too long for NL
        "XX12 3456 7890 1234 56",  # no such country in the registry
        "xDE89370400440532013000 and DE89370400440532013000x",
        "VAT DE123456789, ISIN US0378331005",
        "DE89  3704  0044  0532  0130  00",
    ],
)
def test_iban_not_found(text: str) -> None:
    assert values(text, "iban") == []


def test_iban_valid() -> None:
    assert iban_valid("GB82WEST12345698765432")
    assert not iban_valid("GB82WEST12345698765433")
    assert not iban_valid("GB82WEST1234569876543")


# ----- IP -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("client 203.0.113.195 connected", "203.0.113.195"),
        ("upstream=10.0.12.7:8443", "10.0.12.7"),
        ("from 192.168.1.1.", "192.168.1.1"),
        ("ALLOW 198.51.100.23/32", "198.51.100.23"),
        ("2001:db8::ff00:42:8329", "2001:db8::ff00:42:8329"),
        ("full 2001:0db8:85a3:0000:0000:8a2e:0370:7334", "2001:0db8:85a3:0000:0000:8a2e:0370:7334"),
        ("mapped ::ffff:192.0.2.128", "::ffff:192.0.2.128"),
        ("link fe80::1ff:fe23:4567:890a%eth0", "fe80::1ff:fe23:4567:890a"),
        ("[2001:db8::1]:8080", "2001:db8::1"),
        ("fe80::1 up", "fe80::1"),
    ],
)
def test_ip_found(text: str, expected: str) -> None:
    assert values(text, "ip") == [expected]


@pytest.mark.parametrize(
    "text",
    [
        "Python 3.11.2",
        "version 1.2.3.4.5 and OID 1.3.6.1.4.1.311",
        "192.168.01.1 and 256.1.1.1 and 10.0.0",
        "v1.2.3.4 and version 10.2.0.45 and section 4.2.1.3",
        "127.0.0.1 and 0.0.0.0 and ::1 and :: and ::ffff:127.0.0.1",  # no person's
        "224.0.0.251 and ff02::1 and 255.255.255.0 and 255.255.255.255",
        "MAC 00:1a:2b:3c:4d:5e and 12:30:45",
        "std::vector<int> and xs[a::b] and ys[1::2]",
        "x2001:db8::1 and 2001:db8::1x",
    ],
)
def test_ip_not_found(text: str) -> None:
    assert values(text, "ip") == []


# ----- SSN ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SSN 536-22-8726", "536-22-8726"),
        ("on file: 219-09-9999.", "219-09-9999"),
        ("SSN: 536228726", "536228726"),
        ("SSN#536228726", "536228726"),
        ('"ssn": "401882931"', "401882931"),
        ("Social Security Number: 123 45 6789", "123 45 6789"),
        ("social_security_no=432129876", "432129876"),
    ],
)
def test_ssn_found(text: str, expected: str) -> None:
    assert values(text, "ssn") == [expected]


@pytest.mark.parametrize(
    "text",
    [
        "000-12-3456",
        "666-45-6789",
        "900-12-3456 and 999-12-3456",
        "123-00-4567",
        "123-45-0000",
        "ref 234567890",  # bare, unlabelled
        "SSN 000123456",
        "123-45-67890 and 0123-45-6789 and x123-45-6789",
        "12-3456789",
        "123 45 6789",  # spaced, unlabelled
        "lessn 234567890",
    ],
)
def test_ssn_not_found(text: str) -> None:
    assert values(text, "ssn") == []


# ----- the overlap rule ---------------------------------------------------------------------------


def test_results_sorted_and_disjoint() -> None:
    rows = LABELLED.read_text(encoding="utf-8").splitlines()
    detectors = Detectors(phone_regions=REGIONS, custom=[CustomKind("digits", r"\d{3,}")])
    for row in rows:
        text = json.loads(row)["text"]
        results = detectors.find(text)
        assert all(a.end <= b.start for a, b in zip(results, results[1:], strict=False)), text
        assert all(text[f.start : f.end] == f.value for f in results)


def test_overlap_longer_wins() -> None:
    custom = CustomKind("ref", r"ref-\d{16}")
    results = Detectors(custom=[custom]).find("paid with ref-4111111111111111 today")
    assert [(f.kind, f.value) for f in results] == [("ref", "ref-4111111111111111")]
    short = CustomKind("last4", r"1111(?= today)")
    results = Detectors(custom=[short]).find("card 4111111111111111 today")
    assert [(f.kind, f.value) for f in results] == [("card", "4111111111111111")]


def test_overlap_earlier_wins_at_equal_length() -> None:
    results = Detectors((), custom=[CustomKind("b", "cdef"), CustomKind("a", "abcd")]).find("xabcdefx")
    assert results == [Found(1, 5, "a", "abcd")]


def test_overlap_custom_wins_a_tie() -> None:
    custom = CustomKind("customer_email", r"[a-z]+@example\.com")
    results = Detectors(custom=[custom]).find("to alice@example.com")
    assert [(f.kind, f.value) for f in results] == [("customer_email", "alice@example.com")]


def test_overlap_ssn_before_phone_at_the_same_span() -> None:
    # 069-80-2030 is also a valid Frankfurt number
    assert found("069-80-2030", ("phone", "ssn"), ("DE",)) == [("ssn", "069-80-2030")]
    assert found("069-80-2030", ("phone",), ("DE",)) == [("phone", "069-80-2030")]


def test_overlap_chain() -> None:
    # a overlaps b, b overlaps c; b is the longest and is kept alone
    detectors = Detectors((), custom=[CustomKind("a", "abc"), CustomKind("b", "cdefg"), CustomKind("c", "gh")])
    assert [(f.kind, f.value) for f in detectors.find("abcdefgh")] == [("b", "cdefg")]
    detectors = Detectors((), custom=[CustomKind("a", "abcd"), CustomKind("b", "defg"), CustomKind("c", "ghij")])
    assert [(f.kind, f.value) for f in detectors.find("abcdefghij")] == [("a", "abcd"), ("c", "ghij")]


# ----- custom kinds and the Detectors object ------------------------------------------------------


def test_custom_kind_found() -> None:
    detectors = Detectors((), custom=[CustomKind("employee_id", r"\bE\d{6}\b")])
    assert detectors.find("E123456 and E1234567") == [Found(0, 7, "employee_id", "E123456")]


@pytest.mark.parametrize(
    ("kind", "regex", "message"),
    [
        ("Employee", r"E\d+", "lower-case"),
        ("1st", r"E\d+", "lower-case"),
        ("a" * 33, r"E\d+", "lower-case"),
        ("employee-id", r"E\d+", "lower-case"),
        ("email", r"E\d+", "built-in"),
        ("secret", r"E\d+", "built-in"),
        ("employee_id", r"E(\d+", "does not compile"),
        ("employee_id", r"E*", "empty"),
        ("employee_id", r"(?=E)", "empty"),
        ("employee_id", r"\b", "empty"),
        ("employee_id", r"E\d+|", "empty"),
    ],
)
def test_custom_kind_refused(kind: str, regex: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        CustomKind(kind, regex)
    assert repr(kind) in str(info.value)


def test_custom_kind_compares_by_name_and_regex() -> None:
    assert CustomKind("a_b", "x+") == CustomKind("a_b", "x+")
    assert {CustomKind("a_b", "x+"), CustomKind("a_b", "x+")} == {CustomKind("a_b", "x+")}


def test_detectors_kinds() -> None:
    with pytest.raises(ValueError, match="'name'"):
        Detectors(("email", "name"))
    assert Detectors(("ip", "email", "ip")).kinds == ("email", "ip")
    assert found("alice@example.com 10.1.2.3", ("ip",)) == [("ip", "10.1.2.3")]
    assert not Detectors(()).active
    assert Detectors((), custom=[CustomKind("x_id", r"X\d+")]).active
    assert Detectors().active and Detectors().phone_regions == ("US",)
    assert Detectors(()).find("alice@example.com") == []


# ----- secrets ------------------------------------------------------------------------------------

PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MmTFbKx+3hSo\n"
    "abcdEFGHijklMNOPqrstUVWXyz0123456789+/==\n-----END RSA PRIVATE KEY-----"
)


AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"


@pytest.mark.parametrize(
    ("before", "secret", "after"),
    [
        ("aws_access_key_id = ", "AKIAIOSFODNN7EXAMPLE", ""),
        ('"AccessKeyId": "', "ASIAY34FZKBOKMUTVV7A", '"'),
        ("aws_secret_access_key = ", AWS_SECRET, "\n"),
        ('"SecretAccessKey": "', AWS_SECRET, '"'),
        ("AWS_SECRET_ACCESS_KEY=", AWS_SECRET, ""),
        ("token ", "ghp_" + "a1B2" * 9, "."),
        ("", "gho_" + "Z" * 36, ""),
        ("GH_TOKEN=", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", ""),
        ("SLACK_TOKEN=", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOp", ""),
        ("post to ", "https://hooks.slack.com/services/T0001/B0001/XXXXXXXXXXXXXXXX", " now"),
        ("jwt=", JWT, ";"),
        ("OPENAI_API_KEY=", "sk-proj-abc123DEF456ghi789JKL012mno", ""),
        ("key ", "sk-ant-api03-AbCdEf0123456789_xyz-XYZ", ""),
        ("stripe ", "sk_live_51HxYzAbCdEfGhIjKlMnOpQr", ""),
        ("stripe ", "rk_live_51HxYzAbCdEfGhIjKlMnOpQr", ""),
        ("stripe ", "sk_test_4eC39HqLyjWDarjtT1zdp7dc", ""),
        ("maps key=", "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY", "&x=1"),
        ("Authorization: Bearer ", "abc.def-123456", ""),
        ("authorization: bearer ", "ABCDEFGHIJKLMNOPQRSTUVWX", ""),
        ("key:\n", "PEM", "\ndone"),
    ],
)
def test_secret_formats(before: str, secret: str, after: str) -> None:
    secret = PEM if secret == "PEM" else secret
    assert secret_texts(before + secret + after) == [secret]


@pytest.mark.parametrize(
    "text",
    [
        "a Bearer token is sent in the Authorization header; Bearer authentication",
        "Bearer <token>",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",  # an AWS secret key only when labelled
        "AKIAIOSFODNN7EXAMPL and xAKIAIOSFODNN7EXAMPLE",
        "ghp_short and gh_" + "a" * 40,
        "risk-assessment-framework-document and sk-learn-is-a-library-for-things",
        "eyJhbGciOiJIUzI1NiJ9 alone",
        "pk_live_51HxYzAbCdEfGhIjKlMnOpQr",  # publishable: not a secret
        "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq\n-----END PUBLIC KEY-----",
        "xoxb-short",
    ],
)
def test_secret_not_found(text: str) -> None:
    assert secret_texts(text) == []


def test_secret_pem_escaped_in_json_and_unterminated() -> None:
    escaped = PEM.replace("\n", "\\n")
    text = json.dumps({"key": PEM, "n": 1})
    assert secret_texts(text) == [escaped]
    cut = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7\n... (truncated)"
    assert secret_texts(cut) == [
        "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7\n"
    ]
    openssh = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE=\n-----END OPENSSH PRIVATE KEY-----"
    assert secret_texts(f"{openssh} and {PEM}") == [openssh, PEM]


def test_secret_literals() -> None:
    assert MIN_SECRET_CHARS == 8
    secrets = Secrets(["hunter2", "s3cr3t-value", "", "s3cr3t-value"])
    assert secrets.literals == ("s3cr3t-value",)
    text = "pw hunter2, token s3cr3t-value and again s3cr3t-value"
    assert secret_texts(text, ("hunter2", "s3cr3t-value")) == ["s3cr3t-value", "s3cr3t-value"]
    assert secret_texts("x" * 20, ("xxxxxxxxxx",)) == ["x" * 20]  # overlapping occurrences merge


def test_secret_literal_header_adds_its_credential() -> None:
    secrets = Secrets(["Bearer abcdefgh", "Basic dXNlcjpwYXNz", "Token tok"])
    assert set(secrets.literals) == {"Bearer abcdefgh", "abcdefgh", "Basic dXNlcjpwYXNz", "dXNlcjpwYXNz", "Token tok"}
    assert secret_texts("sent abcdefgh in the query", secrets.literals) == ["abcdefgh"]
    assert secret_texts("Authorization: Basic dXNlcjpwYXNz", secrets.literals) == ["Basic dXNlcjpwYXNz"]


def test_secret_spans_merged_and_sorted() -> None:
    text = "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl then AKIAIOSFODNN7EXAMPLE"
    spans = Secrets(["c2lnbmF0dXJl then"]).find(text)  # the literal overlaps the JWT's end
    assert [text[s:e] for s, e in spans] == [text[7:61], "AKIAIOSFODNN7EXAMPLE"]
    assert spans == [(7, 61), (62, len(text))]


# ----- pathological inputs ------------------------------------------------------------------------

PATHOLOGICAL = [
    "a@" * 50_000,
    "a." * 50_000 + "@",
    "a" * 100_000 + "@" + "b." * 1000,
    "1 " * 50_000,
    "1-" * 50_000,
    "1." * 50_000,
    "(1) " * 25_000,
    "+1" * 50_000,
    "4" * 100_000,
    "1234 " * 20_000,
    "a:" * 50_000,
    ":" * 100_000,
    "1:" * 50_000,
    "DE89 " * 20_000,
    "DE" * 50_000,
    "ssn " * 25_000,
    "-----BEGIN PRIVATE KEY-----" * 4_000,
    "eyJ" * 30_000 + ".eyJ" * 1000,
    "Bearer " * 15_000,
    "sk-" * 30_000,
    "x" * 100_000,
]


@pytest.mark.parametrize("text", PATHOLOGICAL, ids=lambda t: repr(t[:12]))
def test_pathological_input_is_quick(text: str) -> None:
    detectors = Detectors(phone_regions=REGIONS, custom=[CustomKind("ref", r"REF-\d+")])
    secrets = Secrets(["Bearer abcdefgh12"])
    started = time.perf_counter()
    detectors.find(text)
    secrets.find(text)
    assert time.perf_counter() - started < 2.0


def test_a_megabyte_without_personal_data_is_quick() -> None:
    rng = random.Random(7)
    lines: list[str] = []
    size = 0
    while size < 1 << 20:
        line = (
            f"2026-03-01T12:{rng.randrange(60):02d}:{rng.randrange(60):02d}.{rng.randrange(1000):03d}Z INFO "
            f"worker-{rng.randrange(8)} task={rng.getrandbits(64):016x} done in {rng.randrange(1, 999)} ms "
            f"(queue {rng.randrange(50)}, build 1.4.{rng.randrange(10)}) path=/srv/app/mod_{rng.randrange(99)}.py:"
            f"{rng.randrange(1, 900)}\n"
        )
        lines.append(line)
        size += len(line)
    text = "".join(lines)
    started = time.perf_counter()
    assert Detectors(phone_regions=REGIONS).find(text) == []
    assert Secrets().find(text) == []
    assert time.perf_counter() - started < 5.0


# ----- the labelled set ---------------------------------------------------------------------------

THRESHOLDS: dict[str, tuple[float, float]] = {
    "email": (0.98, 0.98),
    "phone": (0.97, 0.97),
    "card": (0.97, 0.97),
    "iban": (0.97, 0.97),
    "ip": (0.95, 0.97),
    "ssn": (0.95, 0.95),
}
"""(precision, recall) per kind, a little under what was measured (bench/pii_detection.py prints it)."""


def test_labelled_set_is_what_it_claims() -> None:
    lines = LABELLED.read_text(encoding="utf-8").splitlines()
    assert len(lines) >= 400
    kinds: Counter[str] = Counter()
    negatives = 0
    for line in lines:
        row = json.loads(line)
        assert set(row) == {"text", "found"}
        negatives += not row["found"]
        for f in row["found"]:
            assert f["kind"] in KINDS and f["value"] in row["text"]
            kinds[f["kind"]] += 1
    assert min(kinds.values()) >= 40 and set(kinds) == set(KINDS)
    assert negatives >= 100


def test_labelled_set_precision_and_recall() -> None:
    lines = LABELLED.read_text(encoding="utf-8").splitlines()
    scores = score(lines, Detectors(phone_regions=REGIONS))
    report = []
    for kind, (tp, fp, fn) in scores.items():
        precision, recall = tp / (tp + fp), tp / (tp + fn)
        low_precision, low_recall = THRESHOLDS[kind]
        report.append(
            (kind, round(precision, 3), round(recall, 3), precision >= low_precision and recall >= low_recall)
        )
    assert all(ok for *_, ok in report), report


def test_labelled_set_scoring_can_fail() -> None:
    # the same set read with the e-mail detector off: its recall drops to nothing, so the thresholds bite
    lines = LABELLED.read_text(encoding="utf-8").splitlines()
    scores = score(lines[:100], Detectors(tuple(k for k in KINDS if k != "email"), phone_regions=REGIONS))
    tp, _fp, fn = scores["email"]
    assert tp == 0 and fn > 0


# ----- the phone detector against PhoneNumberMatcher ---------------------------------------------


def phone_like(rng: random.Random) -> str:
    country = rng.choice(["+1 ", "+44 ", "+49 ", "+33 ", "+39 ", "+34 ", "+61 ", "+81 ", "+7 ", "+353 ", "", "", ""])
    lead = rng.choice(["", "0", "1", "00", "06", "07", "0171 ", "030 ", "020 "])
    area = rng.choice(["", "", f"({rng.randrange(200, 999)}) ", f"({rng.randrange(10, 99)}) "])
    sizes = [rng.randrange(1, 5) for _ in range(rng.randrange(2, 5))]
    groups = [str(rng.randrange(10 ** (k - 1), 10**k)) for k in sizes]
    return country + lead + area + rng.choice([" ", "-", ".", ""]).join(groups)


def test_phone_found_only_where_the_matcher_finds_it() -> None:
    # plain candidates are validated from the metadata without the matcher: what that finds, the matcher
    # must find too, whole (the labelled set measures the other direction)
    rng = random.Random(21)
    candidates = [phone_like(rng) for _ in range(1500)]
    lines = LABELLED.read_text(encoding="utf-8").splitlines()
    candidates += [f["value"] for line in lines for f in json.loads(line)["found"] if f["kind"] == "phone"]
    checked = 0
    for regions in [REGIONS, ("US",), ("GB", "DE")]:
        detectors = Detectors(("phone",), phone_regions=regions)
        for candidate in candidates:
            for f in detectors.find(f"tel {candidate} ok"):
                readings = [*regions, "ZZ"]
                spans = {(m.start, m.end) for r in readings for m in PhoneNumberMatcher(f.value, r, Leniency.VALID)}
                assert (0, len(f.value)) in spans, (candidate, f.value, regions)
                checked += 1
    assert checked > 600


def test_non_ascii_digits_are_not_read() -> None:
    arabic = "٤١٥٥٥٥٠١٣٢"  # 4155550132 in Arabic-Indic digits
    assert found(f"phone: {arabic}, ssn ١٢٣-٤٥-٦٧٨٩, ip ١٩٢.١٦٨.١.١ and ::ffff:١.٢.٣.٤") == []


def test_phone_not_taken_from_an_iban_or_a_time() -> None:
    assert values("IBAN NL47 UQRE 2574 1263 44", "phone") == []
    assert values("at 20260115 10:20 and 415 555 0132:30", "phone") == []
    assert values("CALL 212 555 0111", "phone") == ["212 555 0111"]


@pytest.mark.parametrize("number", ["(555) 123-4567", "555-123-4567", "+1 555-123-4567", "555.867.5309"])
def test_a_fictional_north_american_number_is_a_phone_by_its_shape(number: str) -> None:
    """No such number is assigned (libphonenumber calls it invalid), but fixtures and test data write customers'
    phones so: a value the detectors miss would reach the model."""
    assert found(f"call {number} today") == [("phone", number)]


@pytest.mark.parametrize("text", ["123-456-7890", "(000) 000-0000", "999-999-9999", "order 2026-555-1234"])
def test_placeholders_and_other_digit_groups_are_not_phones_by_shape(text: str) -> None:
    assert found(f"see {text} here") == []


def test_the_north_american_shape_needs_a_north_american_region() -> None:
    assert found("call (555) 123-4567", regions=("GB", "DE")) == []
