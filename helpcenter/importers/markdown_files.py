"""A folder of Markdown files (docs kept in git): each file an article, its
path (relative to the folder) its id.

Front matter (YAML between `---` lines at the top) may set `title`, `slug`,
`published` (or `draft`), `locale` and `translation_key`. Without a title,
the file's first `# ` heading is the title (and leaves the body); without
that, its name. A file's language is its front matter's `locale`, else a
locale folder at the top (`pt-br/billing.md`) or suffix (`billing.pt-br.md`),
else the source's `locale` setting. Files with the same path apart from the
locale are versions of one article.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import yaml
from django.conf.locale import LANG_INFO

from helpcenter.importers import Item, Run, SourceError, locale

SUFFIXES = (".md", ".markdown")
LOCALE = re.compile(r"^([a-z]{2,3})([-_][a-z0-9]{2,4})?$", re.IGNORECASE)
FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)\n(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL)
TITLE = re.compile(r"\A\s*#[ \t]+(.+?)[ \t#]*(?:\n|\Z)")
MAX_FILE_BYTES = 2_000_000


def read(run: Run) -> Iterator[Item]:
    root = Path(run.source.location).expanduser()
    if not root.is_dir():
        raise SourceError(f"{root} is not a folder")
    root = root.resolve()
    default = locale(run.source.settings.get("locale"), "en")
    files = [
        path
        for path in sorted(root.rglob("*"))
        if path.suffix.lower() in SUFFIXES
        and path.is_file()
        and not any(part.startswith(".") for part in path.relative_to(root).parts)
        # a link out of the folder is not the folder's
        and path.resolve().is_relative_to(root)
    ]
    run.expect(len(files))
    for path in files:
        yield _item(root, path, default)


def _item(root: Path, path: Path, default: str) -> Item:
    relative = path.relative_to(root).as_posix()
    if path.stat().st_size > MAX_FILE_BYTES:
        raise SourceError(f"{relative} is larger than {MAX_FILE_BYTES} bytes")
    try:
        text = path.read_text(encoding="utf-8-sig").replace("\r\n", "\n")
    except UnicodeDecodeError:
        raise SourceError(f"{relative} is not UTF-8 text") from None
    meta, body = _front_matter(text, relative)
    title = str(meta.get("title") or "").strip()
    if not title:
        heading = TITLE.match(body)
        if heading:
            title, body = heading.group(1).strip(), body[heading.end() :]
        else:
            title = path.stem.split(".")[0].replace("-", " ").replace("_", " ").strip().capitalize()
    found_locale, key = _locale_and_key(relative)
    published = meta.get("published", not meta.get("draft", False))
    updated = meta.get("updated") or meta.get("date")
    return Item(
        external_id=relative,
        locale=locale(meta.get("locale") or meta.get("lang") or found_locale, default),
        title=title,
        body=body.strip() + "\n",
        published=bool(published),
        slug=str(meta.get("slug") or ""),
        translation_key=str(meta.get("translation_key") or key),
        section=relative.rsplit("/", 1)[0] if "/" in relative else "",
        updated_at=_datetime(updated) or datetime.fromtimestamp(path.stat().st_mtime, UTC),
    )


def _front_matter(text: str, relative: str) -> tuple[dict, str]:
    found = FRONT_MATTER.match(text)
    if not found:
        return {}, text
    try:
        meta = yaml.safe_load(found.group(1)) or {}
    except yaml.YAMLError as e:
        raise SourceError(f"{relative}: its front matter is not valid YAML ({e.__class__.__name__})") from None
    if not isinstance(meta, dict):
        raise SourceError(f"{relative}: its front matter is not a mapping")
    return meta, text[found.end() :]


def _locale_and_key(relative: str) -> tuple[str, str]:
    """The locale a path names (a top folder, or a suffix before .md), and
    the path without it: what the file's other languages share."""
    parts = relative.split("/")
    found = ""
    if len(parts) > 1 and _is_locale(parts[0]):
        found, parts = parts[0], parts[1:]
    name = parts[-1].rsplit(".", 1)[0]
    stem, _, suffix = name.rpartition(".")
    if stem and _is_locale(suffix):
        found, name = found or suffix, stem
    parts[-1] = name
    return found, "/".join(parts)


def _is_locale(name: str) -> bool:
    """A language Django knows (en, pt-br, pt_BR), not any short folder name (api, faq)."""
    found = LOCALE.match(name)
    return bool(found) and found.group(1).lower() in LANG_INFO


def _datetime(value: object) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if hasattr(value, "isoformat"):  # a date
        return datetime.fromisoformat(value.isoformat()).replace(tzinfo=UTC)  # type: ignore[union-attr]
    return None
