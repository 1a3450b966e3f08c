"""HTTP for importers: one source's own host, nothing else.

Every request, and every redirect hop, is checked before it is made:
http or https only, the source's host and port only, and (unless
KOOKEE_IMPORT_ALLOW_PRIVATE) no address of this machine or its private
networks, so that a source's URL cannot make the server read what only it
can reach (SSRF). A body larger than KOOKEE_IMPORT_MAX_BYTES and a fetch
longer than KOOKEE_IMPORT_TIMEOUT seconds are abandoned. 429 answers wait
for their Retry-After, 5xx and network errors are retried with backoff, a
few times. The token goes in the Authorization header, to that host only,
and never into an error message or a log line.

Left open: a host whose DNS answer changes between the check and the
connection (DNS rebinding) would slip past the address check; a deployment
that must rule it out puts the importer behind an egress proxy.
"""

from __future__ import annotations

import email.utils
import ipaddress
import logging
import socket
import time
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import httpx2
from django.conf import settings

logger = logging.getLogger("kookee.helpcenter")

MAX_REDIRECTS = 5
RETRIES = 4  # attempts after the first, for 429, 5xx and network errors
BACKOFF_SECONDS = (1, 2, 4, 8)
MAX_RETRY_AFTER = 120  # a longer Retry-After fails the sync rather than stall it
USER_AGENT = "KookeeHelpCenterImporter/1.0 (+https://github.com/kookee)"


class FetchError(Exception):
    """A source could not be read: the sync stops and changes nothing more."""


class Refused(FetchError):
    """A URL the importer may not fetch (another host, a private address, a
    scheme other than http(s))."""


class Redirected(FetchError):
    """Redirects in a loop, or too many of them."""


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
        raise Refused(f"not an http(s) URL: {_shown(url)}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, parts.hostname.lower(), port


def _shown(url: str) -> str:
    """A URL for messages: without credentials or query (either may hold a secret)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def check_address(host: str, port: int) -> None:
    """Refuses a host that is, or resolves to, an address that is not
    public: loopback, private networks, link-local (cloud metadata),
    multicast, reserved."""
    if settings.KOOKEE_IMPORT_ALLOW_PRIVATE:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise FetchError(f"cannot resolve {host}: {e.strerror}") from None
    for info in infos:
        address = ipaddress.ip_address(info[4][0].split("%")[0])
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
            address = address.ipv4_mapped
        if not address.is_global or address.is_multicast:
            raise Refused(
                f"{host} is a private or local address ({address}): not fetched "
                "(KOOKEE_IMPORT_ALLOW_PRIVATE=true allows a source on this machine or its network)"
            )


class Fetcher:
    """GETs within one origin (the source's), with bounds and retries."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str = "",
        scheme: str = "Bearer",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.origin = origin(base_url)
        self.requests = 0
        self._headers = {"User-Agent": USER_AGENT, **(headers or {})}
        if token:
            self._headers["Authorization"] = f"{scheme} {token}"
        timeout = settings.KOOKEE_IMPORT_TIMEOUT
        self._client = httpx2.Client(timeout=httpx2.Timeout(timeout), follow_redirects=False, trust_env=False)
        self._checked: set[str] = set()

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
        except Refused:
            return False

    def get(self, url: str, headers: dict[str, str] | None = None, accept_missing: bool = False) -> Response:
        """The answer to a GET, after redirects within the origin and
        retries. 304 is an answer (conditional requests); so are 404 and 410
        when accept_missing. Anything else not 2xx raises FetchError."""
        for attempt in range(RETRIES + 1):
            try:
                response = self._follow(url, headers or {})
            except httpx2.TransportError as e:
                if attempt == RETRIES:
                    raise FetchError(f"{_shown(url)}: {type(e).__name__}") from None
                pause(BACKOFF_SECONDS[attempt])
                continue
            status = response.status
            if status == 429 or status >= 500:
                if attempt == RETRIES:
                    raise FetchError(f"{_shown(url)} answered {status} after {RETRIES + 1} attempts")
                wait = _retry_after(response.headers.get("retry-after"))
                if wait is None:
                    wait = BACKOFF_SECONDS[attempt]
                if wait > MAX_RETRY_AFTER:
                    raise FetchError(f"{_shown(url)} asks to wait {wait:.0f} s (Retry-After): try later")
                logger.info("import: %s answered %s, again in %.1f s", _shown(url), status, wait)
                pause(wait)
                continue
            if 200 <= status < 300 or status == 304 or (accept_missing and status in (404, 410)):
                return response
            raise FetchError(f"{_shown(url)} answered {status}")
        raise AssertionError("unreachable")

    def _follow(self, url: str, headers: dict[str, str]) -> Response:
        seen: set[str] = set()
        for _ in range(MAX_REDIRECTS + 1):
            self._check(url)
            if url in seen:
                raise Redirected(f"redirect loop at {_shown(url)}")
            seen.add(url)
            response = self._get(url, headers)
            if response.status in (301, 302, 303, 307, 308) and response.headers.get("location"):
                url = urljoin(url, response.headers["location"])
                continue
            return response
        raise Redirected(f"more than {MAX_REDIRECTS} redirects from {_shown(url)}")

    def _check(self, url: str) -> None:
        found = origin(url)
        if found != self.origin:
            raise Refused(f"{_shown(url)} is not on the source's host ({self.origin[1]}): not fetched")
        if found[1] not in self._checked:
            check_address(found[1], found[2])
            self._checked.add(found[1])

    def _get(self, url: str, headers: dict[str, str]) -> Response:
        self.requests += 1
        deadline = time.monotonic() + settings.KOOKEE_IMPORT_TIMEOUT
        limit = settings.KOOKEE_IMPORT_MAX_BYTES
        with self._client.stream("GET", url, headers={**self._headers, **headers}) as response:
            declared = response.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > limit:
                raise FetchError(f"{_shown(url)} is larger than {limit} bytes: not imported")
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > limit:
                    raise FetchError(f"{_shown(url)} is larger than {limit} bytes: not imported")
                if time.monotonic() > deadline:
                    raise FetchError(f"{_shown(url)} took longer than {settings.KOOKEE_IMPORT_TIMEOUT} s")
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
