"""Who a visitor is, as far as limits and storage need to know, without
keeping anything that could be used against them or us.

- Their key (a session key from the chat page's cookie, or the widget's
  visitor key) is stored only as a keyed hash: the session key also opens a
  staff member's admin, and a stored key could be read or filtered back out.
- Their address comes from X-Forwarded-For only when the connection comes
  from a proxy we trust, read from the right: anything to the left of the
  last proxy is whatever the client chose to send.
- Budgets count per network, not per address: one IPv6 host can rotate
  through its whole /64, and one customer through the /64s of its /56 or
  /48: IPv6 budgets come in layers (KOOKEE_IPV6_BUDGETS).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from django.conf import settings
from django.utils.crypto import salted_hmac

from chat.visitors.verified import Person


@dataclass(frozen=True)
class Visitor:
    hash: str  # of their key: see hash_key
    address: str | None
    network: str  # see network_of
    # The page they chat from: a customer's page embedding the widget, or ""
    # for the chat page (see chat.engine.consumers._source_page).
    page: str = ""
    # Who the customer's backend says they are, once their tab proved it
    # (an `identify` frame: chat/visitors/verified.py); None: anonymous.
    person: Person | None = None
    # Staff previewing a draft of the assistant (chat/assistant/), not a visitor.
    preview: bool = False

    @classmethod
    def of(cls, visitor_hash: str, address: str | None, page: str = "") -> Visitor:
        return cls(visitor_hash, address, network_of(address), page)


def hash_key(key: str) -> str:
    """The stored form of a visitor key: HMAC-SHA256 with the secret key."""
    return salted_hmac("kookee.visitor", key, algorithm="sha256").hexdigest()


def client_address(peer: str | None, forwarded_for: str | None) -> str | None:
    """The visitor's address: the peer's, unless the peer is a trusted proxy;
    then the rightmost X-Forwarded-For entry that is not a trusted proxy."""
    address = _parse(peer)
    if address is None or not _trusted(address):
        return str(address) if address else None
    for entry in reversed((forwarded_for or "").split(",")):
        hop = _parse(entry)
        if hop is None:
            break  # garbage from here leftwards: the last good hop is the answer
        address = hop
        if not _trusted(hop):
            break
    return str(address)


def network_of(address: str | None) -> str:
    """The unit of rates and socket counts for an address: itself for IPv4
    (/32), the longest prefix of KOOKEE_IPV6_BUDGETS for IPv6 (a /64 by
    default; an IPv4-mapped IPv6 address counts as the IPv4 one)."""
    networks = networks_of(address)
    return networks[0] if networks else ""


def networks_of(address: str | None) -> list[str]:
    """The networks whose daily budgets an address's turns count against,
    smallest first: an IPv4 address alone; for IPv6, one per layer of
    KOOKEE_IPV6_BUDGETS."""
    parsed = _parse(address)
    if parsed is None:
        return []
    if parsed.version == 4:
        return [f"{parsed}/32"]
    return [
        str(ipaddress.ip_network(f"{parsed}/{prefix}", strict=False))
        for prefix in sorted(settings.KOOKEE_IPV6_BUDGETS, reverse=True)
    ]


def share_of(network: str) -> float:
    """The share of the site's day a network may take (see networks_of). A
    layer no longer configured (a hold from before a change) takes the
    smallest layer's."""
    if ":" not in network:
        return settings.KOOKEE_NETWORK_SHARE_OF_DAY
    layers = settings.KOOKEE_IPV6_BUDGETS
    prefix = int(network.rsplit("/", 1)[1])
    return layers.get(prefix) or layers[max(layers)]


def _parse(value: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if not value:
        return None
    value = value.strip()
    if value.startswith("[") and "]" in value:  # [2001:db8::1]:443
        value = value[1 : value.index("]")]
    elif value.count(":") == 1:  # 203.0.113.7:443
        value = value.split(":")[0]
    try:
        address = ipaddress.ip_address(value.split("%")[0])
    except ValueError:
        return None
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped or address


def _trusted(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return any(address in network for network in settings.KOOKEE_TRUSTED_PROXIES)
