"""The egress decision, address class by address class and rule by rule (no network is used)."""

from __future__ import annotations

import ipaddress

import pytest

from mcp_code_mode.egress import AddressRefused, EgressPolicy, HostRule, classify, parse_rules

ip = ipaddress.ip_address


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("10.1.2.3", "RFC 1918"),
        ("172.16.0.1", "RFC 1918"),
        ("172.31.255.255", "RFC 1918"),
        ("192.168.1.1", "RFC 1918"),
        ("169.254.169.254", "cloud metadata"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("100.127.255.254", "carrier-grade NAT"),
        ("224.0.0.251", "multicast"),
        ("255.255.255.255", "broadcast"),
        ("0.0.0.0", "unspecified"),
        ("198.18.0.1", "benchmarking"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fd00::1", "unique-local"),
        ("fc12:3456::1", "unique-local"),
        ("fe80::1", "link-local"),
        ("ff02::1", "multicast"),
        ("::ffff:127.0.0.1", "loopback (as IPv6"),
        ("::ffff:10.0.0.1", "RFC 1918"),
        ("::ffff:169.254.169.254", "cloud metadata"),
        ("::127.0.0.1", "loopback"),
        ("64:ff9b::a00:1", "RFC 1918"),
        ("2002:a9fe:a9fe::1", "cloud metadata"),
        ("2002:7f00:1::", "loopback"),
    ],
)
def test_private_and_special_addresses_are_refused_whatever_their_form(address: str, why: str) -> None:
    found = classify(ip(address))
    assert found is not None and why in found


@pytest.mark.parametrize(
    "address", ["93.184.216.34", "1.1.1.1", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]
)
def test_public_addresses_pass(address: str) -> None:
    assert classify(ip(address)) is None


def test_a_zoned_ipv6_address_is_refused() -> None:
    assert classify(ipaddress.IPv6Address("fe80::1%eth0")) is not None


def test_rules_parse_names_wildcards_ports_addresses_and_networks() -> None:
    name, wild, ported, v4, net, v6 = parse_rules(
        "api.example.com, *.Example.org:443 pypi.test:8080 10.0.5.7 10.1.0.0/16 [fd00::5]:9000"
    )
    assert (name.host, name.wildcard, name.port) == ("api.example.com", False, None)
    assert (wild.host, wild.wildcard, wild.port) == ("example.org", True, 443)
    assert ported.port == 8080
    assert v4.network == ipaddress.ip_network("10.0.5.7/32")
    assert net.network == ipaddress.ip_network("10.1.0.0/16")
    assert v6.network == ipaddress.ip_network("fd00::5/128") and v6.port == 9000


@pytest.mark.parametrize("bad", ["*", "a..b", "*.*.x", "host:0", "host:70000", "host:http", "[fd00::1", "bad host!"])
def test_a_bad_rule_is_an_error_naming_it(bad: str) -> None:
    with pytest.raises(ValueError, match="'"):
        HostRule.parse(bad)


def test_a_wildcard_matches_subdomains_only_and_ports_must_match() -> None:
    rule = HostRule.parse("*.example.com:443")
    assert rule.matches_name("api.example.com", 443)
    assert rule.matches_name("A.B.Example.COM.", 443)
    assert not rule.matches_name("example.com", 443)
    assert not rule.matches_name("api.example.com", 80)
    assert not rule.matches_name("evil-example.com", 443)
    assert not rule.matches_name("example.com.evil.net", 443)


def refusal(call: object) -> str:
    assert callable(call)
    with pytest.raises(AddressRefused) as caught:
        call()
    return caught.value.rule


def test_an_empty_allow_list_means_any_public_address_and_deny_wins() -> None:
    policy = EgressPolicy.from_settings(deny="*.tracker.net bad.example")
    policy.check_name("anything.example", 443)
    assert policy.check_addresses("anything.example", 443, [ip("93.184.216.34")]) == ip("93.184.216.34")
    assert "CODE_MODE_NETWORK_DENY has '*.tracker.net'" in refusal(lambda: policy.check_name("x.tracker.net", 443))
    assert "'bad.example'" in refusal(lambda: policy.check_name("BAD.example", 80))


def test_an_allow_list_admits_only_its_hosts() -> None:
    policy = EgressPolicy.from_settings(allow="api.example.com:443 *.cdn.example")
    policy.check_name("api.example.com", 443)
    policy.check_name("img.cdn.example", 8443)
    assert "not in CODE_MODE_NETWORK_ALLOW" in refusal(lambda: policy.check_name("api.example.com", 80))
    assert "not in CODE_MODE_NETWORK_ALLOW" in refusal(lambda: policy.check_name("other.example", 443))


def test_a_run_may_narrow_the_servers_list_but_never_widen_it() -> None:
    server = EgressPolicy.from_settings(allow="*.example.com")
    run = server.narrowed(["api.example.com"])
    run.check_name("api.example.com", 443)
    assert "run's allowNetworking" in refusal(lambda: run.check_name("www.example.com", 443))
    wider = server.narrowed(["elsewhere.net"])
    assert "CODE_MODE_NETWORK_ALLOW" in refusal(lambda: wider.check_name("elsewhere.net", 443))
    nothing = server.narrowed([])
    assert "run's allowNetworking" in refusal(lambda: nothing.check_name("api.example.com", 443))


def test_a_name_that_resolves_to_a_private_address_is_refused_even_if_allowed() -> None:
    policy = EgressPolicy.from_settings(allow="internal.example.com")
    policy.check_name("internal.example.com", 443)
    rule = refusal(lambda: policy.check_addresses("internal.example.com", 443, [ip("127.0.0.1")]))
    assert "127.0.0.1 is loopback" in rule and "CODE_MODE_NETWORK_ALLOW_PRIVATE=127.0.0.1:443" in rule


def test_one_private_answer_among_public_ones_refuses_the_name() -> None:
    policy = EgressPolicy()
    answers = [ip("93.184.216.34"), ip("10.0.0.8")]
    assert "10.0.0.8 is a private network" in refusal(lambda: policy.check_addresses("rebind.example", 80, answers))


def test_an_operator_opens_one_private_address_and_port_explicitly() -> None:
    policy = EgressPolicy.from_settings(allow_private="10.0.5.7:8080 fd00::/64")
    assert policy.check_addresses("api.internal", 8080, [ip("10.0.5.7")]) == ip("10.0.5.7")
    assert "10.0.5.7 is" in refusal(lambda: policy.check_addresses("api.internal", 8081, [ip("10.0.5.7")]))
    assert "10.0.5.8 is" in refusal(lambda: policy.check_addresses("api.internal", 8080, [ip("10.0.5.8")]))
    assert policy.check_addresses("v6.internal", 1, [ip("fd00::9")]) == ip("fd00::9")
    with pytest.raises(ValueError, match="takes addresses or networks"):
        EgressPolicy.from_settings(allow_private="internal.example.com")


def test_a_literal_address_is_judged_as_an_address_too() -> None:
    policy = EgressPolicy.from_settings(deny="203.0.113.0/24")
    assert "CODE_MODE_NETWORK_DENY" in refusal(lambda: policy.check_name("203.0.113.9", 443))
    assert "unresolvable" not in refusal(lambda: policy.check_addresses("nowhere.example", 443, []))
