"""HTTP for importers: one source's own host, nothing else.

Every request, and every redirect hop, is checked before it is made:
http or https only, the source's host and port only. Every connection is
checked as it is made (Guard, httpx2's network backend here): the host is
resolved once, every address it resolves to must be public (public(), unless
KOOKEE_IMPORT_ALLOW_PRIVATE), and the socket connects to one of those very
addresses, so that a source's URL cannot make the server read what only it
can reach (SSRF), not even with a DNS answer that changes between two
lookups (rebinding): there is no second lookup. A body larger than
KOOKEE_IMPORT_MAX_BYTES and a fetch longer than KOOKEE_IMPORT_TIMEOUT seconds
are abandoned, and a sync that runs past KOOKEE_IMPORT_DEADLINE_SECONDS
(every Fetcher of a sync shares its deadline) stops. 429 answers wait for
their Retry-After, 5xx and network errors are retried with backoff, a few
times. The token goes in the Authorization header, to that host only, and
never into an error message or a log line.
"""

from __future__ import annotations

import email.utils
import ipaddress
import logging
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import httpcore2
import httpx2
from django.conf import settings

# The address policy lives in base (chat's actions share it); its names stay importable from here too.
from base.addresses import NOT_PUBLIC_V6 as NOT_PUBLIC_V6
from base.addresses import IPAddress as IPAddress
from base.addresses import public as public

logger = logging.getLogger("kookee.helpcenter")

MAX_REDIRECTS = 5
RETRIES = 4  # attempts after the first, for 429, 5xx and network errors
BACKOFF_SECONDS = (1, 2, 4, 8)
MAX_RETRY_AFTER = 120  # a longer Retry-After fails the sync rather than stall it
USER_AGENT = "KookeeHelpCenterImporter/1.0 (+https://github.com/kookee)"


class FetchError(Exception):
    """A source could not be read: the sync stops and changes nothing more."""


class URLRefused(FetchError):
    """A URL the importer may not fetch (another host, a private address, a
    scheme other than http(s))."""


class PrivateAddress(URLRefused):
    """A host at an address of this machine or its private networks: the
    source as a whole is refused (not a page to skip)."""


class Redirected(FetchError):
    """Redirects in a loop, or too many of them."""


class Overdue(FetchError):
    """The sync ran past its deadline (KOOKEE_IMPORT_DEADLINE_SECONDS)."""


@dataclass(frozen=True)
class Response:
    url: str  # after redirects
    status: int
    headers: httpx2.Headers
    body: bytes

    def text(self) -> str:
        charset = "utf-8"
        content_type = self.headers.get("content-type", "")
        if "charset=" in content_type:
            charset = content_type.split("charset=", 1)[1].split(";")[0].strip() or charset
        try:
            return self.body.decode(charset, errors="replace")
        except LookupError:
            return self.body.decode("utf-8", errors="replace")


def origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise URLRefused(f"not an http(s) URL: {shown(url)}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, parts.hostname.lower(), port


def shown(url: str) -> str:
    """A URL for messages: without credentials or query (either may hold a secret)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def sync_deadline() -> float:
    """When a sync starting now must stop (time.monotonic())."""
    return time.monotonic() + settings.KOOKEE_IMPORT_DEADLINE_SECONDS


def allowed_address(address: IPAddress) -> bool:
    return bool(settings.KOOKEE_IMPORT_ALLOW_PRIVATE) or public(address)


def resolve(host: str, port: int) -> list[str]:
    """The addresses a host resolves to (an address: itself), in the resolver's order."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise FetchError(f"cannot resolve {host}: {e.strerror}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class Guard(httpcore2.SyncBackend):
    """The network backend of every importer's connection: it resolves the
    host itself, refuses it when any address it resolves to is not allowed,
    and connects to one of those checked addresses (by number, so the socket
    does no lookup of its own). httpcore calls it for each new connection,
    those that replace a closed keep-alive one too; the Host header and TLS's
    SNI still name the host (httpcore takes them from the request)."""

    def __init__(
        self, resolve: Callable[[str, int], list[str]] = resolve, allowed: Callable[[IPAddress], bool] = allowed_address
    ) -> None:
        self._resolve = resolve
        self._allowed = allowed

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.NetworkStream:
        addresses = self._resolve(host, port)
        for address in addresses:
            number = ipaddress.ip_address(address.split("%")[0])  # without an IPv6 zone (fe80::1%eth0)
            if not self._allowed(number):
                raise PrivateAddress(
                    f"{host} is at a private or local address ({number}): not fetched "
                    "(KOOKEE_IMPORT_ALLOW_PRIVATE=true allows a source on this machine or its network)"
                )
        failed: httpcore2.ConnectError | None = None
        for address in addresses:
            try:
                return super().connect_tcp(address, port, timeout, local_address, socket_options)
            except httpcore2.ConnectError as e:
                failed = e  # the next address, as socket.create_connection would
        raise failed or httpcore2.ConnectError(f"{host} resolves to no address")


class _Transport(httpx2.HTTPTransport):
    """httpx2's own transport, whose connections Guard makes: httpx2 takes
    no network backend, so its connection pool is made again with one."""

    def __init__(self, network: httpcore2.NetworkBackend) -> None:
        context = httpx2.create_ssl_context(trust_env=False)  # its certificates loaded once, for both
        super().__init__(verify=context, trust_env=False)
        self._pool = httpcore2.ConnectionPool(
            ssl_context=context,
            max_connections=10,  # a crawl fetches at most 8 at a time
            keepalive_expiry=5.0,  # httpx2's default
            network_backend=network,
        )


class Fetcher:
    """GETs within one origin (the source's), with bounds and retries, until
    the sync's deadline (a Run's; else KOOKEE_IMPORT_DEADLINE_SECONDS from now)."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str = "",
        scheme: str = "Bearer",
        headers: dict[str, str] | None = None,
        deadline: float | None = None,
        network: Guard | None = None,
    ) -> None:
        self.origin = origin(base_url)
        self.requests = 0
        self.deadline = sync_deadline() if deadline is None else deadline
        self._headers = {"User-Agent": USER_AGENT, **(headers or {})}
        if token:
            self._headers["Authorization"] = f"{scheme} {token}"
        self._client = httpx2.Client(
            transport=_Transport(network or Guard()),
            timeout=httpx2.Timeout(settings.KOOKEE_IMPORT_TIMEOUT),
            follow_redirects=False,
            trust_env=False,
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Fetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def allowed(self, url: str) -> bool:
        """Whether a URL is on the source's own origin (links to follow)."""
        try:
            return origin(url) == self.origin
        except URLRefused:
            return False

    def time_left(self) -> float:
        """Seconds until the sync's deadline; raises Overdue past it."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Overdue(
                f"the sync ran out of time ({settings.KOOKEE_IMPORT_DEADLINE_SECONDS:g} s, "
                "KOOKEE_IMPORT_DEADLINE_SECONDS): stopped"
            )
        return left

    def wait(self, seconds: float) -> None:
        """Waits (a retry's backoff, a crawl delay), unless the sync's
        deadline comes first: then it stops now rather than wait in vain."""
        if seconds >= self.time_left():
            raise Overdue(
                f"the sync would run out of time ({settings.KOOKEE_IMPORT_DEADLINE_SECONDS:g} s, "
                f"KOOKEE_IMPORT_DEADLINE_SECONDS) waiting {seconds:.0f} s more: stopped"
            )
        pause(seconds)

    def get(self, url: str, headers: dict[str, str] | None = None, accept_missing: bool = False) -> Response:
        """The answer to a GET, after redirects within the origin and
        retries. 304 is an answer (conditional requests); so are 404 and 410
        when accept_missing. Anything else not 2xx raises FetchError."""
        for attempt in range(RETRIES + 1):
            try:
                response = self._follow(url, headers or {})
            except httpx2.TransportError as e:
                if attempt == RETRIES:
                    raise FetchError(f"{shown(url)}: {type(e).__name__}") from None
                self.wait(BACKOFF_SECONDS[attempt])
                continue
            status = response.status
            if status == 429 or status >= 500:
                if attempt == RETRIES:
                    raise FetchError(f"{shown(url)} answered {status} after {RETRIES + 1} attempts")
                wait = _retry_after(response.headers.get("retry-after"))
                if wait is None:
                    wait = BACKOFF_SECONDS[attempt]
                if wait > MAX_RETRY_AFTER:
                    raise FetchError(f"{shown(url)} asks to wait {wait:.0f} s (Retry-After): try later")
                logger.info("import: %s answered %s, again in %.1f s", shown(url), status, wait)
                self.wait(wait)
                continue
            if 200 <= status < 300 or status == 304 or (accept_missing and status in (404, 410)):
                return response
            raise FetchError(f"{shown(url)} answered {status}")
        raise AssertionError("unreachable")

    def _follow(self, url: str, headers: dict[str, str]) -> Response:
        seen: set[str] = set()
        for _ in range(MAX_REDIRECTS + 1):
            self._check(url)
            if url in seen:
                raise Redirected(f"redirect loop at {shown(url)}")
            seen.add(url)
            response = self._get(url, headers)
            if response.status in (301, 302, 303, 307, 308) and response.headers.get("location"):
                url = urljoin(url, response.headers["location"])
                continue
            return response
        raise Redirected(f"more than {MAX_REDIRECTS} redirects from {shown(url)}")

    def _check(self, url: str) -> None:
        # Its address is the Guard's to check, when it connects.
        if origin(url) != self.origin:
            raise URLRefused(f"{shown(url)} is not on the source's host ({self.origin[1]}): not fetched")

    def _get(self, url: str, headers: dict[str, str]) -> Response:
        self.requests += 1
        seconds = min(settings.KOOKEE_IMPORT_TIMEOUT, self.time_left())
        deadline = time.monotonic() + seconds
        limit = settings.KOOKEE_IMPORT_MAX_BYTES
        timeout = httpx2.Timeout(seconds)
        with self._client.stream("GET", url, headers={**self._headers, **headers}, timeout=timeout) as response:
            declared = response.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > limit:
                raise FetchError(f"{shown(url)} is larger than {limit} bytes: not imported")
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > limit:
                    raise FetchError(f"{shown(url)} is larger than {limit} bytes: not imported")
                if time.monotonic() > deadline:
                    self.time_left()  # the sync's deadline, when it is what cut this fetch short
                    raise FetchError(f"{shown(url)} took longer than {settings.KOOKEE_IMPORT_TIMEOUT} s")
                chunks.append(chunk)
            return Response(str(response.url), response.status_code, response.headers, b"".join(chunks))


def pause(seconds: float) -> None:
    """Waiting before a retry (a test counts the waits instead)."""
    time.sleep(seconds)


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds: a number, or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
