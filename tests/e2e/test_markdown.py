"""static/chat/markdown.js in Chromium: the Markdown it renders, what model
text can never make of it (the security battery) and how it streams.

One page serves the whole module: every test is an evaluate call on it."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

A = 'target="_blank" rel="noopener noreferrer nofollow"'

ALLOWED_TAGS = {
    "p", "br", "h3", "h4", "h5", "h6", "strong", "em", "del", "code", "pre", "blockquote", "hr",
    "ul", "ol", "li", "table", "thead", "tbody", "tr", "th", "td", "div", "span", "a",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {"href", "target", "rel", "start", "class", "data-language"}
SAFE_PROTOCOLS = {"http:", "https:", "mailto:"}

# The module, and helpers that return plain data, on window.md.
SETUP = """async () => {
  const m = await import("/static/chat/markdown.js");
  const fresh = (text) => {
    const div = document.createElement("div");
    m.renderInto(div, text);
    return div;
  };
  // Every element: its tag, its attributes, and for links the protocol the
  // browser would follow.
  const inspect = (div) => [...div.querySelectorAll("*")].map((el) => ({
    tag: el.localName,
    attributes: Object.fromEntries([...el.attributes].map((a) => [a.name, a.value])),
    protocol: el.localName === "a" ? new URL(el.href).protocol : null,
  }));
  window.md = {
    html: (text) => fresh(text).innerHTML,
    inspect: (text) => {
      try {
        const div = fresh(text);
        return { html: div.innerHTML, text: div.textContent, elements: inspect(div), error: null };
      } catch (error) {
        return { error: String(error.stack || error) };
      }
    },
    // Renders text's prefixes into one container, `step` characters more
    // each time. Each node is stamped with the step that made it; reports
    // any step that rebuilt a block yet kept one after it, the final
    // markup, and that of a fresh render of the whole text.
    stream: (text, step) => {
      const div = document.createElement("div");
      const outOfOrder = [];
      let n = 0;
      for (let end = Math.min(step, text.length); ; end = Math.min(end + step, text.length)) {
        const before = [...div.children];
        m.renderInto(div, text.slice(0, end));
        const after = [...div.children];
        let kept = 0;
        while (kept < after.length && after[kept] === before[kept]) kept += 1;
        if (after.slice(kept).some((node) => before.includes(node))) outOfOrder.push(n);
        for (const node of after) if (node._born === undefined) node._born = n;
        n += 1;
        if (end === text.length) break;
      }
      return {
        html: div.innerHTML,
        fresh: fresh(text).innerHTML,
        born: [...div.children].map((node) => node._born),
        steps: n,
        outOfOrder,
      };
    },
  };
}"""


class Markdown:
    def __init__(self, page, origin: str) -> None:
        self.page = page
        self.origin = origin
        self.inspected: dict[str, dict] = {}

    def prime(self, texts: list[str]) -> None:
        """Renders the cases of the parametrized tests in one round trip."""
        self.inspected.update(zip(texts, self.page.evaluate("(texts) => texts.map(md.inspect)", texts), strict=True))

    def html(self, text: str) -> str:
        if text in self.inspected:
            return self.inspected[text]["html"]
        return self.page.evaluate("(text) => md.html(text)", text)

    def inspect(self, texts: list[str]) -> list[dict]:
        if all(text in self.inspected for text in texts):
            return [self.inspected[text] for text in texts]
        return self.page.evaluate("(texts) => texts.map(md.inspect)", texts)

    def stream(self, texts: list[str], step: int) -> list[dict]:
        return self.page.evaluate("([texts, step]) => texts.map((t) => md.stream(t, step))", [texts, step])

    def run(self, script: str, arg=None):
        return self.page.evaluate(script, arg)


@pytest.fixture(scope="module")
def md(browser, offline_app):
    # One page for the module; `page` is per test, and a page load per case
    # would make this file slow.
    context = browser.new_context()
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(error))
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    # A help article: its CSP allows scripts from 'self', so the module loads.
    page.goto(offline_app.url + "/help/cancel-subscription/")
    page.evaluate(SETUP)
    markdown = Markdown(page, offline_app.url)
    markdown.prime([case.values[0] for case in BLOCKS + INLINE] + NO_LINK + SAFE_IF_LINKED)
    yield markdown
    context.close()
    assert errors == []
    assert dialogs == []


def case(markdown: str, html: str, id: str):
    return pytest.param(markdown, html, id=id)


BLOCKS = [
    # Paragraphs and line breaks.
    case("Hello\nworld\n\nSecond one", "<p>Hello<br>world</p><p>Second one</p>", "soft-break"),
    case("two spaces  \nnext", "<p>two spaces<br>next</p>", "trailing-spaces"),
    case("backslash\\\nnext", "<p>backslash<br>next</p>", "backslash-break"),
    case("a\r\nb\r\n\r\n\r\n\r\nc", "<p>a<br>b</p><p>c</p>", "crlf-and-blank-lines"),
    case("  leading spaces\n   go", "<p>leading spaces<br>go</p>", "paragraph-indent"),
    # Headings: answers sit under the page's headings, so # is h3.
    case("# One", "<h3>One</h3>", "h1-is-h3"),
    case("## Two ##", "<h4>Two</h4>", "closing-hashes"),
    case("#### Four\n###### Six", "<h6>Four</h6><h6>Six</h6>", "deep-headings"),
    case("## C# tips", "<h4>C# tips</h4>", "hash-inside"),
    case("#hashtag", "<p>#hashtag</p>", "no-space-no-heading"),
    case("# **Bold** title", "<h3><strong>Bold</strong> title</h3>", "inline-in-heading"),
    case("Intro\n# Heading\ntext", "<p>Intro</p><h3>Heading</h3><p>text</p>", "heading-interrupts"),
    # Fenced code.
    case(
        "```python\nx = 1\n\ny = '**2**' # [a](b)\n```",
        "<pre><code data-language=\"python\">x = 1\n\ny = '**2**' # [a](b)</code></pre>",
        "fence-backticks",
    ),
    case("~~~\n```\nstill code\n~~~", "<pre><code>```\nstill code</code></pre>", "fence-tildes"),
    case("````\n```\nx\n````", "<pre><code>```\nx</code></pre>", "longer-fence"),
    case("```js\nstill streaming", '<pre><code data-language="js">still streaming</code></pre>', "unclosed-fence"),
    case("```", "<pre><code></code></pre>", "fence-alone"),
    case("``` js title=x.js\nx\n```", '<pre><code data-language="js">x</code></pre>', "info-first-word"),
    case("```c#\nx\n```", "<pre><code>x</code></pre>", "odd-language-dropped"),
    case("  ```\n  indented\n    more\n  ```", "<pre><code>indented\n  more</code></pre>", "indented-fence"),
    case(
        "```npm i``` works\n\nnext",
        "<p><code>npm i</code> works</p><p>next</p>",
        "backticks-in-info-is-no-fence",
    ),
    case("text\n```\ncode\n```", "<p>text</p><pre><code>code</code></pre>", "fence-interrupts"),
    # Indented code.
    case(
        "    indented\n    code\n\n\tmore\n\npara",
        "<pre><code>indented\ncode\n\nmore</code></pre><p>para</p>",
        "indented-code",
    ),
    case("para\n    not code", "<p>para<br>not code</p>", "indent-continues-paragraph"),
    # Quotes.
    case("> quote\n> more\nlazy", "<blockquote><p>quote<br>more<br>lazy</p></blockquote>", "quote-lazy"),
    case(
        "> # h\n>\n> - a\n> - b",
        "<blockquote><h3>h</h3><ul><li>a</li><li>b</li></ul></blockquote>",
        "quote-blocks",
    ),
    case("> a\n\n> b", "<blockquote><p>a</p></blockquote><blockquote><p>b</p></blockquote>", "two-quotes"),
    case("> a\n>> b", "<blockquote><p>a</p><blockquote><p>b</p></blockquote></blockquote>", "nested-quote"),
    # Rules; no setext headings.
    case("---\n***\n___\n- - -\n * * *", "<hr><hr><hr><hr><hr>", "rules"),
    case("text\n---", "<p>text</p><hr>", "rule-after-text"),
    # Lists.
    case("- a\n- b\n* c\n+ d", "<ul><li>a</li><li>b</li><li>c</li><li>d</li></ul>", "bullets"),
    case("1. one\n2. two", "<ol><li>one</li><li>two</li></ol>", "ordered"),
    case("3. x\n4. y", '<ol start="3"><li>x</li><li>y</li></ol>', "ordered-start"),
    case("1) a\n1) b", "<ol><li>a</li><li>b</li></ol>", "paren-marker"),
    case("0. zero", '<ol start="0"><li>zero</li></ol>', "start-zero"),
    case("- a\n1. b", "<ul><li>a</li></ul><ol><li>b</li></ol>", "kind-change-splits"),
    case(
        "- a\n  - b\n    - c\n- d",
        "<ul><li>a<ul><li>b<ul><li>c</li></ul></li></ul></li><li>d</li></ul>",
        "nested",
    ),
    case(
        "1. Step\n   - sub\n   - sub2\n2. Next",
        "<ol><li>Step<ul><li>sub</li><li>sub2</li></ul></li><li>Next</li></ol>",
        "nested-in-ordered",
    ),
    case(
        "1. Step\n  - sub\n2. Next",
        "<ol><li>Step<ul><li>sub</li></ul></li><li>Next</li></ol>",
        "two-space-sublist",
    ),
    case("- a\n - b\n  - c", "<ul><li>a</li><li>b</li><li>c</li></ul>", "one-space-is-sibling"),
    case(
        "1. a\n\n2. b\n\n\n3. c",
        "<ol><li><p>a</p></li><li><p>b</p></li><li><p>c</p></li></ol>",
        "loose-one-list",
    ),
    case("- a\n\n  more a\n- b", "<ul><li><p>a</p><p>more a</p></li><li><p>b</p></li></ul>", "loose-item"),
    case("- a\n- b\n\n", "<ul><li>a</li><li>b</li></ul>", "trailing-blank-stays-tight"),
    case(
        "- a\n  - b\n\n  - c\n- d",
        "<ul><li>a<ul><li><p>b</p></li><li><p>c</p></li></ul></li><li>d</li></ul>",
        "loose-sublist-tight-list",
    ),
    case(
        "- a\n  ```\n  x\n\n  y\n  ```\n- b",
        "<ul><li>a<pre><code>x\n\ny</code></pre></li><li>b</li></ul>",
        "blank-in-code-stays-tight",
    ),
    case("- a\nlazy\n- b", "<ul><li>a<br>lazy</li><li>b</li></ul>", "lazy-line"),
    case("1. a\n   more\n2. b", "<ol><li>a<br>more</li><li>b</li></ol>", "continuation"),
    case(" - a\n - b", "<ul><li>a</li><li>b</li></ul>", "indent-1"),
    case("  - a\n  - b", "<ul><li>a</li><li>b</li></ul>", "indent-2"),
    case("   1. a\n   2. b", "<ol><li>a</li><li>b</li></ol>", "indent-3"),
    case("    - a", "<pre><code>- a</code></pre>", "indent-4-is-code"),
    case("- a\n\nafter", "<ul><li>a</li></ul><p>after</p>", "paragraph-after-list"),
    case("Steps:\n1. a\n2. b", "<p>Steps:</p><ol><li>a</li><li>b</li></ol>", "list-interrupts"),
    case("Paid in\n2024. Then", "<p>Paid in<br>2024. Then</p>", "only-1-interrupts"),
    case("- a\n---\n- b", "<ul><li>a</li></ul><hr><ul><li>b</li></ul>", "rule-ends-list"),
    case("- ```\n  code\n  ```\n- b", "<ul><li><pre><code>code</code></pre></li><li>b</li></ul>", "code-item"),
    # Tables.
    case(
        "| a | b | c |\n|:--|:-:|--:|\n| 1 | 2 | 3 |",
        '<div class="table-scroll"><table><thead><tr><th>a</th><th class="align-center">b</th>'
        '<th class="align-right">c</th></tr></thead><tbody><tr><td>1</td><td class="align-center">2</td>'
        '<td class="align-right">3</td></tr></tbody></table></div>',
        "table-align",
    ),
    case(
        "a | b\n--|--\n1 | 2",
        '<div class="table-scroll"><table><thead><tr><th>a</th><th>b</th></tr></thead>'
        "<tbody><tr><td>1</td><td>2</td></tr></tbody></table></div>",
        "table-no-outer-pipes",
    ),
    case(
        "Compare:\n| a | b |\n|---|---|\n| 1 | 2 |",
        '<p>Compare:</p><div class="table-scroll"><table><thead><tr><th>a</th><th>b</th></tr></thead>'
        "<tbody><tr><td>1</td><td>2</td></tr></tbody></table></div>",
        "table-interrupts",
    ),
    case(
        "| a \\| b | `c` |\n|---|---|\n| **x** | [l](https://a.example/) |\n| 1 |\n| 1 | 2 | 3 |\nafter",
        '<div class="table-scroll"><table><thead><tr><th>a | b</th><th><code>c</code></th></tr></thead><tbody>'
        f'<tr><td><strong>x</strong></td><td><a href="https://a.example/" {A}>l</a></td></tr>'
        "<tr><td>1</td><td></td></tr><tr><td>1</td><td>2</td></tr></tbody></table></div><p>after</p>",
        "table-cells",
    ),
    case("a | b\n---", "<p>a | b</p><hr>", "divider-must-match"),
]


@pytest.mark.parametrize(("markdown", "html"), BLOCKS)
def test_blocks(md, markdown, html):
    assert md.html(markdown) == html


INLINE = [
    # Emphasis.
    case(
        "**b** __b__ *i* _i_ ~~d~~",
        "<strong>b</strong> <strong>b</strong> <em>i</em> <em>i</em> <del>d</del>",
        "all",
    ),
    case("snake_case_name and a_b_c", "snake_case_name and a_b_c", "snake-case"),
    case("2*3*4 = 24, a*b*c", "2*3*4 = 24, a*b*c", "intraword-star"),
    case("a * b * c", "a * b * c", "spaced-stars"),
    case("***both***", "<em><strong>both</strong></em>", "triple"),
    case("*a **b** c*", "<em>a <strong>b</strong> c</em>", "strong-in-em"),
    case("**a *b* c**", "<strong>a <em>b</em> c</strong>", "em-in-strong"),
    case("***a** b*", "<em><strong>a</strong> b</em>", "triple-split"),
    case("*a *b* c*", "<em>a <em>b</em> c</em>", "em-in-em"),
    case("**unclosed and *half", "**unclosed and *half", "unclosed"),
    case("**a*", "*<em>a</em>", "uneven"),
    case("**Note:**text", "<strong>Note:</strong>text", "punctuation-inside"),
    case("这是**粗体**文字", "这是<strong>粗体</strong>文字", "cjk"),
    case("~5 to ~10 minutes", "~5 to ~10 minutes", "single-tilde"),
    case("*a `*` b*", "<em>a <code>*</code> b</em>", "code-in-em"),
    case("*a\nb*", "<em>a<br>b</em>", "em-across-lines"),
    # Inline code.
    case("`**x**` and `<b>`", "<code>**x**</code> and <code>&lt;b&gt;</code>", "code-literal"),
    case(
        "`[x](https://a.example/)` `https://a.example/`",
        "<code>[x](https://a.example/)</code> <code>https://a.example/</code>",
        "code-no-links",
    ),
    case("``a ` b``", "<code>a ` b</code>", "double-backticks"),
    case("`a``b`", "<code>a``b</code>", "run-must-match"),
    case("``a`", "``a`", "unmatched-run"),
    case("` a `", "<code>a</code>", "code-padding"),
    case("`a\nb`", "<code>a b</code>", "code-newline"),
    # Escapes.
    case(
        "\\*not em\\* \\_no\\_ \\`no code\\` \\[no](link) \\\\ \\<b>",
        "*not em* _no_ `no code` [no](link) \\ &lt;b&gt;",
        "escapes",
    ),
    case("a\\b \\q", "a\\b \\q", "backslash-before-letter"),
    # Links.
    case('[x](https://e.example/a_(b) "T")', f'<a href="https://e.example/a_(b)" {A}>x</a>', "title-and-parens"),
    case("[x](https://e.example/ 'single')", f'<a href="https://e.example/" {A}>x</a>', "single-quoted-title"),
    case("[x](https://e.example/a\\)b)", f'<a href="https://e.example/a)b" {A}>x</a>', "escaped-paren"),
    case("[x](<https://e.example/a b>)", f'<a href="https://e.example/a%20b" {A}>x</a>', "angle-destination"),
    case(
        "[**bold** `code`](https://e.example/)",
        f'<a href="https://e.example/" {A}><strong>bold</strong> <code>code</code></a>',
        "formatted-label",
    ),
    case(
        "[https://e.example/](https://e.example/)",
        f'<a href="https://e.example/" {A}>https://e.example/</a>',
        "url-label-no-nested-link",
    ),
    case(
        "[[a](https://b.example/)](https://c.example/)",
        f'<a href="https://c.example/" {A}>[a](https://b.example/)</a>',
        "link-in-link",
    ),
    case("[a [b] c](https://e.example/)", f'<a href="https://e.example/" {A}>a [b] c</a>', "brackets-in-label"),
    case("[x](mailto:help@example.com)", f'<a href="mailto:help@example.com" {A}>x</a>', "mailto"),
    case("[x] (https://e.example/)", f'[x] (<a href="https://e.example/" {A}>https://e.example/</a>)', "space"),
    case("[x](unclosed", "[x](unclosed", "unclosed-link"),
    # Images are links to the image, never <img>.
    case("![diagram](https://e.example/d.png)", f'<a href="https://e.example/d.png" {A}>diagram</a>', "image"),
    case(
        "![](https://e.example/d.png)",
        f'<a href="https://e.example/d.png" {A}>https://e.example/d.png</a>',
        "image-no-alt",
    ),
    case(
        "[![badge](https://e.example/b.svg)](https://e.example/)",
        f'<a href="https://e.example/" {A}>badge</a>',
        "image-in-link",
    ),
    # Autolinks and bare URLs.
    case("<https://e.example/x>", f'<a href="https://e.example/x" {A}>https://e.example/x</a>', "autolink"),
    case("<mailto:a@b.example>", f'<a href="mailto:a@b.example" {A}>mailto:a@b.example</a>', "autolink-mailto"),
    case(
        "see https://e.example/a. and (https://e.example/b) or www.e.example!",
        f'see <a href="https://e.example/a" {A}>https://e.example/a</a>. and '
        f'(<a href="https://e.example/b" {A}>https://e.example/b</a>) or '
        f'<a href="https://www.e.example/" {A}>www.e.example</a>!',
        "bare-punctuation",
    ),
    case(
        "https://en.wikipedia.org/wiki/Foo_(bar), ok?",
        f'<a href="https://en.wikipedia.org/wiki/Foo_(bar)" {A}>https://en.wikipedia.org/wiki/Foo_(bar)</a>, ok?',
        "bare-parens",
    ),
    case(
        "Is it https://e.example/?q=1&b=2;",
        f'Is it <a href="https://e.example/?q=1&amp;b=2" {A}>https://e.example/?q=1&amp;b=2</a>;',
        "bare-query",
    ),
    case(
        "**https://e.example/**",
        f'<strong><a href="https://e.example/" {A}>https://e.example/</a></strong>',
        "bare-in-strong",
    ),
    case("xhttps://e.example/", "xhttps://e.example/", "bare-inside-word"),
]


@pytest.mark.parametrize(("markdown", "html"), INLINE)
def test_inline(md, markdown, html):
    assert md.html(markdown) == f"<p>{html}</p>"


def test_relative_links_resolve_to_the_help_center(md):
    # The model links articles by path, as the search tool gives them.
    assert md.html("[the article](/help/cancel-subscription/)") == (
        f'<p><a href="{md.origin}/help/cancel-subscription/" {A}>the article</a></p>'
    )


# --- security --------------------------------------------------------------------------------

RAW_HTML = [
    "<script>window.__xss = 1</script>",
    "<img src=x onerror=window.__xss=1>",
    '<img src="x" onerror="window.__xss=1"/>',
    "<iframe src=javascript:window.__xss=1></iframe>",
    "<svg onload=window.__xss=1>",
    "<svg><script>window.__xss=1</script></svg>",
    "<a href=javascript:window.__xss=1>x</a>",
    "<style>body{display:none}</style>",
    "<object data=javascript:window.__xss=1></object>",
    "<body onload=window.__xss=1>",
    "<details open ontoggle=window.__xss=1>",
    "<math><mtext><table><mglyph><style><img src=x onerror=window.__xss=1>",
    "<!-- comment --><b>bold</b><br>",
    "<div style=position:fixed>x</div>",
]

ENTITIES = "&lt;b&gt; &amp; &#60;script&#62; &#x3C;img&#x3E; &copy; &nbsp;"

NO_LINK = [
    "[x](javascript:window.__xss=1)",
    "[x](JavaScript:window.__xss=1)",
    "[x](JAVASCRIPT:window.__xss=1)",
    "[x]( javascript:window.__xss=1)",
    "[x](\tjavascript:window.__xss=1)",
    "[x](<javascript:window.__xss=1>)",
    "[x](javascript://%0Awindow.__xss=1)",
    "[x](data:text/html,<script>window.__xss=1</script>)",
    "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[x](vbscript:msgbox(1))",
    "[x](file:///etc/passwd)",
    "[x](blob:https://e.example/1)",
    "<javascript:window.__xss=1>",
    "<data:text/html,x>",
    "![x](javascript:window.__xss=1)",
    "![x](data:image/svg+xml,<svg onload=window.__xss=1>)",
    "[![x](https://e.example/i.png)](javascript:window.__xss=1)",
    "javascript:window.__xss=1",
]

# Not links to anything dangerous: at worst a path on this site.
SAFE_IF_LINKED = [
    "[x](java&#115;cript:window.__xss=1)",
    "[x](&#106;avascript:window.__xss=1)",
    "[x](javascript&colon;window.__xss=1)",
    "[x](%6Aavascript:window.__xss=1)",
    "[x](java\\script:window.__xss=1)",
    "[x](//evil.example/)",
    "[x](https:evil.example)",
    "[x](mailto:javascript:window.__xss=1)",
    '[x](https://e.example/" onmouseover="window.__xss=1)',
    '<https://e.example/"onmouseover="window.__xss=1>',
    'https://e.example/"onmouseover="window.__xss=1',
    '[x](https://e.example/ "title" onmouseover="window.__xss=1")',
    '[x](https://e.example/ "<img src=x onerror=window.__xss=1>")',
    "[<img src=x onerror=window.__xss=1>](https://e.example/)",
    '```"><img src=x onerror=window.__xss=1>\ncode\n```',
    "```js onload=window.__xss=1\ncode\n```",
    "| <script>window.__xss=1</script> |\n|---|\n| <img src=x onerror=window.__xss=1> |",
    "- <svg onload=window.__xss=1>\n> <iframe src=javascript:window.__xss=1>",
]


def check_safe(result: dict) -> None:
    """The invariants every rendering keeps, whatever the text."""
    assert result["error"] is None, result["error"]
    for element in result["elements"]:
        assert element["tag"] in ALLOWED_TAGS, element
        assert set(element["attributes"]) <= ALLOWED_ATTRIBUTES, element
        assert not any(name.startswith("on") for name in element["attributes"]), element
        if element["tag"] == "a":
            assert element["protocol"] in SAFE_PROTOCOLS, element
            assert element["attributes"]["target"] == "_blank", element
            assert element["attributes"]["rel"] == "noopener noreferrer nofollow", element
        if "start" in element["attributes"]:
            assert element["tag"] == "ol" and element["attributes"]["start"].isdigit(), element
        if "data-language" in element["attributes"]:
            assert re.fullmatch(r"[\w+-]{1,30}", element["attributes"]["data-language"]), element
        if "class" in element["attributes"]:
            assert element["attributes"]["class"] in {"table-scroll", "align-center", "align-right"}, element


def tags(result: dict) -> list[str]:
    return [element["tag"] for element in result["elements"]]


def test_raw_html_is_text(md):
    results = md.inspect(RAW_HTML)
    for markdown, result in zip(RAW_HTML, results, strict=True):
        check_safe(result)
        assert tags(result) == ["p"], markdown
        assert result["text"] == markdown
    assert results[0]["html"] == "<p>&lt;script&gt;window.__xss = 1&lt;/script&gt;</p>"
    assert results[1]["html"] == "<p>&lt;img src=x onerror=window.__xss=1&gt;</p>"


def test_entities_stay_literal(md):
    [result] = md.inspect([ENTITIES])
    assert result["text"] == ENTITIES
    assert result["html"] == (
        "<p>&amp;lt;b&amp;gt; &amp;amp; &amp;#60;script&amp;#62; &amp;#x3C;img&amp;#x3E; &amp;copy; &amp;nbsp;</p>"
    )


@pytest.mark.parametrize("markdown", NO_LINK)
def test_unsafe_urls_make_no_link(md, markdown):
    [result] = md.inspect([markdown])
    check_safe(result)
    assert "a" not in tags(result), result["html"]
    assert "__xss" not in str([e["attributes"] for e in result["elements"]])


def test_unsafe_link_keeps_its_text(md):
    assert md.html("[click me](javascript:window.__xss=1)") == "<p><span>click me</span></p>"
    assert md.html("![a cat](javascript:window.__xss=1)") == "<p><span>a cat</span></p>"


@pytest.mark.parametrize("markdown", SAFE_IF_LINKED)
def test_odd_urls_are_safe(md, markdown):
    [result] = md.inspect([markdown])
    check_safe(result)
    for element in result["elements"]:
        assert "__xss" not in element["attributes"].get("data-language", "")


def test_nothing_runs_in_the_document(md):
    """Rendered into the live document, so that a handler, a script or an
    image load would fire: none does."""
    ran = md.run(
        """async (texts) => {
          const m = await import("/static/chat/markdown.js");
          window.__xss = 0;
          const host = document.createElement("div");
          document.body.append(host);
          for (const text of texts) {
            const div = document.createElement("div");
            host.append(div);
            m.renderInto(div, text);
          }
          for (const a of host.querySelectorAll("a")) a.dispatchEvent(new MouseEvent("mouseover"));
          await new Promise((resolve) => setTimeout(resolve, 200));
          host.remove();
          return window.__xss;
        }""",
        [*RAW_HTML, *NO_LINK, *SAFE_IF_LINKED],
    )
    assert ran == 0


def test_deep_nesting_is_capped_not_a_stack_overflow(md):
    [deep, fine] = md.inspect([">" * 10_000 + " end", "> " * 5 + "five"])
    check_safe(deep)
    # 24 levels, then the rest as text.
    assert tags(deep).count("blockquote") == 24
    assert deep["text"] == ">" * (10_000 - 24) + " end"
    assert fine["html"] == "<blockquote>" * 5 + "<p>five</p>" + "</blockquote>" * 5


PATHOLOGICAL = {
    "quotes": "> " * 6000 + "a",
    "sub-lists": "- " * 5000 + "a",
    "emphasis openers": "*a " * 5000 + "a*",
    "strong openers": "**a " * 5000,
    "nested emphasis": "*a " * 3000 + "b" + " c*" * 3000,
    "one long run": "*" * 20_000 + "a",
    "underscores": "_a " * 5000 + "a_",
    "brackets": "[" * 3000 + "a" + "](u)" * 3000,
    "open brackets": "[a](" * 2000,
    "backticks": "`a `` " * 1500,
    "pipes": "|a" * 3000 + "\n" + "|-" * 3000,
}


def test_pathological_text_renders_quickly(md):
    """Model text is untrusted, and rendered again on every streamed frame:
    no input may make it slow (or throw)."""
    results = md.run(
        """(texts) => texts.map((text) => {
          const start = performance.now();
          try { md.html(text); } catch (error) { return String(error); }
          return performance.now() - start;
        })""",
        list(PATHOLOGICAL.values()),
    )
    for name, result in zip(PATHOLOGICAL, results, strict=True):
        assert isinstance(result, float | int), (name, result)
        assert result < 1500, (name, result)


# --- randomized ------------------------------------------------------------------------------

TOKENS = [
    "*", "**", "***", "_", "__", "~", "~~", "`", "``", "```", "~~~", "#", "# ", "## ", ">", "> ", "- ", "* ",
    "+ ", "1. ", "3) ", "|", "| ", "|---|", ":--", "--:", "---", "[", "]", "(", ")", "![", "](", "<", ">", "\\",
    "\n", "\n", "\n\n", "\r\n", "\t", "    ", "  ", " ", " ", "&", "&#60;", "&lt;", ";", ":", "\"", "'", "=",
    "javascript:", "JaVaScRiPt:", " javascript:", "data:text/html,", "vbscript:", "http://", "https://e.example/",
    "www.", "mailto:", "//", "<script>", "</script>", "<img src=x onerror=alert(1)>", " onerror=", "<svg onload=",
    "a", "b", "word", "x_y", "2", "文", "\u00a0",
]  # fmt: skip

# No link, code, table or fence syntax: every letter must come through, in
# order (only markers and delimiters go).
LETTER_TOKENS = [
    "*", "**", "***", "_", "__", "#", "# ", "### ", ">", "> ", "- ", "* ", "+ ", "1. ", "12) ", "---", "\\",
    "\n", "\n", "\n\n", "    ", "  ", " ", " ", ":", ".", "ab", "cd", "x", "yz", "2",
]  # fmt: skip


def random_texts(tokens: list[str], count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(tokens) for _ in range(rng.randint(1, 40))) for _ in range(count)]


def test_random_text_keeps_the_invariants(md):
    texts = random_texts(TOKENS, 300, seed=20240601)
    results = md.inspect(texts)
    for text, result in zip(texts, results, strict=True):
        try:
            check_safe(result)
            # Nothing is made up: every character shown is one of the text's
            # (a line break in a code span shows as a space).
            assert set(result["text"]) <= set(text) | {" "}
        except AssertionError as error:
            raise AssertionError(f"{text!r}: {error}") from None


def test_random_text_loses_no_letters(md):
    texts = random_texts(LETTER_TOKENS, 300, seed=7)
    for text, result in zip(texts, md.inspect(texts), strict=True):
        assert result["error"] is None, (text, result["error"])
        letters = re.sub(r"[^a-z]", "", text)
        assert re.sub(r"[^a-z]", "", result["text"]) == letters, (text, result["html"])


def test_random_text_streams_to_the_same_markup(md):
    texts = random_texts(TOKENS, 150, seed=99) + random_texts(LETTER_TOKENS, 150, seed=98)
    for text, result in zip(texts, md.stream(texts, 2), strict=True):
        assert result["html"] == result["fresh"], text
        assert result["outOfOrder"] == [], text


# --- streaming -------------------------------------------------------------------------------

ANSWER_BLOCKS = [
    "## Cancel your plan",
    "You can cancel at any time from **Settings → Billing**. See [the article](https://e.example/help/cancel) "
    "for the details,\nor https://e.example/faq.",
    "1. Open *Settings*.\n2. Choose **Billing**, then `Cancel plan`.\n   - Monthly plans stop at once.\n"
    "   - Yearly ones at renewal.\n\n   Your data stays for 30 days.\n3. Confirm.",
    "> Refunds follow the [refund policy](https://e.example/refunds).\n> Ask us if unsure.",
    "```bash\ncurl -X POST https://api.e.example/v1/cancel \\\n  -H 'Authorization: Bearer ***'\n\necho done\n```",
    "| Plan | Refund |\n|:-----|-------:|\n| Monthly | none |\n| Yearly | *pro rata* |",
    "---",
    "- tight\n- list",
    "Questions? Write to <mailto:help@e.example> or visit www.e.example.",
]
ANSWER = "\n\n".join(ANSWER_BLOCKS)


@pytest.mark.parametrize("step", [1, 3, 7])
def test_streaming_matches_a_fresh_render_and_keeps_finished_blocks(md, step):
    [result] = md.stream([ANSWER], step)
    # (a) The streamed DOM is the one the whole text renders to.
    assert result["html"] == result["fresh"]
    assert result["html"].startswith("<h4>Cancel your plan</h4><p>You can cancel")
    assert result["html"].count("<ol>") == 1 and "<table>" in result["html"]
    assert result["steps"] == -(-len(ANSWER) // step)
    # (b) Each renderInto kept the nodes of a prefix of the blocks and
    # rebuilt only the rest...
    assert result["outOfOrder"] == []
    # ...and a block, once the next one has begun, is never rebuilt: its
    # node is the one made by then.
    assert len(result["born"]) == len(ANSWER_BLOCKS)
    offset = 0
    for n, block in enumerate(ANSWER_BLOCKS[:-1]):
        offset += len(block) + 2
        next_begun = (offset + 1 + step - 1) // step - 1  # the step whose prefix has its first character
        assert result["born"][n] <= next_begun, (n, block)
    # The last block was still growing at the last step.
    assert result["born"][-1] == result["steps"] - 1


def test_a_finished_block_is_the_same_node(md):
    same = md.run(
        """async () => {
          const m = await import("/static/chat/markdown.js");
          const div = document.createElement("div");
          m.renderInto(div, "# Title\\n\\nFirst para\\n\\nSecond");
          const [heading, first] = div.children;
          heading._mark = first._mark = "kept";
          m.renderInto(div, "# Title\\n\\nFirst para\\n\\nSecond para, longer");
          m.renderInto(div, "# Title\\n\\nFirst para\\n\\nSecond para, longer\\n\\n- and a list");
          return [...div.children].map((node) => [node.localName, node._mark || null]);
        }"""
    )
    assert same == [["h3", "kept"], ["p", "kept"], ["p", None], ["ul", None]]


def test_streamed_list_turns_loose_only_when_an_item_follows_a_blank(md):
    html = md.run(
        """async () => {
          const m = await import("/static/chat/markdown.js");
          const div = document.createElement("div");
          const seen = [];
          for (const text of ["- a\\n- b", "- a\\n- b\\n", "- a\\n- b\\n\\n", "- a\\n- b\\n\\n- c"]) {
            m.renderInto(div, text);
            seen.push(div.innerHTML);
          }
          return seen;
        }"""
    )
    assert html == ["<ul><li>a</li><li>b</li></ul>"] * 3 + [
        "<ul><li><p>a</p></li><li><p>b</p></li><li><p>c</p></li></ul>"
    ]


def test_render_into_recovers_from_an_emptied_container_and_shrinking_text(md):
    html = md.run(
        """async () => {
          const m = await import("/static/chat/markdown.js");
          const div = document.createElement("div");
          const seen = [];
          m.renderInto(div, "a\\n\\nb");
          div.replaceChildren();
          m.renderInto(div, "a\\n\\nb");
          seen.push(div.innerHTML);
          m.renderInto(div, "");
          seen.push(div.innerHTML);
          m.renderInto(div, "a\\n\\nc");
          seen.push(div.innerHTML);
          return seen;
        }"""
    )
    assert html == ["<p>a</p><p>b</p>", "", "<p>a</p><p>c</p>"]


def test_an_article_page_has_an_anchor_on_each_section(browser, offline_app):
    # Search results link to sections (/help/SLUG/#anchor): the page's
    # headings carry the anchors the server named, and a link opens there.
    from helpcenter import passages

    fixture = Path(__file__).resolve().parents[2] / "helpcenter" / "fixtures" / "help_center.json"
    [body] = [a["fields"]["body"] for a in json.loads(fixture.read_text()) if a["fields"]["slug"] == "refund-policy"]
    anchors = passages.anchors(body)
    assert len(anchors) >= 3
    context = browser.new_context(viewport={"width": 800, "height": 400})
    page = context.new_page()
    try:
        page.goto(f"{offline_app.url}/help/refund-policy/#{anchors[-1]}")
        ids = page.eval_on_selector_all("#article-body :is(h1, h2, h3, h4, h5, h6)", "found => found.map(h => h.id)")
        assert ids == anchors
        top = page.evaluate(f"document.getElementById({json.dumps(anchors[-1])}).getBoundingClientRect().top")
        assert 0 <= top < 400, "the page opens at the linked section"
        assert page.evaluate("window.scrollY") > 0
    finally:
        context.close()


# An answer cut short mid-markup: the chat (markdown.js, mend) and the
# transcript (chat/text.py, mended) close it by the same rules.
CUT_SHORT = [
    "Some text **[Moderating posts: merging",
    "**[Moderating posts: merging duplicates](/help/moderating-posts/#merg",
    "see [the doc](/help/x",
    "a `code",
    "done ~~old",
    "```py\nx = 1",
    "Steps:\n- **Open",
    "5 * 3 and x ** y",
    "a **b** c `d` done",
    "ends with a link [Setup](https://x.example/a#b)",
    "**bold then `code **",
    "",
]


def test_an_answer_cut_short_is_mended_as_the_transcript_mends_it(md):
    from chat.text import mended

    from_js = md.run(
        "async (texts) => { const m = await import('/static/chat/markdown.js'); return texts.map(m.mend); }", CUT_SHORT
    )
    assert from_js == [mended(text) for text in CUT_SHORT]
    assert from_js[0] == "Some text **Moderating posts: merging**"
    assert md.html(from_js[1]) == "<p><strong>Moderating posts: merging duplicates</strong></p>"
