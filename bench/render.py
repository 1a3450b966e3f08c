"""What streaming costs the browser: an answer rendered as it arrives.

Streams a long Markdown answer (about 9 KB: headings, paragraphs, nested
lists, code, tables) into static/chat/markdown.js in Debian's Chromium, 4 characters per
delta, as the chat does without its one-paint-per-frame batching (the worst
case), and compares:

- incremental: renderInto(), which rebuilds only the blocks that changed;
- naive: the whole answer re-rendered on every delta.

It also checks that, with renderInto(), the nodes of finished blocks are
never replaced (nothing above the last paragraph flickers or re-flows).

    .venv/bin/python bench/render.py
"""

from __future__ import annotations

import functools
import http.server
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

SECTION = """## Step {n}

Open **Settings → Widget** and copy the snippet for `workspace-{n}`. Paste it
before the closing body tag; see [the guide](/help/install-feedback-widget/).

1. First, check the *plan* you are on.
2. Then choose a board:
   - Feature requests
   - Bugs
3. Finally, save.

```js
Kookee.init({{ workspace: "acme-{n}", position: "right" }});
```

| plan | boards | price |
| --- | ---: | ---: |
| Free | 1 | $0 |
| Pro | {n} | $49 |

"""
ANSWER = "".join(SECTION.format(n=n) for n in range(20))

SCRIPT = """async ([text, step]) => {
  const m = await import('/chat/markdown.js');
  const time = (render) => {
    const box = document.createElement('div');
    document.body.append(box);
    const start = performance.now();
    for (let i = step; i < text.length + step; i += step) {
      render(box, text.slice(0, i));
      box.offsetHeight;  // force layout, as the visitor's screen would
    }
    const ms = performance.now() - start;
    box.remove();
    return ms;
  };
  const naive = time((box, t) => box.replaceChildren(m.renderBlocks(t)));
  let replaced = 0;
  const incremental = time((box, t) => {
    const before = (box._blocks || []).slice(0, -2).map((b) => b.node);
    m.renderInto(box, t);
    replaced += before.filter((node) => !node.isConnected).length;
  });
  return { naive, incremental, replaced, deltas: Math.ceil(text.length / step) };
}"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def main() -> None:
    handler = functools.partial(_Quiet, directory=str(ROOT / "static"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
            result = page.evaluate(SCRIPT, [ANSWER, 4])
            browser.close()
    finally:
        server.shutdown()
    deltas = result["deltas"]
    print(f"answer: {len(ANSWER)} characters in {deltas} deltas of 4")
    print(f"naive (whole answer each delta): {result['naive']:8.0f} ms  {result['naive'] / deltas:6.3f} ms/delta")
    print(
        f"renderInto (changed blocks):     {result['incremental']:8.0f} ms  "
        f"{result['incremental'] / deltas:6.3f} ms/delta"
    )
    print(f"ratio naive / incremental: {result['naive'] / result['incremental']:.1f}x")
    print(f"finished blocks replaced while streaming: {result['replaced']} (goal: 0)")


if __name__ == "__main__":
    main()
