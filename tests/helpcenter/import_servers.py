"""Local servers that play the sources an importer reads, at the wire: a
Zendesk Help Center API, the Intercom Articles API and a small website. Real
HTTP/1.1 on a loopback port, in a thread of the test's process; nothing
leaves the machine.

Each records the requests it got, and a test can queue faults for the next
ones (a 429 with Retry-After, a 500, a stall) or change what it serves.
Two play the hostile sources of the security audit: a Zendesk whose
next_page is itself (`ZendeskServer(loop=True)`), and a website whose sitemap
index lists gzip sitemaps of 900,000 URLs each (`SitemapBombServer`).
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import threading
import time
import zlib
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

HERE = Path(__file__).resolve().parent
SITE = HERE / "site"
ZENDESK = HERE / "zendesk"


@dataclass
class Fault:
    status: int = 500
    retry_after: str | None = None
    stall: float = 0.0


@dataclass
class Answer:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] | None = None


class Server:
    """A threaded HTTP server that answers GETs with self.answer(path, query, headers)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.faults: deque[Fault] = deque()
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                headers = {k.lower(): v for k, v in self.headers.items()}
                with server.lock:
                    server.requests.append({"path": parts.path, "query": parts.query, "headers": headers})
                    fault = server.faults.popleft() if server.faults else None
                if fault is not None:
                    time.sleep(fault.stall)
                    extra = {"Retry-After": fault.retry_after} if fault.retry_after else {}
                    self._send(Answer(fault.status, b"{}", extra))
                    return
                self._send(server.answer(parts.path, parse_qs(parts.query), headers))

            def _send(self, answer: Answer) -> None:
                self.send_response(answer.status)
                for name, value in (answer.headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                try:
                    self.wfile.write(answer.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a test of its timeout)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        # A short poll: shutdown() waits for it, at the end of every test.
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def answer(self, path: str, query: dict[str, list[str]], headers: dict[str, str]) -> Answer:
        raise NotImplementedError

    def paths(self) -> list[str]:
        return [r["path"] for r in self.requests]


def _json(value: Any, status: int = 200) -> Answer:
    return Answer(status, json.dumps(value).encode(), {"Content-Type": "application/json; charset=utf-8"})


class ZendeskServer(Server):
    """GET /api/v2/help_center/{locale}/articles.json?page=N&per_page=M, as
    Zendesk answers it (count, page, page_count, next_page as an absolute URL).
    With `loop`, every page's next_page is that page itself."""

    def __init__(self, per_page: int = 10, token: str | None = None, loop: bool = False) -> None:
        self.articles: dict[str, list[dict[str, Any]]] = {
            "en-us": json.loads((ZENDESK / "articles.en-us.json").read_text()),
            "pt-br": json.loads((ZENDESK / "articles.pt-br.json").read_text()),
        }
        self.per_page = per_page
        self.token = token  # when set, the Authorization header it wants
        self.loop = loop
        super().__init__()

    def answer(self, path: str, query: dict[str, list[str]], headers: dict[str, str]) -> Answer:
        parts = path.strip("/").split("/")
        if parts[:3] != ["api", "v2", "help_center"] or parts[-1] != "articles.json":
            return _json({"error": "InvalidEndpoint"}, 404)
        if self.token is not None and headers.get("authorization") != self.token:
            return _json({"error": "Couldn't authenticate you"}, 401)
        locale = parts[3] if len(parts) == 5 else "en-us"
        articles = self.articles.get(locale)
        if articles is None:
            return _json({"error": "RecordNotFound", "description": "Locale not found"}, 404)
        page = int(query.get("page", ["1"])[0])
        # Zendesk caps per_page at 100; this server at its own page size.
        size = min(self.per_page, int(query.get("per_page", [str(self.per_page)])[0]))
        count = len(articles)
        pages = max(1, -(-count // size))
        base = f"{self.url}/api/v2/help_center/{locale}/articles.json"
        following = page if self.loop else page + 1
        return _json(
            {
                "articles": articles[(page - 1) * size : page * size],
                "count": count,
                "page": page,
                "page_count": pages,
                "per_page": size,
                "sort_by": "position",
                "sort_order": "asc",
                "next_page": f"{base}?page={following}&per_page={size}" if page < pages or self.loop else None,
                "previous_page": f"{base}?page={page - 1}&per_page={size}" if page > 1 else None,
            }
        )


def intercom_article(number: int, title: str, body: str, **fields: Any) -> dict[str, Any]:
    article = {
        "id": str(8_000_000 + number),
        "type": "article",
        "workspace_id": "ecahpwf5",
        "parent_id": 6_871_118,
        "parent_type": "collection",
        "parent_ids": [6_871_118],
        "title": title,
        "description": "",
        "body": body,
        "default_locale": "en",
        "author_id": 991_267_460,
        "state": "published",
        "created_at": 1_734_537_259 + number,
        "updated_at": 1_734_537_300 + number,
        "url": f"https://help.acme.example/en/articles/{8_000_000 + number}-{title.lower().replace(' ', '-')}",
        "translated_content": {"type": "article_translated_content"},
    }
    article.update(fields)
    return article


class IntercomServer(Server):
    """GET /articles?page=N, with a Bearer token and Intercom-Version, as
    Intercom answers it (data, pages.next as a URL, total_count)."""

    def __init__(self, articles: list[dict[str, Any]], per_page: int = 2, token: str = "ic-token") -> None:
        self.articles = articles
        self.per_page = per_page
        self.token = token
        super().__init__()

    def answer(self, path: str, query: dict[str, list[str]], headers: dict[str, str]) -> Answer:
        if headers.get("authorization") != f"Bearer {self.token}":
            return _json({"type": "error.list", "errors": [{"code": "unauthorized"}]}, 401)
        if path != "/articles":
            return _json({"type": "error.list", "errors": [{"code": "not_found"}]}, 404)
        page = int(query.get("page", ["1"])[0])
        size = self.per_page
        pages = max(1, -(-len(self.articles) // size))
        found: dict[str, Any] = {"type": "pages", "page": page, "per_page": size, "total_pages": pages}
        if page < pages:
            found["next"] = f"{self.url}/articles?page={page + 1}"
        return _json(
            {
                "type": "list",
                "data": self.articles[(page - 1) * size : page * size],
                "total_count": len(self.articles),
                "pages": found,
            }
        )


class SiteServer(Server):
    """The small website in tests/helpcenter/site, with ETag and
    Last-Modified (and 304 for a conditional GET that matches), a redirect
    loop at /loop/, a redirect to another host at /away/, and pages a test
    edits (`pages[path] = html`) or removes (`gone.add(path)`)."""

    def __init__(self) -> None:
        self.pages: dict[str, str] = {}
        self.gone: set[str] = set()
        self.redirects: dict[str, str] = {}
        self.modified = email.utils.formatdate(time.time() - 3600, usegmt=True)
        super().__init__()

    def answer(self, path: str, query: dict[str, list[str]], headers: dict[str, str]) -> Answer:
        if path in self.redirects:
            return Answer(302, b"", {"Location": self.redirects[path]})
        if path in self.gone:
            return Answer(404, b"Not found", {"Content-Type": "text/html"})
        if not path.endswith("/") and (SITE / path.lstrip("/")).is_dir():
            return Answer(301, b"", {"Location": path + "/"})  # as a static server sends a folder
        text = self.pages.get(path)
        if text is None:
            file = SITE / (path.lstrip("/") + ("index.html" if path.endswith("/") else ""))
            if not file.is_file() or SITE not in file.resolve().parents:
                return Answer(404, b"<h1>Not found</h1>", {"Content-Type": "text/html"})
            text = file.read_text()
        body = text.replace("{origin}", self.url).encode()
        etag = '"' + hashlib.md5(body).hexdigest() + '"'
        if headers.get("if-none-match") == etag:
            return Answer(304, b"", {"ETag": etag})
        kind = {".xml": "application/xml", ".txt": "text/plain"}.get(Path(path).suffix, "text/html; charset=utf-8")
        return Answer(200, body, {"Content-Type": kind, "ETag": etag, "Last-Modified": self.modified})


class SitemapBombServer(Server):
    """The audit's hostile website: /sitemap_index.xml lists `sitemaps` gzip
    sitemaps of `urls` pages each (by default 6 of 900,000: 46 MB of XML,
    2.3 MB gzipped, each), and every page it lists answers a small article.
    The sitemap is made once per server, as a stream (its XML is never whole
    in memory), and served the same under each name; no robots.txt."""

    def __init__(self, sitemaps: int = 6, urls: int = 900_000) -> None:
        super().__init__()
        self.sitemaps = sitemaps
        self.sitemap = _gzip_sitemap(self.url, urls)

    def answer(self, path: str, query: dict[str, list[str]], headers: dict[str, str]) -> Answer:
        if path == "/sitemap_index.xml":
            listed = "".join(
                f"<sitemap><loc>{self.url}/sitemaps/{n}.xml.gz</loc></sitemap>" for n in range(1, self.sitemaps + 1)
            )
            body = f'<?xml version="1.0" encoding="UTF-8"?><sitemapindex xmlns="{SITEMAPS}">{listed}</sitemapindex>'
            return Answer(200, body.encode(), {"Content-Type": "application/xml"})
        if path.startswith("/sitemaps/") and path.endswith(".xml.gz"):
            return Answer(200, self.sitemap, {"Content-Type": "application/gzip"})
        number = path.strip("/")
        if number.isdigit():
            page = (
                f'<html lang="en"><head><title>Page {number}</title></head><body><main>'
                f"<h1>Page {number}</h1><p>Article {number} of a very large site.</p></main></body></html>"
            )
            return Answer(200, page.encode(), {"Content-Type": "text/html; charset=utf-8"})
        return Answer(404, b"Not found", {"Content-Type": "text/plain"})


SITEMAPS = "http://www.sitemaps.org/schemas/sitemap/0.9"


def _gzip_sitemap(origin: str, urls: int) -> bytes:
    """A gzip sitemap of `urls` pages (origin/0, origin/1, ...), compressed
    as it is written."""
    packer = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [packer.compress(f'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="{SITEMAPS}">'.encode())]
    for start in range(0, urls, 10_000):
        block = "".join(f"<url><loc>{origin}/{n}</loc></url>" for n in range(start, min(urls, start + 10_000)))
        parts.append(packer.compress(block.encode()))
    parts += [packer.compress(b"</urlset>"), packer.flush()]
    return b"".join(parts)
