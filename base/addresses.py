"""Which IP addresses the server may connect to on a customer's behalf.

Anything that makes the server fetch a URL someone else chose (an importer's
source, an action's API) must not reach what only the server can reach: this
machine, its private networks, the cloud's metadata service (SSRF). public()
is that rule, shared by every such client; each checks every address a host
resolves to with it before it connects. Pure Python, no settings: whether a
deployment allows private addresses anyway is each caller's own setting.
"""

from __future__ import annotations

import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# IPv6 ranges that Python's is_global calls global but that lead to private
# IPv4 addresses, or to whatever a network's own router makes of them.
NOT_PUBLIC_V6 = tuple(
    ipaddress.IPv6Network(network)
    for network in (
        "64:ff9b::/96",  # NAT64: 64:ff9b::a9fe:a9fe is 169.254.169.254 on a NAT64 network
        "64:ff9b:1::/48",  # NAT64, local use
        "2002::/16",  # 6to4: the IPv4 address it embeds, through a relay
        "2001::/32",  # Teredo: a tunnel to an IPv4 address
        "::/96",  # IPv4-compatible (deprecated): ::a9fe:a9fe
        "::ffff:0:0:0/96",  # IPv4-translated (SIIT): ::ffff:0:a9fe:a9fe
        "fec0::/10",  # site-local (deprecated, still routed inside some networks)
    )
)


def public(address: IPAddress) -> bool:
    """Whether the server may connect to this address for someone else: not
    loopback, a private network, link-local (cloud metadata), multicast or
    reserved, nor an IPv6 form that reaches an IPv4 address through a
    translator or a tunnel (NAT64, 6to4, Teredo, IPv4-compatible and
    -translated), nor site-local. An IPv4-mapped address (::ffff:a.b.c.d) is
    the IPv4 address itself to the kernel: it is judged as that address."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return public(address.ipv4_mapped)
        if any(address in network for network in NOT_PUBLIC_V6):
            return False
    return address.is_global and not address.is_multicast
