"""The security audit's two hostile sources, each imported as an operator
imports it (`manage.py import_help_center ... --no-embed`, a child process
on a fresh SQLite database, KOOKEE_IMPORT_ALLOW_PRIVATE for the local
servers), with the child's peak RSS and wall time, beside the same command
on a benign source of the same kind (the baseline that "extra" is over):

- a website whose sitemap index lists 6 gzip sitemaps of 900,000 URLs each,
  read with --max-pages 3 (tests/helpcenter/import_servers.py,
  SitemapBombServer), against the tests' small website's sitemap index;
- a Zendesk whose next_page is the page itself (ZendeskServer(loop=True)),
  against the tests' Zendesk of 24 articles.

The bound the tests hold them to (tests/helpcenter/importers/test_bounds.py):
under 100 MB of RSS over the baseline and under 10 s each.

    .venv/bin/python bench/hostile_sources.py [--limit SECONDS]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.helpcenter.importers.measure import Cost

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=120, help="kill an import after this many seconds")
    args = parser.parse_args()

    from tests.helpcenter.import_servers import SitemapBombServer, SiteServer, ZendeskServer
    from tests.helpcenter.importers.measure import Importer

    importer = Importer(Path(tempfile.mkdtemp(prefix="kookee-hostile-")))
    sitemap = ("website", "/sitemap_index.xml", "--max-pages", "3")
    sources = [
        ("website, small sitemap index (baseline)", SiteServer(), sitemap),
        ("website, 6 x 900,000-URL gzip sitemaps", SitemapBombServer(), sitemap),
        ("zendesk, 24 articles (baseline)", ZendeskServer(), ("zendesk", "")),
        ("zendesk, next_page is itself", ZendeskServer(loop=True), ("zendesk", "")),
    ]
    rows = []
    for label, server, (kind, path, *options) in sources:
        try:
            cost = importer.run(kind, server.url + path, *options, limit=args.limit)
        finally:
            server.close()
        rows.append((label, kind, cost, len(server.requests)))

    baselines = {"website": rows[0][2], "zendesk": rows[2][2]}
    print(f"{'source':42} {'peak RSS':>9} {'extra':>8} {'seconds':>8} {'requests':>9}  result")
    for label, kind, cost, requests in rows:
        extra = cost.peak_rss_mb - baselines[kind].peak_rss_mb
        print(
            f"{label:42} {cost.peak_rss_mb:6.0f} MB {extra:+5.0f} MB {cost.seconds:8.1f} {requests:9}  "
            + _result(cost, args.limit)
        )


def _result(cost: Cost, limit: float) -> str:
    if cost.killed:
        return f"killed after {limit:.0f} s"
    lines = [line for line in cost.output.splitlines() if line.strip()]
    return lines[-1][:110] if lines else f"exit {cost.returncode}"


if __name__ == "__main__":
    main()
