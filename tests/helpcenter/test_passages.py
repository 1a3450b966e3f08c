"""Articles cut into passages at their headings (helpcenter/passages.py)."""

from helpcenter import passages

BODY = """Opening words about the widget.

## Install it

Paste the script tag.

## Install it

Again, under the same heading.

```
## not a heading, code
```

### Colours & fonts!

Pick a colour.
"""


def test_an_article_splits_at_its_headings_with_unique_anchors():
    found = passages.split(7, "The widget", BODY)
    assert [(p.anchor, p.heading) for p in found] == [
        ("", ""),
        ("install-it", "Install it"),
        ("install-it-1", "Install it"),
        ("colours-fonts", "Colours & fonts!"),
    ]
    assert [p.number for p in found] == [0, 1, 2, 3]
    assert all(p.article_id == 7 for p in found)
    # A heading in fenced code stays in its section's text.
    assert "## not a heading, code" in found[2].text
    assert passages.anchors(BODY) == ["install-it", "install-it-1", "colours-fonts"]


def test_a_passage_carries_its_title_and_heading():
    passage = passages.split(1, "Refund policy", "## Annual plans\n\nProrated within 30 days.")[0]
    assert passage.embedded == "Refund policy\nAnnual plans\nProrated within 30 days."
    assert passage.digest == passages.digest(passage.embedded)
    # The same text in another article under the same title is the same vector.
    assert passage.digest == passages.split(2, "Refund policy", "## Annual plans\n\nProrated within 30 days.")[0].digest


def test_a_long_section_is_cut_between_paragraphs():
    paragraph = " ".join(["word"] * 100)
    body = "## Long\n\n" + "\n\n".join([paragraph] * 6)
    found = passages.split(1, "T", body)
    assert len(found) == 3
    assert all(len(p.text.split()) <= passages.MAX_WORDS for p in found)
    assert {p.anchor for p in found} == {"long"}
    assert " ".join(p.text for p in found).split() == body.split()[2:]


def test_anchors_read_like_the_heading():
    assert passages.anchor_of("Cancelar a assinatura: o que acontece?") == "cancelar-a-assinatura-o-que-acontece"
    assert passages.anchor_of("SAML (SSO) with Okta") == "saml-sso-with-okta"
    assert passages.anchor_of("!!!") == "section"


def test_an_article_without_headings_is_one_passage():
    assert [(p.anchor, p.text) for p in passages.split(1, "T", "Just text.")] == [("", "Just text.")]
    assert passages.anchors("Just text.") == []


def words(passage: passages.Passage) -> int:
    return len(passage.text.split())


def test_a_long_list_is_cut_between_its_items():
    items = "\n".join(f"- item {n}: a few words about it\n  and a line under it" for n in range(80))
    found = passages.split(1, "T", f"## Files\n\nThe package installs:\n\n{items}\n\nThat is all.")

    assert len(found) > 2 and all(words(p) <= passages.MAX_WORDS for p in found)
    lines = [line for p in found for line in p.text.split("\n") if line]
    assert all(line.startswith(("- item", "  and", "The package", "That is")) for line in lines)
    assert [line for p in found for line in p.text.split("\n") if line.startswith("- item")] == [
        f"- item {n}: a few words about it" for n in range(80)
    ]
    assert {p.anchor for p in found} == {"files"} and [p.number for p in found] == list(range(len(found)))


def test_a_long_code_block_is_cut_between_its_lines_each_part_a_fenced_block():
    code = "\n".join(f"/usr/share/doc/pkg/file-{n}.txt installed by the package" for n in range(200))
    found = passages.split(1, "T", f"## Listing\n\n```text\n{code}\n```\n\nAfter the listing.")

    assert len(found) > 2 and all(words(p) <= passages.MAX_WORDS for p in found)
    fenced = [p.text for p in found if "```" in p.text]
    assert all(text.startswith("```text\n") and text.count("\n```") == 1 for text in fenced)  # opened and closed
    lines = [line for text in fenced for line in text.split("\n") if line.startswith("/usr/")]
    assert lines == code.split("\n")


def test_a_code_block_with_blank_lines_stays_whole_when_it_fits():
    prose = " ".join(["word"] * 230)
    code = "def a():\n    return 1\n\n\ndef b():\n    return 2 + 3 + 4 + 5 + 6 + 7 + 8 + 9\n"
    found = passages.split(1, "T", f"## Code\n\n{prose}\n\n```python\n{code}```\n")

    assert [p.text.count("```") for p in found] == [0, 2]
    assert found[1].text == f"```python\n{code}```"


def test_a_long_table_is_cut_between_its_rows_each_part_under_its_header():
    rows = "\n".join(f"| setting {n} | what setting number {n} does |" for n in range(120))
    found = passages.split(1, "T", f"## Settings\n\n| Name | Meaning |\n| --- | --- |\n{rows}")

    assert len(found) > 2 and all(words(p) <= passages.MAX_WORDS for p in found)
    assert all(p.text.startswith("| Name | Meaning |\n| --- | --- |\n| setting ") for p in found)


def test_a_long_paragraph_is_cut_at_its_sentences_and_a_sentence_at_its_words():
    sentences = " ".join(f"Sentence {n} has exactly eight words in it." for n in range(100))
    endless = " ".join(["word"] * 600)
    found = passages.split(1, "T", f"{sentences}\n\n{endless}")

    assert all(words(p) <= passages.MAX_WORDS for p in found)
    assert all(p.text.endswith(".") for p in found if "Sentence" in p.text)
    assert " ".join(p.text for p in found).split() == f"{sentences} {endless}".split()
