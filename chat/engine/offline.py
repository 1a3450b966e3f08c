"""The built-in offline model: a small, deterministic help-center assistant.
This is what it says: `respond` decides a round's Reply from the
conversation so far. chat/engine/offline_transport.py serves it in the Chat
Completions streaming wire format, so the app talks to it with the same
`openai` client code, SSE parsing and stream closing as to a real provider.

Greetings and "what can you do?" get a direct answer in one round; help
questions get a sentence of narration and a `search_help_center` call (two
in parallel for a two-part question), then an answer built from the
articles the search returned, citing them. When the search finds no good
match it says the help center does not cover it and offers a person; asked
for a person (or saying yes to that offer), it calls `request_human`. It
speaks Portuguese to a visitor who writes Portuguese, and searches the
English help center with the English words of a Portuguese question
(chat/engine/offline_glossary.py).
"""

from __future__ import annotations

import json
import re
from typing import Any

from chat.engine import excerpts
from chat.engine.offline_glossary import in_english
from chat.vocabulary import HANDOFF_TOOL, SEARCH_TOOL
from helpcenter import search
from helpcenter.search import Passage

GREETING = re.compile(
    r"^\s*(hi|hello|hey|hiya|howdy|yo|good (morning|afternoon|evening)|thanks?|thank you|ok|okay)\b"
    r"[\s!.,?]*\w{0,10}[\s!.?]*$",
    re.IGNORECASE,
)
PORTUGUESE_GREETING = re.compile(
    r"^\s*(oi+|ol[aá]|e a[ií]|opa|bom dia|boa tarde|boa noite|obrigad[oa]|valeu|tudo bem)\b"
    r"[\s!.,?]*(tudo bem|td bem|\w{0,10})[\s!.?]*$",
    re.IGNORECASE,
)
CAPABILITIES = re.compile(
    r"what (can|do) you do|who are you|what are you|how can you help|what can i ask"
    r"|o que (voc[eê]|vc) (faz|pode fazer)|quem [eé] (voc[eê]|vc)|como (voc[eê]|vc) pode ajudar",
    re.IGNORECASE,
)
# Asking for a person, in English or Portuguese (matched without accents):
# explicit words about a person, not any sentence that says "human" or "support".
PERSON = re.compile(
    r"\b(talk|speak|chat)\s+(to|with)\s+(a\s+|an\s+|some\s+|your\s+|a\s+real\s+|a\s+live\s+)?"
    r"(person|human|agent|someone|somebody|representative|support\s+team|people)\b"
    r"|\b(real|live)\s+(person|human|agent)\b|\bhuman\s+(agent|being|support)\b"
    r"|\b(connect|transfer)\s+me\s+to\b"
    r"|\bfalar\s+com\s+(um\s+|uma\s+|o\s+|a\s+)?(pessoa|humano|atendente|alguem|suporte|equipe)\b"
    r"|\batendimento\s+humano\b|\bum\s+atendente\b",
    re.IGNORECASE,
)
# Yes to the offer of a person: a reply of yes-words only, not a new question.
YES_WORDS = frozenset(
    "yes yeah yep sure ok okay please do it go ahead thanks thank you sim pode ser quero por favor claro "
    "obrigado obrigada".split()
)
# Words that English almost never uses, and Portuguese often does.
PORTUGUESE_WORDS = frozenset(
    "não nao você voce vocês como posso pode para uma meu minha meus está esta é são qual quero "
    "preciso onde quando porque isso fazer tem obrigado obrigada olá ola com que eu um do da dos das "
    "em sobre consigo tenho pagar".split()
)

GREETING_ANSWER = (
    "Hi! I'm Kookee's help-center assistant. Ask me anything about feedback boards, "
    "the roadmap, the changelog, the widget, billing or your account, and I'll find the answer."
)
CAPABILITIES_ANSWER = (
    "I answer questions about Kookee from its help center. For example:\n\n"
    "- installing the feedback widget on your site\n"
    "- setting up boards, the roadmap and the changelog\n"
    "- plans, invoices and billing\n"
    "- SSO, API keys, data export and privacy\n\n"
    "Ask away, and I'll search the help center and cite the articles I use. "
    "(I'm the built-in offline assistant: I answer with the help center's own words, "
    "without a language model.)"
)
NO_TOOLS_ANSWER = (
    "I can only answer from the help center, and I couldn't search it this time. "
    "Could you ask again, perhaps in other words?"
)
# A person is offered with this sentence; "yes" to it asks for one.
OFFER = {
    "en": "I can put you in touch with a person from our support team: just say so, or press “Talk to a person”.",
    "pt": "Posso chamar uma pessoa da nossa equipe de suporte: é só pedir, ou tocar em “Falar com uma pessoa”.",
}
IN_ENGLISH = " (em inglês)"
SAID = {
    "en": {
        "greeting": GREETING_ANSWER,
        "not_covered": "The help center doesn't cover that, as far as I can find.",
        "narration": "Let me search the help center for that.",
        "two_questions": "That's two questions; let me look both up in the help center.",
        "found": "Here's what the help center says:",
        "steps": "Here are the steps, from %s:",
        "more": "More in %s.",
        "elsewhere": "The closest passage I found is about “%s”, which is something else.",
        "handing_over": "Let me ask a person from our support team to help you.",
        "handed_over": (
            "Done: our support team has your request and can read this conversation. "
            "A person will get back to you; leave your email in the form below if you'd like a reply by email."
        ),
    },
    "pt": {
        "greeting": (
            "Olá! Sou o assistente da central de ajuda da Kookee. Pergunte o que quiser sobre quadros de feedback, "
            "roadmap, changelog, o widget, cobrança ou a sua conta, e eu encontro a resposta."
        ),
        "not_covered": "A central de ajuda não fala sobre isso, até onde consegui encontrar.",
        "narration": "Vou procurar isso na central de ajuda.",
        "two_questions": "São duas perguntas; vou procurar as duas na central de ajuda.",
        "found": f"Veja o que diz a central de ajuda{IN_ENGLISH}:",
        "steps": f"Estes são os passos, segundo %s{IN_ENGLISH}:",
        "more": f"Mais em %s{IN_ENGLISH}.",
        "elsewhere": "O trecho mais próximo que encontrei fala de “%s”, que é outra coisa.",
        "handing_over": "Vou pedir a uma pessoa da nossa equipe de suporte que ajude você.",
        "handed_over": (
            "Pronto: nossa equipe de suporte recebeu o seu pedido e pode ler esta conversa. "
            "Uma pessoa vai responder; deixe seu e-mail no formulário abaixo se quiser a resposta por e-mail."
        ),
    },
}


class Reply:
    """What the model says in one round: text, then maybe tool calls
    (searches for `queries`, a request for a person with `handoff`)."""

    def __init__(self, text: str, queries: list[str] | None = None, handoff: str | None = None) -> None:
        self.text = text
        self.queries = queries or []
        self.handoff = handoff


def respond(
    messages: list[dict[str, Any]],
    tools: list[str],
    tool_choice: Any,
    passages: dict[int, list[Passage]] | None = None,
) -> Reply:
    """Decides one round's reply from the conversation so far; `tools`:
    the names of the tools offered; `passages`: the help center's, by
    article id, to compose an answer from (else the results' snippets)."""
    last = messages[-1] if messages else {}
    question = _last_question(messages)
    said = SAID[_language(question)]
    if last.get("role") == "tool":
        return Reply(_answer_from_results(messages, said, question, passages or {}))
    can_hand_over = HANDOFF_TOOL in tools and tool_choice != "none"
    if can_hand_over and PERSON.search(search.folded(question)):
        return Reply(said["handing_over"], handoff=question)
    if can_hand_over and _yes(question) and _offered(messages):
        # The reason is what the help center could not answer, not "yes".
        return Reply(said["handing_over"], handoff=_last_question(messages[:-1]) or question)
    if GREETING.match(question):
        return Reply(GREETING_ANSWER)
    if PORTUGUESE_GREETING.match(question):
        return Reply(SAID["pt"]["greeting"])
    if CAPABILITIES.search(question):
        return Reply(CAPABILITIES_ANSWER)
    if tool_choice == "none" or SEARCH_TOOL not in tools:
        return Reply(NO_TOOLS_ANSWER)
    queries = [in_english(q) if _language(q) == "pt" else q for q in _split_question(question)]
    return Reply(said["two_questions"] if len(queries) > 1 else said["narration"], queries)


def _last_question(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return str(message.get("content") or "").strip()
    return ""


def _language(text: str) -> str:
    words = re.findall(r"\w+", text.lower())
    if PORTUGUESE_GREETING.match(text) or re.search(r"[ãõç]", text.lower()):
        return "pt"
    return "pt" if sum(word in PORTUGUESE_WORDS for word in words) >= 2 else "en"


def _yes(question: str) -> bool:
    words = re.findall(r"\w+", search.folded(question))
    return bool(words) and all(word in YES_WORDS for word in words)


def _offered(messages: list[dict[str, Any]]) -> bool:
    """Whether the answer before the visitor's latest message offered a person."""
    assistant = [m for m in messages[:-1] if m.get("role") == "assistant" and m.get("content")]
    return bool(assistant) and any(offer in str(assistant[-1]["content"]) for offer in OFFER.values())


def _split_question(question: str) -> list[str]:
    parts = [p.strip() for p in re.split(r"\?+", question) if len(p.split()) >= 3]
    return parts[:2] if len(parts) >= 2 else [question]


def _answer_from_results(
    messages: list[dict[str, Any]], said: dict[str, str], question: str, passages: dict[int, list[Passage]]
) -> str:
    results: list[dict[str, Any]] = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        results.insert(0, _parse(message.get("content")))
    if any(r.get("requested") for r in results):
        return said["handed_over"]
    language = "pt" if said is SAID["pt"] else "en"
    # The floor's verdict: the offline model cannot judge a low-confidence article.
    found = [r["articles"][0] for r in results if r.get("articles") and not r.get("no_good_match")]
    if not found:
        # No good match (or a failed search): say so rather than answer from
        # the closest article, say what that one is about, and offer a person.
        # Named by its section, not its article's title: a title named in an
        # answer makes the article one of its Sources (chat/sources.py).
        closest = next((r["articles"][0].get("section") for r in results if r.get("articles")), None)
        elsewhere = f" {said['elsewhere'] % closest}" if closest else ""
        return f"{said['not_covered']}{elsewhere} {OFFER[language]}"
    # The question's words, and for a Portuguese one the English words of its subject too.
    asked = excerpts.terms(question) | (excerpts.terms(in_english(question)) if language == "pt" else set())
    how = excerpts.is_how(question)
    return "\n\n".join(
        _compose(article, _passage_of(article, passages, asked, how), asked, how, _for(said, article))
        for article in found
    )


def _for(said: dict[str, str], article: dict[str, Any]) -> dict[str, str]:
    """What to say of an article: "(in English)" only when it is not in the
    visitor's language (an imported help center may have theirs)."""
    if said is SAID["pt"] and article.get("language") == "pt":
        return {key: text.replace(IN_ENGLISH, "") for key, text in said.items()}
    return said


# Another section of the article answers instead of the one the search
# found when it holds this many more of the question's words.
CLEARLY_MORE = 3


def _passage_of(
    article: dict[str, Any], passages: dict[int, list[Passage]], asked: set[str], how: bool
) -> Passage | None:
    """The passage the search ranked first (its result's #anchor; of a
    section in parts, the part its snippet is from), else the article's
    first. Another section of the article when it clearly holds more of the
    question, or has what the found one lacks: the steps a "how" asks for,
    or, when the search matched the article's opening (which introduces
    what its sections say), a table, holding as many of the question's words."""
    article_id = article.get("id")
    found = passages.get(article_id, []) if isinstance(article_id, int) else []
    anchor = str(article.get("url", "")).partition("#")[2]
    snippet = excerpts.terms(str(article.get("snippet", "")))
    same = [p for p in found if p.anchor == anchor] or found[:1]
    passage = max(same, key=lambda p: (excerpts.matches(snippet, excerpts.terms(p.text)), -p.number), default=None)
    if passage is None:
        return None
    held = {p.number: _held(p, asked) for p in found}
    others = [p for p in found if p.anchor != passage.anchor]
    best = max(others, key=lambda p: (held[p.number], -p.number), default=None)
    if best is not None and held[best.number] >= held[passage.number] + CLEARLY_MORE:
        return best
    kinds = (excerpts.STEPS,) if how else (excerpts.TABLE,)
    if excerpts.has_block(passage.text, kinds):
        return passage
    shaped = [p for p in others if excerpts.has_block(p.text, kinds)]
    best = max(shaped, key=lambda p: (held[p.number], -p.number), default=None)
    if best is None or not held[best.number]:
        return passage
    if how and (held[best.number] > held[passage.number] or not passage.anchor):
        return best
    if not passage.anchor and held[best.number] >= held[passage.number]:
        return best
    return passage


def _held(passage: Passage, asked: set[str]) -> int:
    return excerpts.matches(asked, excerpts.terms(f"{passage.heading}\n{passage.text}"))


def _compose(article: dict[str, Any], passage: Passage | None, asked: set[str], how: bool, said: dict[str, str]) -> str:
    """A short answer from the passage, linking its section (which the page
    lists as the answer's source): the part of it that answers
    (chat/engine/excerpts.py), its steps introduced as such."""
    # The section the answer comes from (it may be another than the search's: see _passage_of).
    section = passage.heading if passage else article.get("section")
    url = str(article["url"]).partition("#")[0] + (f"#{passage.anchor}" if passage and passage.anchor else "")
    link = f"[{article['title']}{f': {section}' if section else ''}]({url})"
    if passage is None:
        quoted = excerpts.excerpt(str(article.get("snippet", "")), asked)
    else:
        quoted = excerpts.excerpt(passage.text, asked, passage.heading or passage.title, how)
    if not quoted.text:
        return said["more"] % link
    if quoted.steps and not quoted.cut:
        return f"{said['steps'] % link}\n\n{quoted.text}"
    return f"{quoted.text}\n\n{said['more'] % link}"


def _parse(content: Any) -> dict[str, Any]:
    try:
        parsed = json.loads(content) if isinstance(content, str) else content
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}
