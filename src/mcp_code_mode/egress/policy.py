"""The egress decision: may a run connect to this host and port, given the addresses it resolves to?

Refused whatever the allow-list says (``classify``): loopback, RFC 1918 private networks, link-local (cloud
metadata at ``169.254.169.254``), CGNAT (``100.64.0.0/10``), multicast, broadcast, unspecified and reserved
ranges, IPv6 unique-local and link-local, and the IPv4-mapped, IPv4-compatible, NAT64 and 6to4 forms of
every IPv4 address that is refused. A name is judged by every address it resolves to, so a DNS answer that
points at a private address (rebinding) is refused like the address itself. An operator opens a private
address explicitly (``CODE_MODE_NETWORK_ALLOW_PRIVATE=10.0.5.7:8080``).

Host rules (``CODE_MODE_NETWORK_ALLOW`` / ``_DENY``): ``example.com`` (that name), ``*.example.com`` (its
subdomains, not the name itself), either with ``:port``; an IP address or a CIDR network for
``ALLOW_PRIVATE``. An empty allow-list means any public address; the deny-list always wins.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_V4_REFUSED: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/8", "an unspecified address"),
    ("10.0.0.0/8", "a private network (RFC 1918)"),
    ("100.64.0.0/10", "a carrier-grade NAT network"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local (cloud metadata lives here)"),
    ("172.16.0.0/12", "a private network (RFC 1918)"),
    ("192.0.0.0/24", "an IETF protocol assignment"),
    ("192.0.2.0/24", "documentation (TEST-NET-1)"),
    ("192.88.99.0/24", "6to4 relay anycast"),
    ("192.168.0.0/16", "a private network (RFC 1918)"),
    ("198.18.0.0/15", "a benchmarking network"),
    ("198.51.100.0/24", "documentation (TEST-NET-2)"),
    ("203.0.113.0/24", "documentation (TEST-NET-3)"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved (and broadcast)"),
)
_V6_REFUSED: tuple[tuple[str, str], ...] = (
    ("::/128", "an unspecified address"),
    ("::1/128", "loopback"),
    ("fc00::/7", "a unique-local network"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local (deprecated)"),
    ("ff00::/8", "multicast"),
    ("100::/64", "a discard prefix"),
    ("2001:db8::/32", "documentation"),
    ("2001::/23", "an IETF protocol assignment"),
)
_V4_NETWORKS = [(ipaddress.IPv4Network(n), why) for n, why in _V4_REFUSED]
_V6_NETWORKS = [(ipaddress.IPv6Network(n), why) for n, why in _V6_REFUSED]
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")


class AddressRefused(Exception):
    """A connection the policy refuses; the message names the host, the address and the rule."""

    def __init__(self, host: str, port: int, rule: str) -> None:
        super().__init__(f"connection to {host}:{port} refused: {rule}")
        self.host = host
        self.port = port
        self.rule = rule


def _embedded_v4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, compatible, NAT64, 6to4), if any."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    packed = int(address)
    if packed >> 32 == 0 and packed > 1:  # IPv4-compatible (::a.b.c.d), deprecated but still routed by some
        return ipaddress.IPv4Address(packed)
    return None


def classify(address: IPAddress) -> str | None:
    """Why this address is never reachable from a run (unless opened explicitly), or None for a public one."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id:
            return "an IPv6 address with a zone (link-local)"
        embedded = _embedded_v4(address)
        if embedded is not None:
            why = classify(embedded)
            return f"{why} (as IPv6 {address.compressed})" if why else None
        for network, why in _V6_NETWORKS:
            if address in network:
                return why
        return None
    for network, why in _V4_NETWORKS:
        if address in network:
            return why
    return None


def _parse_port(text: str, rule: str) -> int | None:
    if not text:
        return None
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{rule!r}: the port must be a number from 1 to 65535")
    return int(text)


@dataclass(frozen=True)
class HostRule:
    """One entry of an allow- or deny-list."""

    text: str
    host: str | None = None
    """A lower-case name, or None for an address rule."""
    wildcard: bool = False
    """``*.example.com``: its subdomains, not ``example.com`` itself."""
    network: IPNetwork | None = None
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> HostRule:
        rule = text.strip()
        if not rule:
            raise ValueError("an empty host rule")
        host, port_text = rule, ""
        if rule.startswith("["):  # [v6]:port
            end = rule.find("]")
            if end < 0:
                raise ValueError(f"{rule!r}: an unclosed '['")
            host, rest = rule[1:end], rule[end + 1 :]
            if rest and not rest.startswith(":"):
                raise ValueError(f"{rule!r}: expected ':port' after ']'")
            port_text = rest[1:]
        elif rule.count(":") == 1:
            host, port_text = rule.split(":")
        port = _parse_port(port_text, rule)
        try:
            network = ipaddress.ip_network(host, strict=False)
        except ValueError:
            network = None
        if network is not None:
            return cls(rule, network=network, port=port)
        name = host.lower().rstrip(".")
        wildcard = name.startswith("*.")
        bare = name[2:] if wildcard else name
        labels = bare.split(".")
        if not bare or "*" in bare or any(not label or len(label) > 63 for label in labels):
            raise ValueError(f"{rule!r}: not a host name, '*.' wildcard, IP address or network")
        if not all(c.isalnum() or c in "-_" for label in labels for c in label):
            raise ValueError(f"{rule!r}: a host name has letters, digits, '-' and '.' only")
        return cls(rule, host=bare, wildcard=wildcard, port=port)

    def matches_name(self, host: str, port: int) -> bool:
        if self.host is None or (self.port is not None and self.port != port):
            return False
        name = host.lower().rstrip(".")
        return name.endswith("." + self.host) if self.wildcard else name == self.host

    def matches_address(self, address: IPAddress, port: int) -> bool:
        if self.network is None or (self.port is not None and self.port != port):
            return False
        return address.version == self.network.version and address in self.network


def parse_rules(entries: str | Iterable[str]) -> tuple[HostRule, ...]:
    """Comma- or space-separated rules (a setting's value), or a list of them; ``ValueError`` names a bad one."""
    items = entries.replace(",", " ").split() if isinstance(entries, str) else list(entries)
    return tuple(HostRule.parse(item) for item in items)


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return None


@dataclass(frozen=True)
class EgressPolicy:
    """What runs may connect to: the server's lists, narrowed per run with ``narrowed``."""

    allow: tuple[HostRule, ...] = ()
    deny: tuple[HostRule, ...] = ()
    allow_private: tuple[HostRule, ...] = ()
    run_allow: tuple[HostRule, ...] | None = None
    """A run's own allow-list (``allowNetworking: ["api.example.com"]``): within the server's, never beyond."""

    @classmethod
    def from_settings(cls, allow: str = "", deny: str = "", allow_private: str = "") -> EgressPolicy:
        private = parse_rules(allow_private)
        for rule in private:
            if rule.network is None:
                raise ValueError(f"{rule.text!r}: CODE_MODE_NETWORK_ALLOW_PRIVATE takes addresses or networks")
        return cls(parse_rules(allow), parse_rules(deny), private)

    def narrowed(self, hosts: Sequence[str]) -> EgressPolicy:
        """This policy for a run that names the hosts it needs (each still has to pass the server's lists)."""
        return EgressPolicy(self.allow, self.deny, self.allow_private, parse_rules(hosts))

    def fingerprint(self) -> list[object]:
        """The rules as data, for a cache key (a run's result depends on what it could reach)."""
        run = None if self.run_allow is None else sorted(r.text for r in self.run_allow)
        lists: list[object] = [sorted(r.text for r in rules) for rules in (self.allow, self.deny, self.allow_private)]
        return [*lists, run]

    def describe(self) -> dict[str, object]:
        """The policy as ``get_execution_limits`` shows it."""
        return {
            "allow": [r.text for r in self.allow] or "any public address",
            "deny": [r.text for r in self.deny],
            "allowPrivate": [r.text for r in self.allow_private],
            "alwaysRefused": (
                "loopback, private networks (RFC 1918), link-local (cloud metadata), CGNAT, multicast, reserved "
                "and documentation ranges, IPv6 unique-local and link-local, the IPv4-mapped and NAT64 forms of "
                "all of them, and names that resolve to any of them; unless opened in allowPrivate"
            ),
        }

    def check_name(self, host: str, port: int) -> None:
        """Before resolving: the lists that speak of names (``AddressRefused`` when one refuses)."""
        literal = _literal(host)

        def listed(rules: Iterable[HostRule]) -> HostRule | None:
            return next(
                (r for r in rules if r.matches_name(host, port) or (literal and r.matches_address(literal, port))),
                None,
            )

        denied = listed(self.deny)
        if denied is not None:
            raise AddressRefused(host, port, f"CODE_MODE_NETWORK_DENY has {denied.text!r}")
        if self.allow and listed(self.allow) is None:
            raise AddressRefused(host, port, f"{host}:{port} is not in CODE_MODE_NETWORK_ALLOW")
        if self.run_allow is not None and listed(self.run_allow) is None:
            raise AddressRefused(host, port, f"{host}:{port} is not among the hosts the run's allowNetworking names")

    def check_addresses(self, host: str, port: int, addresses: Sequence[IPAddress]) -> IPAddress:
        """After resolving: every address must be public or opened explicitly (a name with one private answer
        is refused: the next lookup could pick it). The address to connect to, or ``AddressRefused``."""
        if not addresses:
            raise AddressRefused(host, port, "the name does not resolve")
        for address in addresses:
            why = classify(address)
            if why is None:
                continue
            if any(rule.matches_address(address, port) for rule in self.allow_private):
                continue
            shown = address.compressed
            rule = f"{shown} is {why}; open it with CODE_MODE_NETWORK_ALLOW_PRIVATE={shown}:{port}"
            raise AddressRefused(host, port, rule)
        for address in addresses:
            for rule in self.deny:
                if rule.matches_address(address, port):
                    raise AddressRefused(host, port, f"CODE_MODE_NETWORK_DENY has {rule.text!r}")
        return addresses[0]


__all__ = ["AddressRefused", "EgressPolicy", "HostRule", "classify", "parse_rules"]
