"""Help-center ranking: BM25 over whole articles, plus a bonus for query terms
found in the title (a title says what an article is about; a body mentions
many things in passing).

Ranking always finds a best article; it is only an answer when it clears the
relevance floor. Three measures decide, since none separates alone:

- relevance: the article's score against the query's own weight (the sum of
  its terms' idf): 1.0 is every term once in an article of average length,
  whatever the size of the help center or the length of the query;
- coverage: the share of the query's weight that the article contains. A
  term the help center never uses ("bitcoin") weighs the most, so when the
  article matches only the common words around it ("pay"), coverage is low;
- strength: the article's score in units of the weight of a term that no
  article contains: how much it says about the query, however long the query.

An article clears the floor with enough relevance and coverage (the
question's main terms found, and found well), or with a high relevance and
strength, when the words it misses are filler ("we're moving from Canny, can
we bring our old posts?").
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

import numpy as np
import Stemmer  # type: ignore[import-not-found]  # PyStemmer is a C extension with no type stubs

STOPWORDS = frozenset(
    """a about after all also am an and any are as at be been but by can could do does
    doing don for from get got had has have how i if in into is it its just let lot lots
    many me more most much my need no not now of on one or our out please really should so
    some than that the their them
    then there these they this to too up us use using want was way we were what when
    where which who why will with would you your yours kookee""".split()
    # Words of asking, not of the subject: in a query they would weigh as
    # much as its subject, being words no article uses ("explain SSO").
    + """explain tell show find know understand wondering wonder question questions ask asking possible able
    something anything thing things info information detail details exactly hello hi hey thanks thank
    ok okay yes sure im ive dont cant doesnt isnt whats hows work works working""".split()
    # Portuguese, without accents (see folded): visitors ask in it, and
    # its questions are grouped on the unanswered-questions page.
    + """o os um uma uns umas de do da dos das em nos nas num numa por pra para com sem que se e ou mas
    como qual quais quando onde porque eu voce voces ele ela eles elas meu minha meus minhas seu sua
    seus suas isso isto esse essa este esta estas estes ser estar estou tem ter tenho temos pode posso podem
    quero queria preciso gostaria fazer faco consigo ola oi obrigado obrigada favor tambem ja ainda muito
    mais menos aqui la sim nao ver""".split()
)
TITLE_BONUS = 1.5
K1 = 1.2
B = 0.75
SNIPPET_CHARS = 280
# The relevance floor (see the module's docstring), set on the demo help
# center's questions, those it answers and those it does not
# (tests/helpcenter/test_search.py holds both sets).
MIN_RELEVANCE = 0.55
MIN_COVERAGE = 0.5
STRONG_RELEVANCE = 0.8
STRONG_STRENGTH = 2.2


@dataclass(frozen=True)
class Document:
    id: int
    title: str
    url: str
    body: str


@dataclass(frozen=True)
class Hit:
    document: Document
    relevance: float
    coverage: float
    strength: float

    @property
    def good(self) -> bool:
        """Clears the relevance floor: an article that answers the query."""
        if self.relevance >= STRONG_RELEVANCE and self.strength >= STRONG_STRENGTH:
            return True
        return self.relevance >= MIN_RELEVANCE and self.coverage >= MIN_COVERAGE


def terms(text: str) -> list[str]:
    words = re.findall(r"[a-z0-9]+", folded(text))
    return [_stem(w) for w in words if w not in STOPWORDS]


def folded(text: str) -> str:
    """Lower case without accents: "Não", "cobrança" and "nao", "cobranca"
    are the same words, and an accent does not split one in two."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


@functools.lru_cache(maxsize=200_000)
def _stem(word: str) -> str:
    """Snowball's English stemmer, then its Portuguese one: "installing",
    "installation" and "installed" are one term, and so are "senha" and
    "senhas". One function for every text, in both languages, so that a
    query and an article always agree (a word is folded first: visitors
    type "instalacao" as often as "instalação")."""
    stemmed: str = _PORTUGUESE.stemWord(_ENGLISH.stemWord(word))
    return stemmed


_ENGLISH = Stemmer.Stemmer("english")
_PORTUGUESE = Stemmer.Stemmer("portuguese")


class Index:
    """The documents, tokenised and stemmed once, as postings: for each term,
    the documents that hold it and how often. A query then costs a few array
    operations per query term, not a loop over every article (about 1 ms at
    5,000 articles; bench/search_scale.py)."""

    def __init__(self, documents: list[Document]) -> None:
        self.documents = documents
        self.by_id = {d.id: d for d in documents}
        bags = [Counter(terms(d.title) + terms(d.body)) for d in documents]
        self._lengths = np.array([sum(bag.values()) for bag in bags], dtype=np.float64)
        self._average_length = float(self._lengths.mean()) if documents else 0.0
        self._ids = np.array([d.id for d in documents], dtype=np.int64)
        docs: dict[str, list[int]] = {}
        counts: dict[str, list[int]] = {}
        for number, bag in enumerate(bags):
            for term, count in bag.items():
                docs.setdefault(term, []).append(number)
                counts.setdefault(term, []).append(count)
        self._postings = {
            term: (np.array(numbers, dtype=np.int64), np.array(counts[term], dtype=np.float64))
            for term, numbers in docs.items()
        }
        titled: dict[str, list[int]] = {}
        for number, document in enumerate(documents):
            for term in set(terms(document.title)):
                titled.setdefault(term, []).append(number)
        self._titled = {term: np.array(numbers, dtype=np.int64) for term, numbers in titled.items()}

    def rank(self, query: str, limit: int = 3) -> list[Document]:
        """The documents that best match the query, best first, whether or
        not they clear the relevance floor."""
        return [hit.document for hit in self.hits(query, limit)]

    def hits(self, query: str, limit: int = 3) -> list[Hit]:
        """The documents that share a term with the query, best first, with
        the measures of their relevance."""
        wanted = set(terms(query))
        if not wanted or not self.documents:
            return []
        # A word no article uses weighs no more than the rarest word one
        # does: otherwise a typo or a word of asking ("exprot", "explain")
        # outweighs the subject, the more so the smaller the help center.
        rarest = self._idf_of(1)
        idf = {term: min(self._idf(term), rarest) for term in wanted}
        whole = sum(idf.values())
        unit = self._idf_of(0)  # the weight of a term no document contains
        scores = np.zeros(len(self.documents))
        held = np.zeros(len(self.documents))  # the query's weight each document holds
        for term, weight in idf.items():
            posting = self._postings.get(term)
            if posting is not None:
                numbers, frequency = posting
                norm = frequency + K1 * (1 - B + B * self._lengths[numbers] / self._average_length)
                scores[numbers] += weight * frequency * (K1 + 1) / norm
                held[numbers] += weight
            titled = self._titled.get(term)
            if titled is not None:
                scores[titled] += TITLE_BONUS * weight
        found = np.flatnonzero(scores > 0)
        # Best first; among equals, the lower id (np.lexsort sorts by its last key first).
        best = found[np.lexsort((self._ids[found], -scores[found]))][:limit]
        # Divided as arrays and made floats at once: numpy's scalars, one at a
        # time, cost more than the ranking (up to 300 hits a question).
        chosen = scores[best]
        documents = self.documents
        return [
            Hit(documents[n], relevance, coverage, strength)
            for n, relevance, coverage, strength in zip(
                best.tolist(),
                (chosen / whole).tolist(),
                (held[best] / whole).tolist(),
                (chosen / unit).tolist(),
                strict=True,
            )
        ]

    def unknown(self, query: str) -> float:
        """The share of the query's weight in terms no document uses
        ("bitcoin" in "can I pay with bitcoin?"): what no article can answer."""
        wanted = set(terms(query))
        if not wanted or not self.documents:
            return 0.0
        rarest = self._idf_of(1)
        idf = {term: min(self._idf(term), rarest) for term in wanted}
        return sum(w for t, w in idf.items() if t not in self._postings) / sum(idf.values())

    def _idf(self, term: str) -> float:
        posting = self._postings.get(term)
        return self._idf_of(0 if posting is None else len(posting[0]))

    def _idf_of(self, containing: int) -> float:
        return math.log(1 + (len(self.documents) - containing + 0.5) / (containing + 0.5))


def snippet(query: str, markdown: str) -> str:
    """The paragraph of the text that matches the query best (the first of
    those with the most query terms), as plain text of at most SNIPPET_CHARS."""
    paragraphs = [p for p in (_plain(p) for p in re.split(r"\n\s*\n", markdown) if p.strip()) if p]
    if not paragraphs:
        return ""
    wanted = set(terms(query))
    best = max(enumerate(paragraphs), key=lambda item: (len(wanted & set(terms(item[1]))), -item[0]))[1]
    if len(best) <= SNIPPET_CHARS:
        return best
    return best[:SNIPPET_CHARS].rsplit(" ", 1)[0] + "…"


def normalised(query: str) -> str:
    """The query's terms, each once, sorted: what groups searches for the
    same thing in other words ("Can I pay with bitcoin?", "pay in bitcoins"),
    shown to Support as they are."""
    words = re.findall(r"[a-z0-9]+", folded(query))
    return " ".join(sorted({_plural_stem(w) for w in words if w not in STOPWORDS}))


def _plural_stem(word: str) -> str:
    """A light suffix strip, enough to match "invoices" with "invoice" and
    "boxes" with "box": for the terms people read (normalised), where
    Snowball's "dark mod" would puzzle them."""
    if len(word) <= 4 or word.endswith("ss"):
        return word
    if word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith(("sses", "xes", "ches", "shes", "zes")):
        return word[:-2]
    if word.endswith("s"):
        return word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def _plain(markdown: str) -> str:
    text = re.sub(r"```.*?```", " ", markdown, flags=re.DOTALL)
    text = re.sub(r"^\s*(#+|[-*]|\d+\.)\s+", "", text, flags=re.MULTILINE)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[*_`>#]", "", text)
    return " ".join(text.split())
