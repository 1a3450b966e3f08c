"""One HTTP call of an action: the assistant calling the customer's own API.

The URL comes from a customer's OpenAPI document and the model's arguments,
so the call is treated as untrusted, as the help center's importers treat a
source's URL (helpcenter/importers/fetch.py, whose sync Guard this mirrors):
http or https only, never this app's own host, and every connection made by
Guard, which resolves the host once, refuses it when any address is not
public (base.addresses.public) unless KOOKEE_ACTIONS_ALLOW_PRIVATE, and
connects to one of those very addresses (no second lookup: DNS rebinding
cannot slip a private address in). Redirects stay on the same origin.

The call runs inside a visitor's turn, which may be cancelled at any moment
(Stop): nothing outlives send(). Each call has its own client and connection
pool (no keep-alive connection between calls, no background task), closed on
the way out, cancellation included; httpcore2 closes a connection whose
response was not read to the end. The whole call, redirects and retry
included, is bounded by one timeout, and the body by max_bytes, checked as it
streams in. Error messages name the host, never a header value, a query
string or credentials: they are shown to the model and to staff.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import cache
from urllib.parse import urljoin, urlsplit

import httpcore2
import httpx2

from base.addresses import public

USER_AGENT = "KookeeActions/1.0"
MAX_REDIRECTS = 3
REDIRECTS = frozenset({301, 302, 303, 307, 308})
FOLLOWED = frozenset({"GET", "HEAD"})  # another method's redirect goes back to the caller, as is
# Methods safe to send again after a connection that failed before any byte of the request left.
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # a header name (RFC 9110 token)

Resolver = Callable[[str, int], Awaitable[list[str]]]
Origin = tuple[str, str, int]


class CallFailed(Exception):
    """The call did not produce a response. The message is plain English, safe
    to show to the model and to staff (no secret, query string or header value)."""

    outcome: str = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Refused(CallFailed):
    """Not called: a URL, address, redirect or header this module will not send to."""

    outcome = "refused"


class TimedOut(CallFailed):
    outcome = "timeout"


@dataclass(frozen=True)
class Response:
    status: int
    content_type: str
    body: bytes  # at most max_bytes
    elapsed: float  # seconds, the whole call


async def system_resolve(host: str, port: int) -> list[str]:
    """The addresses a host resolves to (an address: itself), in the resolver's order."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise CallFailed(f"cannot resolve {host}: {e.strerror}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class Guard(httpcore2.AsyncNetworkBackend):
    """The network backend of every connection of a call: httpcore2 calls it
    for each new connection (each redirect hop too, as none is kept alive).
    The Host header and TLS's SNI still name the host: httpcore2 takes them
    from the request, not from the address connected to."""

    def __init__(self, resolve: Resolver, allow_private: bool) -> None:
        self._resolve = resolve
        self._allow_private = allow_private
        self._backend = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        addresses = await self._resolve(host, port)
        for address in addresses:
            number = address.split("%")[0]  # without an IPv6 zone (fe80::1%eth0)
            if not (self._allow_private or public(ipaddress.ip_address(number))):
                raise Refused(
                    f"{host} is at a private or local address ({number}): not called "
                    "(KOOKEE_ACTIONS_ALLOW_PRIVATE=true allows an API on this machine or its network)"
                )
        failed: httpcore2.ConnectError | None = None
        for address in addresses:  # by number: the socket does no lookup of its own
            try:
                return await self._backend.connect_tcp(address, port, timeout, local_address, socket_options)
            except httpcore2.ConnectError as e:
                failed = e  # the next address, as socket.create_connection would
        raise failed or httpcore2.ConnectError(f"{host} resolves to no address")

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


@cache
def _ssl_context() -> ssl.SSLContext:
    """The CA bundle, loaded once per process rather than once per call."""
    return httpx2.create_ssl_context(trust_env=False)


class _Transport(httpx2.AsyncHTTPTransport):
    """httpx2's transport, its pool made again with Guard (httpx2 takes no
    network backend) and no keep-alive: a connection is closed as soon as its
    response is done with (a redirect's, unread, is closed anyway), so each
    hop connects, and is checked, anew, and no idle connection waits."""

    def __init__(self, network: httpcore2.AsyncNetworkBackend) -> None:
        super().__init__(verify=_ssl_context(), trust_env=False)
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=_ssl_context(),
            max_connections=1,  # one request at a time: hops and the retry are sequential
            max_keepalive_connections=0,
            network_backend=network,
        )


def origin(url: str) -> Origin:
    """(scheme, host, port) of a URL this module may call; Refused otherwise."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise Refused("the action's URL is not a valid URL: not called") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise Refused(f"only http and https URLs can be called, not {scheme or 'a URL without a scheme'}")
    if not parts.hostname:
        raise Refused("the action's URL has no host: not called")
    if "@" in parts.netloc:
        raise Refused(f"the URL to {parts.hostname} carries a user name or password: not called (use a header)")
    return scheme, parts.hostname.lower(), port or (443 if scheme == "https" else 80)


def check_headers(headers: dict[str, str]) -> None:
    """Refuses a header that would split the request or that h11 would reject,
    before any connection. Names only in messages: values may be secrets."""
    for name, value in headers.items():
        if not TOKEN.fullmatch(name):
            raise Refused(f"header {name[:40]!r} is not a valid header name: not called")
        if "\r" in value or "\n" in value:
            raise Refused(f"header {name} has a line break: not called")
        if any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in value):
            raise Refused(f"header {name} has a control character: not called")


def _size(n: int) -> str:
    return f"{n // 1024} KB" if n % 1024 == 0 else f"{n} bytes"


async def send(
    method: str,
    url: str,
    *,
    headers: dict[str, str],
    body: bytes | None = None,
    timeout: float,
    max_bytes: int = 65536,
    allow_private: bool = False,
    own_hosts: frozenset[tuple[str, int | None]] = frozenset(),
    resolve: Resolver | None = None,
) -> Response:
    """Makes one call of an action and returns its response, whatever its
    status (a 3xx too, when not followed); raises CallFailed (Refused,
    TimedOut) when there is none to return."""
    method = method.upper()
    own = {(host.lower().rstrip("."), port) for host, port in own_hosts}
    first = _check(url, own)
    check_headers(headers)
    sent = {"User-Agent": USER_AGENT, "Accept": "application/json", "Accept-Encoding": "identity"}
    # identity: the body is counted as it arrives, not inflated from a small compressed one
    if body is not None:
        sent["Content-Type"] = "application/json"
    request_headers = httpx2.Headers(sent)
    request_headers.update({name.encode(): value.encode() for name, value in headers.items()})  # over the defaults
    host = first[1]
    started = time.monotonic()
    try:
        async with (
            asyncio.timeout(timeout),
            httpx2.AsyncClient(
                transport=_Transport(Guard(resolve or system_resolve, allow_private)),
                timeout=httpx2.Timeout(timeout),  # asyncio.timeout bounds the whole; this bounds each step too
                follow_redirects=False,
                trust_env=False,  # no proxy from the environment: the Guard's connection is the one made
            ) as client,
        ):
            for hop in range(MAX_REDIRECTS + 1):
                status, content_type, content, location = await _retried(
                    client, method, url, request_headers, body, max_bytes
                )
                if location is None:
                    return Response(status, content_type, content, time.monotonic() - started)
                if hop == MAX_REDIRECTS:
                    break
                url = urljoin(url, location)
                try:
                    again = _check(url, own)
                except Refused:
                    again = None
                if again != first:
                    shown = urlsplit(url).netloc.rpartition("@")[2] or "another URL"
                    raise Refused(f"{host} redirected to another host ({shown}): not followed")
            raise CallFailed(f"{host} redirected more than {MAX_REDIRECTS} times: not followed")
    except (TimeoutError, httpx2.TimeoutException):
        raise TimedOut(f"the API did not answer within {timeout:g} s") from None
    except httpx2.ConnectError as e:
        raise CallFailed(f"cannot connect to {host}:{first[2]} ({str(e) or type(e).__name__})") from None
    except httpx2.RemoteProtocolError:
        raise CallFailed(f"{host} closed the connection without a complete HTTP answer") from None
    except httpx2.InvalidURL:
        raise Refused("the action's URL is not a valid URL: not called") from None
    except (httpx2.TransportError, httpx2.DecodingError) as e:
        # Not the exception's text: h11's may quote the answer's bytes.
        raise CallFailed(f"the call to {host} failed ({type(e).__name__})") from None


def _check(url: str, own: set[tuple[str, int | None]]) -> Origin:
    found = origin(url)
    _, host, port = found
    if (host.rstrip("."), port) in own or (host.rstrip("."), None) in own:
        raise Refused(f"{host} is this app's own host: not called")
    return found


async def _retried(
    client: httpx2.AsyncClient, method: str, url: str, headers: httpx2.Headers, body: bytes | None, max_bytes: int
) -> tuple[int, str, bytes, str | None]:
    """One request, sent once more after a failed connection when that is safe:
    ConnectError means no byte of it left. Never after a timeout or an answer."""
    try:
        return await _exchange(client, method, url, headers, body, max_bytes)
    except httpx2.ConnectError:
        if method not in IDEMPOTENT:
            raise
    return await _exchange(client, method, url, headers, body, max_bytes)


async def _exchange(
    client: httpx2.AsyncClient, method: str, url: str, headers: httpx2.Headers, body: bytes | None, max_bytes: int
) -> tuple[int, str, bytes, str | None]:
    """(status, content type, body, Location to follow or None), the body read
    as it streams and abandoned past max_bytes (leaving the block closes it)."""
    async with client.stream(method, url, headers=headers, content=body) as response:
        status, content_type = response.status_code, response.headers.get("content-type", "")
        location = response.headers.get("location")
        if method in FOLLOWED and status in REDIRECTS and location:
            return status, content_type, b"", location
        too_large = CallFailed(f"the API's response is larger than {_size(max_bytes)}: not read")
        declared = response.headers.get("content-length", "")
        if method != "HEAD" and declared.isdigit() and int(declared) > max_bytes:
            raise too_large
        chunks, size = [], 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > max_bytes:
                raise too_large
            chunks.append(chunk)
        return status, content_type, b"".join(chunks), None
