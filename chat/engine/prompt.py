"""What the model is told: the system prompt, with the help center's
overview, and the conversation so far."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf.locale import LANG_INFO

from helpcenter import search

SYSTEM_PROMPT = """You are Kookee's help-center assistant. Kookee is a product for collecting \
customer feedback: feedback boards, a public roadmap, a changelog and an embeddable widget.

Answer questions about Kookee from the help center: call search_help_center for any question \
about the product before answering, and base your answer only on the articles it returns, citing \
the ones you used as Markdown links. Use a low-confidence article only if it truly answers; else \
say plainly that the help center does not cover it, without guessing, and offer to put the visitor \
in touch with a person. Call request_human when the visitor asks for a person, or accepts that \
offer. Greetings and small talk need no search. Be brief and friendly.

Answer in the visitor's language: the language of their latest message (Portuguese to a visitor \
who writes in Portuguese). {languages}

The help center has these articles:
{overview}"""

IN_ENGLISH = "The articles are in English: search in English, whatever language the visitor writes in."
# An imported help center may hold several languages (helpcenter/importers/).
IN_SEVERAL = (
    "The articles are in {names}: search in the visitor's language when the help center has it, and pass it as "
    "`language` (such as pt-br), so that an article's version in it comes first."
)


def system_prompt() -> str:
    titles = search.titles()
    found = search.languages()
    languages = IN_ENGLISH
    if found - {"en"}:
        names = [LANG_INFO.get(code, {}).get("name", code) for code in sorted(found)]
        listed = f"{', '.join(names[:-1])} and {names[-1]}" if len(names) > 1 else names[0]
        languages = IN_SEVERAL.format(names=listed)
    return SYSTEM_PROMPT.format(languages=languages, overview="\n".join(f"- {title}" for title in titles))


def messages(system: str, earlier: Iterable[tuple[str, str]], question: str) -> list[dict[str, Any]]:
    """The first round's messages: the system prompt, the earlier turns
    (oldest first: question, then the answer if there was one), the question."""
    built: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for asked, answered in earlier:
        built.append({"role": "user", "content": asked})
        if answered:
            built.append({"role": "assistant", "content": answered})
    built.append({"role": "user", "content": question})
    return built
