"""Who a visitor is (chat/visitors/identity.py): the stored hash of their key, their address behind
trusted proxies only, and the network their budgets count against."""

import ipaddress

import pytest

from chat.visitors.identity import client_address, hash_key, network_of


def test_a_key_is_stored_as_a_keyed_hash(settings):
    key = "abcdefghijklmnopqrstuvwxyz012345"
    stored = hash_key(key)
    assert len(stored) == 64
    assert key not in stored
    assert hash_key(key) == stored  # stable: the same visitor finds their conversation
    assert hash_key(key + "x") != stored
    # Keyed: without the secret, the hash cannot be worked out from a guessed key.
    settings.SECRET_KEY = "another-secret-" + "x" * 50
    assert hash_key(key) != stored


@pytest.fixture
def proxies(settings):
    def _trust(*networks):
        settings.KOOKEE_TRUSTED_PROXIES = [ipaddress.ip_network(n) for n in networks]

    return _trust


@pytest.mark.parametrize(
    ("peer", "forwarded", "expected"),
    [
        # No trusted proxy: the header is whatever the client chose to send.
        ("203.0.113.7", "198.51.100.1", "203.0.113.7"),
        ("203.0.113.7", None, "203.0.113.7"),
        ("2001:db8::7", "198.51.100.1", "2001:db8::7"),
        (None, "198.51.100.1", None),
    ],
)
def test_without_trusted_proxies_the_peer_is_the_client(proxies, peer, forwarded, expected):
    proxies()
    assert client_address(peer, forwarded) == expected


@pytest.mark.parametrize(
    ("peer", "forwarded", "expected"),
    [
        # An untrusted peer's header changes nothing, even with proxies set.
        ("203.0.113.7", "198.51.100.1", "203.0.113.7"),
        # From the trusted proxy: the rightmost entry is the one it added.
        ("10.0.0.2", "198.51.100.1", "198.51.100.1"),
        # The client prepended a forged entry: read from the right, it loses.
        ("10.0.0.2", "192.0.2.66, 198.51.100.1", "198.51.100.1"),
        # Two trusted hops (a CDN, then the load balancer).
        ("10.0.0.2", "198.51.100.1, 10.0.0.3", "198.51.100.1"),
        ("10.0.0.2", "198.51.100.1,10.0.0.3 , 10.0.0.4", "198.51.100.1"),
        # Ports and brackets, as some proxies write them.
        ("10.0.0.2", "198.51.100.1:4711", "198.51.100.1"),
        ("10.0.0.2", "[2001:db8::1]:4711", "2001:db8::1"),
        # No header, or garbage in it: the last address that is good.
        ("10.0.0.2", None, "10.0.0.2"),
        ("10.0.0.2", "", "10.0.0.2"),
        ("10.0.0.2", "unknown", "10.0.0.2"),
        ("10.0.0.2", "198.51.100.1, garbage", "10.0.0.2"),
        ("10.0.0.2", "garbage, 198.51.100.1", "198.51.100.1"),
        # Every hop trusted: the leftmost one is the closest we know.
        ("10.0.0.2", "10.0.0.9, 10.0.0.3", "10.0.0.9"),
        # An IPv4-mapped IPv6 peer is the IPv4 address.
        ("::ffff:10.0.0.2", "198.51.100.1", "198.51.100.1"),
    ],
)
def test_behind_trusted_proxies_the_header_is_read_from_the_right(proxies, peer, forwarded, expected):
    proxies("10.0.0.0/24")
    assert client_address(peer, forwarded) == expected


@pytest.mark.parametrize(
    ("address", "network"),
    [
        ("203.0.113.7", "203.0.113.7/32"),
        ("::ffff:203.0.113.7", "203.0.113.7/32"),
        ("2001:db8:1:2::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),
        ("2001:db8:1:3::1", "2001:db8:1:3::/64"),
        (None, ""),
        ("", ""),
        ("not an address", ""),
    ],
)
def test_budgets_count_an_ipv4_address_or_an_ipv6_64(address, network):
    assert network_of(address) == network
