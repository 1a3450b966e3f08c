"""What the offline model quotes from a passage (chat/engine/excerpts.py):
the part that answers, with tables, steps and code whole."""

from chat.engine import excerpts
from chat.engine.excerpts import excerpt, terms

LIMITS = """| Plan | Requests per minute | Burst |
|------|---------------------|-------|
| Growth | 60 | 20 per second |
| Business | 300 | 50 per second |

Free and Starter plans don't include API access. Bulk endpoints such as `POST /v1/posts/batch` count as one request."""


def quote(text, question, heading="", how=None):
    return excerpt(text, terms(question), heading, excerpts.is_how(question) if how is None else how)


def test_a_table_under_a_heading_that_asks_is_quoted_whole_with_the_sentence_that_shares_words():
    quoted = quote(LIMITS, "What are the API rate limits?", "Limits per plan")
    assert quoted.text.splitlines()[:4] == LIMITS.splitlines()[:4]
    assert "Free and Starter plans don't include API access." in quoted.text
    assert "Bulk endpoints" not in quoted.text
    assert not quoted.steps


def test_a_portuguese_question_gets_the_table_too():
    asked = terms("qual o limite de requisições por minuto da API?") | terms("qual limit requests minute api")
    assert "| Growth | 60 | 20 per second |" in excerpt(LIMITS, asked, "Limits per plan").text


def test_a_long_table_keeps_its_header_and_the_rows_that_hold_the_question():
    rows = "\n".join(f"| Plan {n} | {n} boards |" for n in range(30))
    table = f"| Plan | Boards |\n|---|---|\n{rows}\n| Enterprise | unlimited boards, SAML |"
    quoted = quote(table, "Where do I get SAML?", "Plans")
    assert quoted.text.splitlines() == ["| Plan | Boards |", "|---|---|", "| Enterprise | unlimited boards, SAML |"]
    assert quoted.cut


STEPS = """Turn it on for your workspace.

1. Open **Settings → Widget**.
2. Copy the snippet:

```html
<script src="https://widget.example/w.js"></script>
```

3. Choose where it opens:
   - **Board**: the default board
   - **Roadmap**: the public roadmap
4. Click **Save**.

Changes show within a minute."""


def test_steps_are_quoted_whole_with_their_numbers_choices_and_the_code_between_them():
    quoted = quote(STEPS, "How do I install the widget?")
    assert quoted.steps
    assert quoted.text.startswith("1. Open **Settings → Widget**.")
    assert '<script src="https://widget.example/w.js"></script>' in quoted.text
    assert "   - **Roadmap**: the public roadmap" in quoted.text
    assert quoted.text.endswith("4. Click **Save**.")
    assert "Changes show" not in quoted.text


def test_a_step_written_over_several_lines_is_kept_whole():
    text = "1. If you downloaded a script, copy it to one of\n   the Scripts folders.\n2. Refresh them\n   in the menu."
    assert quote(text, "how do I install a script").text == text


def test_more_steps_than_the_limit_are_cut_and_said_so():
    text = "\n".join(f"{n}. Step {n}." for n in range(1, 20))
    quoted = quote(text, "How do I do it?")
    assert quoted.text.splitlines()[-1] == f"{excerpts.MAX_STEPS}. Step {excerpts.MAX_STEPS}."
    assert quoted.cut


def test_a_single_numbered_line_is_not_steps():
    quoted = quote("5. **Drawing the line**\n\nHold Shift and click to draw a straight line.", "how do I draw a line")
    assert not quoted.steps


def test_a_question_that_is_not_how_gets_the_sentence_that_answers_not_the_steps():
    text = (
        "1. Open **Billing details**.\n2. Enter your **VAT ID**.\n3. Click **Save**.\n\n"
        "EU businesses with a valid VAT ID are invoiced without VAT under the reverse charge."
    )
    quoted = quote(text, "We're a German business with a VAT ID. Why were we invoiced VAT?")
    assert quoted.text.startswith("EU businesses with a valid VAT ID")
    assert "1. Open" not in quoted.text


def test_a_sentence_ending_in_a_colon_brings_the_code_it_introduces():
    text = "The API returns **HTTP 429** with a `Retry-After` header:\n\n```\nHTTP/1.1 429\nRetry-After: 14\n```"
    quoted = quote(text, "keep getting 429 errors")
    assert quoted.text == text


def test_code_too_long_to_quote_is_left_for_the_link():
    code = "\n".join(f"line {n}" for n in range(excerpts.MAX_CODE_LINES + 5))
    text = f"Write the settings like this:\n\n```\n{code}\n```"
    quoted = quote(text, "what settings do I write")
    assert quoted.text == "Write the settings like this."
    assert quoted.cut


def test_sentences_are_chosen_by_the_question_words_with_the_one_that_follows():
    text = (
        "Kookee keeps a history of every post. "
        "*How to tell:* the canvas keeps its old size after cropping.\n\n"
        "*How to fix:* tick Delete cropped pixels in the tool options. "
        "Cropping is undoable."
    )
    quoted = quote(text, "I cropped my photo but the canvas stayed the old size")
    assert quoted.text == (
        "*How to tell:* the canvas keeps its old size after cropping.\n\n"
        "*How to fix:* tick Delete cropped pixels in the tool options."
    )


def test_portuguese_words_match_in_their_other_forms():
    text = (
        "O endpoint deve responder em 10 segundos. "
        "Os eventos que falham são reenviados até 5 vezes em 24 horas. "
        "A aba Entregas mostra cada tentativa."
    )
    quoted = quote("Sobre o painel.\n\n" + text, "meu servidor caiu, vocês reenviam os eventos?")
    assert quoted.text.startswith("Os eventos que falham são reenviados")


def test_typos_and_word_forms_still_match():
    assert excerpts.matches(terms("custmer recipts adress"), terms("customer receipts address")) == 3
    assert excerpts.matches(terms("hide monthly"), terms("hiding month")) == 2
    assert excerpts.matches(terms("export"), terms("import")) == 0


def test_a_table_for_layout_is_read_as_text():
    text = (
        "Use the Tool Options dialog.\n\n|  |  |\n| --- | --- |\n|  | Note |\n"
        "| To keep a dialog from closing, lock it to the dock. |  |"
    )
    quoted = quote(text, "how do I lock a dialog to the dock")
    assert "|" not in quoted.text
    assert "To keep a dialog from closing, lock it to the dock." in quoted.text


def test_abbreviations_and_section_numbers_do_not_end_a_sentence():
    text = "Send from your own domain (e.g. `updates@acme.com`) after adding DNS records. See 4.6. Mail settings."
    assert quote(text, "send from our own domain").text.startswith(
        "Send from your own domain (e.g. `updates@acme.com`) after adding DNS records."
    )


def test_nothing_shared_gives_the_sections_opening_never_a_heading():
    quoted = quote("### Details\n\nFirst sentence here. Second one. Third one.", "zebra")
    assert quoted.text == "First sentence here. Second one."
