"""What the offline model quotes from a help-center passage: the part that
answers the question, not the passage's first sentences.

A passage (a section of an article, helpcenter/passages.py) is read as
units: its sentences, list items, numbered steps, tables and code blocks.
Each unit scores by the question's words it holds. Steps, tables and code
blocks are quoted whole (within a size limit), since a row or a step alone
misleads; a section's first block also scores for its heading, as a table
of limits under "Limits per plan" is the limits. Sentences and items are
quoted a few at a time, the best with its neighbours when they add the
question's words, and a sentence that ends with a colon brings the block it
introduces.

Words match in English and Portuguese alike: stems as the search has them
(helpcenter.search.normalised), and two words match when one begins the
other, they share their first six letters ("monthly" and "month",
"reenviados" and "reenviar") or they are one typo apart ("custmer").
Deterministic: the same question and passage give the same answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from helpcenter import search

# At most this much of a passage: an answer, not the article.
MAX_STEPS = 12
MAX_TABLE_ROWS = 12
MAX_BLOCK_CHARS = 2500
MAX_CODE_LINES = 25
MAX_SENTENCES = 3
MAX_ITEMS = 6  # of a list a sentence introduces ("You can choose:")
SHARED_PREFIX = 6

STEPS, TABLE, CODE, SENTENCE, ITEM = "steps", "table", "code", "sentence", "item"
BLOCKS = (STEPS, TABLE, CODE)

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_NUMBERED = re.compile(r"^ {0,3}\d{1,3}[.)]\s+\S")
_BULLET = re.compile(r"^ {0,3}[-*+]\s+(\S.*)$")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s")
_TABLE_DIVIDER = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
# A sentence ends at . ! or ? before a capital (or markup), not after "e.g.",
# "p. ex." or a section's number ("4.6. Can I...").
_SENTENCE_END = re.compile(
    r"(?<=[.!?])(?<!\be\.g\.)(?<!\bi\.e\.)(?<!\bvs\.)(?<!\bex\.)(?<!\bcf\.)(?<!\bp\.)(?<!\bNo\.)(?<!\d\.\d\.)"
    r"\s+(?=[A-Z0-9*_`\[(\"“¿¡ÁÉÍÓÚÂÊÔÃÕÇ])"
)
# A question for steps: "how do I ...", "how to ...", "como faço ...".
HOW = re.compile(
    r"^\s*how\b|\bhow (do|can|should|would) (i|we|you)\b|\bhow to\b|\bsteps?\b|\bwhat do i do\b"
    r"|\bcomo\b|\bpasso a passo\b|\betapas\b"
)


@dataclass
class Unit:
    kind: str
    text: str  # as quoted: Markdown
    group: int  # the paragraph or list it belongs to: sentences of one are joined on one line
    terms: set[str] = field(default_factory=set)
    cut: bool = False  # rows or steps left out for their number


@dataclass(frozen=True)
class Excerpt:
    text: str
    steps: bool  # the passage's steps, whole
    cut: bool = False  # something that answers was left out for its size


# Forms of the search's stopwords that reach its stemmer ("getting", "needed",
# "trying"): words of asking, not of the subject.
ASKING = frozenset({"get", "got", "go", "need", "want", "tri", "happen", "let"})


def terms(text: str) -> set[str]:
    """A text's words as the search stems them, stopwords out; a final "e"
    dropped too, so that "hide" and "hiding", "rate" and "rated" meet."""
    words = search.normalised(re.sub(r"(?i)\be-mail", "email", text)).split()
    return {word[:-1] if len(word) > 3 and word.endswith("e") else word for word in words} - ASKING


def matches(asked: Iterable[str], found: set[str]) -> int:
    """How many of the asked terms the found ones hold, each once."""
    return sum(1 for term in set(asked) if _held(term, found))


def _held(term: str, found: set[str]) -> bool:
    if term in found:
        return True
    for other in found:
        short, long = (term, other) if len(term) <= len(other) else (other, term)
        if len(short) >= 4 and long.startswith(short):
            return True
        if len(short) >= SHARED_PREFIX and short[:SHARED_PREFIX] == long[:SHARED_PREFIX]:
            return True
        if len(short) >= 5 and len(long) - len(short) <= 1 and _one_typo(short, long):
            return True
    return False


def _one_typo(a: str, b: str) -> bool:
    """Whether b is a with one letter left out, added, changed or two
    swapped ("custmer", "recipts", "adress"): visitors type in a hurry."""
    if len(a) > len(b):
        a, b = b, a
    start = 0
    while start < len(a) and a[start] == b[start]:
        start += 1
    if len(a) < len(b):
        return a[start:] == b[start + 1 :]
    rest = a[start + 1 :] == b[start + 1 :]
    swapped = a[start + 2 :] == b[start + 2 :] and a[start : start + 2] == b[start : start + 2][::-1]
    return rest or swapped


def is_how(question: str) -> bool:
    return bool(HOW.search(search.folded(question)))


def has_block(text: str, kinds: tuple[str, ...]) -> bool:
    """Whether the passage holds steps, a table or code (of `kinds`)."""
    return any(unit.kind in kinds for unit in units(text))


def excerpt(text: str, asked: set[str], heading: str = "", how: bool = False) -> Excerpt:
    """The part of a passage that answers: `asked`, the question's terms;
    `heading`, the section's (or the article's title, for its opening);
    `how`, whether the question asks for steps."""
    found = [_trimmed(unit, asked) for unit in units(text)]
    if not found:
        return Excerpt("", steps=False)
    # The section's first block is what the section is for: it holds its heading's words.
    first = next((n for n, unit in enumerate(found) if unit.kind in BLOCKS), None)
    scores = [matches(asked, unit.terms) for unit in found]
    if first is not None:  # one word more at most: the heading names the subject, not the answer
        scores[first] = min(matches(asked, found[first].terms | terms(heading)), scores[first] + 1)

    def best(kinds: tuple[str, ...]) -> int | None:
        candidates = [n for n, unit in enumerate(found) if unit.kind in kinds and _quotable(unit)]
        return max(candidates, key=lambda n: (scores[n], -n), default=None)

    block, sentence, steps = best(BLOCKS), best((SENTENCE, ITEM)), best((STEPS,))
    prose_score = scores[sentence] if sentence is not None else 0
    if how and steps is not None:
        chosen = [steps]
    elif block is not None and scores[block] >= max(1, prose_score):
        chosen = [block] + (_around(found, asked, sentence, limit=1) if sentence is not None and prose_score else [])
    elif sentence is not None and prose_score:
        chosen = _around(found, asked, sentence, limit=MAX_SENTENCES)
    elif block is not None:
        # Nothing shares a word: a section's steps or table is what it is for.
        chosen = [steps if steps is not None else best((TABLE,)) or block]
    else:
        chosen = [n for n, unit in enumerate(found) if unit.kind in (SENTENCE, ITEM)][:2]
    chosen = _with_introductions(found, chosen)
    quoted = [found[n] for n in chosen]
    left_out = [n for n in _introduced(found, chosen) if n not in chosen]
    return Excerpt(
        _joined(found, chosen),
        steps=any(u.kind == STEPS for u in quoted) and all(u.kind == STEPS or _introduces(u) for u in quoted),
        cut=bool(left_out) or any(unit.cut for unit in quoted),
    )


def _around(found: list[Unit], asked: set[str], best: int, limit: int) -> list[int]:
    """The best sentence or item with its neighbours while they add words of
    the question (or hold nearly as many), and the next sentence of its
    paragraph; then one from elsewhere in the passage that adds words of the
    question and holds two or more. A sentence still alone brings the next
    one, of the next paragraph: a symptom's fix, a rule's reason."""
    chosen = [best]
    covered = set(found[best].terms)
    score = matches(asked, covered)

    def adds(n: int) -> int:
        return matches(asked, covered | found[n].terms) - matches(asked, covered)

    def take(n: int) -> None:
        chosen.append(n)
        covered.update(found[n].terms)

    low = high = best
    while len(chosen) < limit:
        near = [n for n in (high + 1, low - 1) if 0 <= n < len(found) and found[n].kind == found[best].kind]
        adding = [n for n in near if adds(n)]
        adding += [n for n in near if n not in adding and matches(asked, found[n].terms) >= max(2, score - 1)]
        if not adding:
            break
        take(adding[0])
        low, high = min(low, adding[0]), max(high, adding[0])
    following = best + 1
    # Not a sentence that introduces a block: what it introduces shares no word of the question.
    follows = (
        following < len(found)
        and found[best].kind == found[following].kind == SENTENCE
        and not _introduces(found[following])
    )
    if len(chosen) == 1 < limit and follows and found[following].group == found[best].group:
        take(following)
    elsewhere = [
        n
        for n, unit in enumerate(found)
        if n not in chosen and unit.kind in (SENTENCE, ITEM) and adds(n) and matches(asked, unit.terms) >= 2
    ]
    if elsewhere and len(chosen) < limit:
        take(max(elsewhere, key=lambda n: (adds(n), matches(asked, found[n].terms), -abs(n - best))))
    if len(chosen) == 1 < limit and follows:
        take(following)
    return sorted(chosen)


def _introduces(unit: Unit) -> bool:
    return unit.kind not in BLOCKS and unit.text.rstrip().endswith(":")


def _introduced(found: list[Unit], chosen: list[int]) -> list[int]:
    """What the chosen sentences ending in a colon introduce: the block
    after, or the items of the list after."""
    out: list[int] = []
    for n in chosen:
        if not _introduces(found[n]) or n + 1 >= len(found):
            continue
        following = found[n + 1]
        if following.kind in BLOCKS:
            out.append(n + 1)
        elif following.kind == ITEM and following.group != found[n].group:
            out += [m for m in range(n + 1, len(found)) if found[m].group == following.group][:MAX_ITEMS]
    return out


def _with_introductions(found: list[Unit], chosen: list[int]) -> list[int]:
    """The chosen units, with the sentence that introduces a chosen block
    (ending in a colon, just before it) and what a chosen sentence
    introduces; a block too big to quote is left for the link."""
    out = set(chosen)
    for n in chosen:
        if found[n].kind in BLOCKS and n > 0 and _introduces(found[n - 1]):
            out.add(n - 1)
    out |= {n for n in _introduced(found, sorted(out)) if _quotable(found[n])}
    return sorted(out)


def _quotable(unit: Unit) -> bool:
    if unit.kind == CODE and unit.text.count("\n") - 1 > MAX_CODE_LINES:
        return False
    return len(unit.text) <= MAX_BLOCK_CHARS


def _trimmed(unit: Unit, asked: set[str]) -> Unit:
    """A long table as its header and the rows that hold the question's
    words (else its first rows), at most MAX_TABLE_ROWS."""
    if unit.kind != TABLE:
        return unit
    header, divider, *rows = unit.text.split("\n")
    if len(rows) <= MAX_TABLE_ROWS:
        return unit
    wanted = [row for row in rows if matches(asked, terms(_plain(row)))]
    kept = (wanted or rows)[:MAX_TABLE_ROWS]
    return Unit(TABLE, "\n".join([header, divider, *kept]), unit.group, unit.terms, cut=True)


def _joined(found: list[Unit], chosen: list[int]) -> str:
    """The chosen units as Markdown, in the passage's order: a paragraph's
    sentences on one line, a list's items one a line, blocks apart."""
    parts: list[str] = []
    previous: Unit | None = None
    for n in chosen:
        unit = found[n]
        text = unit.text.strip("\n")
        if _introduces(unit) and n + 1 not in chosen:
            text = text.rstrip().rstrip(":") + "."  # what it introduced is left for the link
        if previous is not None and previous.group == unit.group and unit.kind == previous.kind == SENTENCE:
            parts[-1] += " " + text
        elif previous is not None and previous.group == unit.group and unit.kind == previous.kind == ITEM:
            parts[-1] += "\n" + text
        else:
            parts.append(text)
        previous = unit
    return "\n\n".join(part for part in parts if part.strip())


# --- reading a passage --------------------------------------------------------------------


def units(text: str) -> list[Unit]:
    """The passage's sentences, list items, steps, tables and code blocks,
    in order; headings are left out (a bare heading answers nothing)."""
    lines = text.replace("\r\n", "\n").split("\n")
    found: list[Unit] = []
    group = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or _HEADING.match(line):
            i += 1
            continue
        group += 1
        if _FENCE.match(line):
            end = _fence_end(lines, i)
            found.append(Unit(CODE, "\n".join(lines[i:end]), group))
            i = end
        elif _is_table(lines, i):
            end = i
            while end < len(lines) and lines[end].count("|") >= 1 and lines[end].strip():
                end += 1
            rows = [_cells(row) for row in lines[i:end]]
            if _holds_data(rows):
                found.append(Unit(TABLE, "\n".join(row.strip() for row in lines[i:end]), group))
            else:
                # A table for layout (a note's box, a page's navigation): its words are text.
                cells = [cell for row in rows[2:] + rows[:1] for cell in row if len(cell.split()) > 1]
                found += [Unit(SENTENCE, cell, group) for cell in cells]
            i = end
        elif _NUMBERED.match(line):
            end = _list_end(lines, i)
            steps, cut = _steps(lines[i:end])
            if sum(1 for row in lines[i:end] if _NUMBERED.match(row)) >= 2:
                found.append(Unit(STEPS, steps, group, cut=cut))
            else:
                found.append(Unit(ITEM, steps, group))  # a numbered heading, not steps
            i = end
        elif _BULLET.match(line):
            end = _list_end(lines, i)
            found += [Unit(ITEM, item, group) for item in _items(lines[i:end])]
            i = end
        else:
            end = i
            while end < len(lines) and lines[end].strip() and not _starts_block(lines, end):
                end += 1
            paragraph = " ".join(part.strip().lstrip("> ").strip() for part in lines[i:end])
            found += [Unit(SENTENCE, s.strip(), group) for s in _SENTENCE_END.split(paragraph) if s.strip()]
            i = end
    for unit in found:
        unit.terms = terms(_plain(unit.text))
    return found


def _starts_block(lines: list[str], i: int) -> bool:
    line = lines[i]
    return bool(
        _FENCE.match(line) or _HEADING.match(line) or _NUMBERED.match(line) or _BULLET.match(line)
    ) or _is_table(lines, i)


def _fence_end(lines: list[str], start: int) -> int:
    """The index after the fence that closes the one at `start` (the end, if none does)."""
    marker = _FENCE.match(lines[start]).group(1)  # type: ignore[union-attr]
    for end in range(start + 1, len(lines)):
        if lines[end].strip().startswith(marker[0] * len(marker)) and not lines[end].strip().strip(marker[0]):
            return end + 1
    return len(lines)


def _is_table(lines: list[str], i: int) -> bool:
    return "|" in lines[i] and i + 1 < len(lines) and bool(_TABLE_DIVIDER.match(lines[i + 1])) and "-" in lines[i + 1]


def _list_end(lines: list[str], start: int) -> int:
    """The index after a list: its items, what is indented under them, blank
    lines between them, and a code block between two of its steps."""
    numbered = bool(_NUMBERED.match(lines[start]))
    same = _NUMBERED if numbered else _BULLET
    i = start + 1
    while i < len(lines):
        line = lines[i]
        if same.match(line) or (line.strip() and line[:1] in " \t"):
            i += 1
            continue
        if line.strip() and not (numbered and _FENCE.match(line)):
            return i  # the list has ended: text at the margin
        # Blank lines, and for steps code at the margin between two of them:
        # the list goes on only if an item of it (or text under one) follows.
        after = i
        while after < len(lines) and (not lines[after].strip() or (numbered and _FENCE.match(lines[after]))):
            after = _fence_end(lines, after) if lines[after].strip() else after + 1
        if after < len(lines) and (same.match(lines[after]) or lines[after][:1] in " \t"):
            i = after
            continue
        return i
    return i


def _steps(lines: list[str]) -> tuple[str, bool]:
    """Numbered steps as written (their numbers, the choices under them, the
    code between them), at most MAX_STEPS; and whether some were left out."""
    out: list[str] = []
    count = 0
    fenced = False
    for line in lines:
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and _NUMBERED.match(line):
            count += 1
            if count > MAX_STEPS:
                break
        out.append(line.rstrip())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip("\n"), count > MAX_STEPS


def _items(lines: list[str]) -> list[str]:
    """A bullet list's top-level items, each with what is indented under it."""
    items: list[list[str]] = []
    for line in lines:
        bullet = _BULLET.match(line)
        if bullet and not line.startswith(("    ", "\t")):
            items.append([f"- {bullet.group(1).strip()}"])
        elif items and line.strip():
            items[-1].append(line.rstrip())
    return ["\n".join(item) for item in items]


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def _holds_data(rows: list[list[str]]) -> bool:
    """Whether a table holds data (a header naming two columns or more, and
    rows mostly filled), not a layout's boxes."""
    header, body = rows[0], rows[2:]
    filled = [cell for row in body for cell in row if cell]
    return sum(1 for cell in header if cell) >= 2 and bool(body) and len(filled) >= 0.6 * sum(map(len, body))


def _plain(markdown: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", markdown)
    return re.sub(r"[*_`>#|]", " ", text)
