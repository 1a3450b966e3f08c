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
