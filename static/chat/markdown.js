// Markdown for model answers, built as DOM nodes: never HTML strings.
//
// Model text is untrusted. Nothing here parses HTML or sets innerHTML, so a
// "<script>" or "<img onerror>" in an answer can only ever become text. Links
// are made only for http(s) and mailto URLs, and open in a new tab without
// access to this page.
//
// The subset is what assistants write: paragraphs, headings, lists (nested,
// ordered or not), fenced and indented code, quotes, rules, pipe tables;
// inline code, bold, italic, strikethrough, links and bare URLs. Images are
// shown as links: a model-chosen image URL would load from anywhere.

const SAFE_PROTOCOLS = new Set(["http:", "https:", "mailto:"]);

// A backtick fence's info string has no backticks, as in CommonMark: a line
// like "```npm i``` works" is text with a code span, not a fence that would
// swallow the rest of the answer.
const FENCE = /^( {0,3})(`{3,}(?=[^`]*$)|~{3,})(.*)$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])([ \t]+|$)(.*)$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const TABLE_DIVIDER = /^ {0,3}\|?[ \t]*:?-+:?[ \t]*(\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;
const BLANK = /^[ \t]*$/;

// --- blocks --------------------------------------------------------------------------------

// Splits text into top-level blocks, each {kind, lines, gap}. Splitting is
// stable as text streams in: appending text changes only the last block or
// two, so a renderer can keep the nodes of the blocks before them. A block's
// gap is whether a blank line separates it from the one before: that is what
// makes a list item loose.
export function splitBlocks(text) {
  const lines = text.replace(/\r\n?/g, "\n").split("\n");
  const blocks = [];
  let i = 0;
  let gap = false;
  while (i < lines.length) {
    const line = lines[i];
    if (BLANK.test(line)) {
      gap = blocks.length > 0;
      i += 1;
      continue;
    }
    const start = i;
    let kind;
    const fence = FENCE.exec(line);
    if (fence) {
      kind = "code";
      i += 1;
      const closing = closingFence(fence[2]);
      while (i < lines.length && !closing.test(lines[i])) i += 1;
      i = Math.min(i + 1, lines.length);
    } else if (HEADING.test(line)) {
      kind = "heading";
      i += 1;
    } else if (RULE.test(line)) {
      kind = "rule";
      i += 1;
    } else if (QUOTE.test(line)) {
      kind = "quote";
      while (i < lines.length && !BLANK.test(lines[i]) && (QUOTE.test(lines[i]) || !interrupts(lines, i))) i += 1;
    } else if (ITEM.test(line)) {
      kind = "list";
      i = listEnd(lines, i);
    } else if (/^( {4}|\t)/.test(line)) {
      kind = "indented";
      while (i < lines.length && (/^( {4}|\t)/.test(lines[i]) || (BLANK.test(lines[i]) && nextIsIndented(lines, i)))) {
        i += 1;
      }
    } else if (startsTable(lines, i)) {
      kind = "table";
      i += 2;
      while (i < lines.length && !BLANK.test(lines[i]) && lines[i].includes("|")) i += 1;
    } else {
      kind = "paragraph";
      i += 1;
      while (i < lines.length && !BLANK.test(lines[i]) && !interrupts(lines, i)) i += 1;
    }
    blocks.push({ kind, lines: lines.slice(start, i), gap });
    gap = false;
  }
  return blocks;
}

function closingFence(fence) {
  return new RegExp(`^ {0,3}${fence[0]}{${fence.length},}[ \\t]*$`);
}

// What may cut a paragraph short without a blank line. As in CommonMark, a
// list item does only if it has text and, when ordered, is numbered 1: a
// line that happens to begin "2024. " goes on the paragraph. So does a table,
// as on GitHub: "Compare:" directly above its header row is not a header.
function interrupts(lines, i) {
  const line = lines[i];
  if (RULE.test(line)) return true;
  const item = ITEM.exec(line);
  if (item) return !BLANK.test(item[4]) && (!ordered(item[2]) || parseInt(item[2], 10) === 1);
  return FENCE.test(line) || HEADING.test(line) || QUOTE.test(line) || startsTable(lines, i);
}

// A header row, then a divider with as many cells: "a | b" over "---" is a
// line of text over a rule, not a table.
function startsTable(lines, i) {
  const divider = lines[i + 1];
  return (
    lines[i].includes("|") &&
    divider !== undefined &&
    TABLE_DIVIDER.test(divider) &&
    cells(divider).length === cells(lines[i]).length
  );
}

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line);
}

function nextIsIndented(lines, i) {
  while (i < lines.length && BLANK.test(lines[i])) i += 1;
  return i < lines.length && /^( {4}|\t)/.test(lines[i]);
}

function ordered(marker) {
  return /\d/.test(marker);
}

// An item's parts. Its text starts at `column`; a line indented to `nest`
// or more is inside it. That is its text's column, as in CommonMark, or two
// spaces past its marker if less: "1. Steps" over "  - one" is a sub-list.
function itemOf(line) {
  if (RULE.test(line)) return null; // "* * *" is a rule, not an item
  const match = ITEM.exec(line);
  if (!match) return null;
  const [, indent, marker, space, content] = match;
  const column = indent.length + marker.length + Math.max(space.length, 1);
  return { marker, content, indent: indent.length, column, nest: Math.min(column, indent.length + 2), ordered: ordered(marker) };
}

// A list runs over its items, their indented (or lazy) continuation lines,
// and blank lines followed by more of the same list. Blank lines at the end
// of the text are not part of it: they would make it loose until the next
// line streamed in.
function listEnd(lines, i) {
  const first = itemOf(lines[i]);
  let nest = first.nest;
  i += 1;
  while (i < lines.length) {
    const line = lines[i];
    if (BLANK.test(line)) {
      let next = i;
      while (next < lines.length && BLANK.test(lines[next])) next += 1;
      if (next >= lines.length) return i;
      // Then an item of this list, or a line indented into the last item.
      const item = itemOf(lines[next]);
      if (item && item.indent < nest ? item.ordered !== first.ordered : !/^( {2,}|\t)/.test(lines[next])) return i;
      i = next;
      continue;
    }
    const item = itemOf(line);
    if (item && item.indent < nest) {
      if (item.ordered !== first.ordered) return i;
      nest = item.nest;
    } else if (!item && !/^[ \t]/.test(line) && startsBlock(line)) {
      return i;
    }
    i += 1;
  }
  return i;
}

// --- rendering -----------------------------------------------------------------------------

// Quotes, lists and emphasis nested deeper than this are shown as their
// source text: model text can nest them thousands deep, and each level is a
// recursive call that would overflow the stack.
const MAX_NESTING = 24;
let nesting = 0;

function nested(render) {
  nesting += 1;
  try {
    return render();
  } finally {
    nesting -= 1;
  }
}

export function renderBlock(block) {
  switch (block.kind) {
    case "code":
      return codeBlock(block.lines);
    case "indented":
      return pre(block.lines.map((l) => l.replace(/^( {4}|\t)/, "")).join("\n"), "");
    case "heading": {
      const [, hashes, content = ""] = HEADING.exec(block.lines[0]);
      // Answers sit inside the page's own headings: h1 becomes h3, and so on.
      const level = Math.min(hashes.length + 2, 6);
      return element(`h${level}`, ...inline(content));
    }
    case "rule":
      return document.createElement("hr");
    case "quote":
      if (nesting >= MAX_NESTING) return element("p", block.lines.join("\n"));
      return element("blockquote", nested(() => renderBlocks(block.lines.map((l) => (QUOTE.exec(l) || [l, l])[1]).join("\n"))));
    case "list":
      if (nesting >= MAX_NESTING) return element("p", block.lines.join("\n"));
      return nested(() => list(block.lines));
    case "table":
      return table(block.lines);
    default:
      return element("p", ...inline(block.lines.map((l) => l.trim()).join("\n")));
  }
}

export function renderBlocks(text) {
  const fragment = document.createDocumentFragment();
  for (const block of splitBlocks(text)) fragment.append(renderBlock(block));
  return fragment;
}

function element(tag, ...children) {
  const node = document.createElement(tag);
  node.append(...children);
  return node;
}

function pre(code, language) {
  const node = element("code", code);
  if (/^[\w+-]{1,30}$/.test(language)) node.dataset.language = language;
  return element("pre", node);
}

function codeBlock(lines) {
  const [, indent, fence, info] = FENCE.exec(lines[0]);
  const body = lines.slice(1);
  if (body.length && closingFence(fence).test(body[body.length - 1])) body.pop();
  // The fence's own indentation is not the code's.
  const outdent = new RegExp(`^ {0,${indent.length}}`);
  return pre(body.map((l) => l.replace(outdent, "")).join("\n"), info.trim().split(/\s/)[0]);
}

function list(lines) {
  const first = itemOf(lines[0]);
  const node = document.createElement(first.ordered ? "ol" : "ul");
  if (first.ordered && parseInt(first.marker, 10) !== 1) node.start = parseInt(first.marker, 10);
  const items = [];
  let item = null;
  for (const line of lines) {
    const match = itemOf(line);
    if (match && (!item || match.indent < item.nest)) {
      item = { lines: [match.content], column: match.column, nest: match.nest };
      items.push(item);
    } else {
      // Drop the item's indentation (a lazy line has less, or none).
      item.lines.push(line.replace(new RegExp(`^[ \\t]{0,${item.column}}`), ""));
    }
  }
  // Loose, as in CommonMark, if a blank line separates two items or two
  // blocks of one item. One inside a code block or a sub-list does not count.
  let loose = false;
  const contents = items.map((entry, n) => {
    const text = entry.lines.join("\n").replace(/\s+$/, "");
    if (n < items.length - 1 && BLANK.test(entry.lines[entry.lines.length - 1])) loose = true;
    const blocks = splitBlocks(text);
    if (blocks.some((block) => block.gap)) loose = true;
    return blocks;
  });
  for (const blocks of contents) {
    const li = document.createElement("li");
    // A tight item's text sits directly in the <li>, not in a paragraph.
    if (!loose && blocks.length && blocks[0].kind === "paragraph") {
      li.append(...inline(blocks[0].lines.map((l) => l.trim()).join("\n")));
      for (const block of blocks.slice(1)) li.append(renderBlock(block));
    } else {
      for (const block of blocks) li.append(renderBlock(block));
    }
    node.append(li);
  }
  return node;
}

function cells(line) {
  let row = line.trim();
  if (row.startsWith("|")) row = row.slice(1);
  if (row.endsWith("|") && !row.endsWith("\\|")) row = row.slice(0, -1);
  return row.split(/(?<!\\)\|/).map((cell) => cell.trim().replace(/\\\|/g, "|"));
}

function table(lines) {
  const head = cells(lines[0]);
  const align = cells(lines[1]).map((c) => (c.endsWith(":") ? (c.startsWith(":") ? "center" : "right") : ""));
  const row = (values, tag) =>
    element(
      "tr",
      ...head.map((_, n) => {
        const cell = element(tag, ...inline(values[n] || ""));
        if (align[n]) cell.className = `align-${align[n]}`;
        return cell;
      }),
    );
  const node = element("table", element("thead", row(head, "th")), element("tbody", ...lines.slice(2).map((l) => row(cells(l), "td"))));
  // Wide tables scroll inside the answer instead of widening the page.
  const wrapper = element("div", node);
  wrapper.className = "table-scroll";
  return wrapper;
}

// --- inline --------------------------------------------------------------------------------

const PUNCTUATION = /[!-/:-@[-`{-~]/;
// Letters and digits of any script: "_" inside a word is never emphasis.
const WORD = /[\p{L}\p{N}]/u;
// "*" inside a word opens no emphasis when the word is ASCII (2*3*4, a*b*c),
// but still does between CJK characters, which have no spaces between words.
const ASCII_WORD = /[A-Za-z0-9]/;

// Returns an array of nodes for one block's inline text. Within a link's
// text (inLabel) no other link is made, as an <a> inside an <a> is invalid:
// "[" and bare URLs stay text, and images show their alt text. (CommonMark
// would let an inner link win instead, at the cost of parsing each label
// over and over: "[[[[..." would take exponential time.)
export function inline(text, inLabel = false) {
  const out = [];
  // Per delimiter character, its runs in this text, found once.
  const delimiters = {};
  let plain = "";
  const flush = () => {
    if (plain) out.push(document.createTextNode(plain));
    plain = "";
  };
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    let found = null;
    if (c === "\\" && PUNCTUATION.test(text[i + 1] || "")) {
      plain += text[i + 1];
      i += 2;
      continue;
    }
    if (c === "\\" && text[i + 1] === "\n") {
      // CommonMark's hard line break; every line break is one here anyway.
      i += 1;
      continue;
    }
    if (c === "\n") {
      flush();
      out.push(document.createElement("br"));
      i += 1;
      continue;
    }
    if (c === "`") {
      found = codeSpan(text, i);
      if (!found) {
        // A run of backticks with no closing run is text, all of it: "``a`"
        // is not a backtick and a code span.
        const run = runAt(text, i);
        plain += run;
        i += run.length;
        continue;
      }
    } else if (c === "*" || c === "_" || c === "~") {
      const run = runAt(text, i);
      if (run.length > 3) {
        // No emphasis opens with more than three: skip to the last three,
        // rather than trying each position of "*****..." in turn.
        plain += run.slice(3);
        i += run.length - 3;
        continue;
      }
      delimiters[c] ??= delimiterRuns(text, c);
      found = emphasis(text, i, inLabel, delimiters[c]);
    } else if ((c === "[" && !inLabel) || (c === "!" && text[i + 1] === "[")) {
      found = link(text, i, inLabel);
    } else if (c === "<" && !inLabel) {
      found = autolink(text, i);
    } else if ((c === "h" || c === "w") && !inLabel && !/\w/.test(text[i - 1] || "")) {
      found = bareUrl(text, i);
    }
    if (found) {
      flush();
      out.push(found.node);
      i = found.end;
    } else {
      plain += c;
      i += 1;
    }
  }
  flush();
  return out;
}

// The run of text[i] repeated that starts at i.
function runAt(text, i) {
  let j = i;
  while (text[j] === text[i]) j += 1;
  return text.slice(i, j);
}

// Closed by the next run of exactly as many backticks.
function codeSpan(text, i) {
  const run = runAt(text, i);
  const close = codeSpanClose(text, i + run.length, run);
  if (close < 0) return null;
  let code = text.slice(i + run.length, close).replace(/\n/g, " ");
  if (/^ .*[^ ].* $/.test(code)) code = code.slice(1, -1);
  return { node: element("code", code), end: close + run.length };
}

function codeSpanClose(text, from, run) {
  let close = text.indexOf(run, from);
  while (close >= 0 && text[close + run.length] === "`") {
    close = text.indexOf(run, close + runAt(text, close).length);
  }
  return close;
}

// [text](url "title"), or ![alt](url), shown as a link to the image.
function link(text, i, inLabel) {
  const image = text[i] === "!";
  const open = image ? i + 1 : i;
  let depth = 0;
  let close = -1;
  for (let j = open; j < text.length; j += 1) {
    if (text[j] === "\\") j += 1;
    else if (text[j] === "[") depth += 1;
    else if (text[j] === "]" && --depth === 0) {
      close = j;
      break;
    }
  }
  if (close < 0 || text[close + 1] !== "(") return null;
  let parens = 0;
  let end = -1;
  for (let j = close + 2; j < text.length; j += 1) {
    if (text[j] === "\\") j += 1;
    else if (text[j] === "(") parens += 1;
    else if (text[j] === ")") {
      if (parens === 0) {
        end = j;
        break;
      }
      parens -= 1;
    }
  }
  if (end < 0) return null;
  // The URL, bare or in <>, then an optional title, which is not shown.
  const target = /^\s*(?:<([^<>\n]*)>|([^\s<>]*))(?:\s+(?:"[^"]*"|'[^']*'))?\s*$/.exec(text.slice(close + 2, end));
  if (!target) return null;
  // "\)" in a URL is ")": unescaped, else the URL parser reads "\" as "/".
  const url = (target[1] ?? target[2]).replace(/\\([!-/:-@[-`{-~])/g, "$1");
  const label = text.slice(open + 1, close);
  if (image) {
    const alt = label || url;
    return { node: inLabel ? document.createTextNode(alt) : anchor(url, [alt]), end: end + 1 };
  }
  return { node: anchor(url, nested(() => inline(label, true))), end: end + 1 };
}

function autolink(text, i) {
  const match = /^<((?:https?:\/\/|mailto:)[^\s<>]+)>/i.exec(text.slice(i));
  return match ? { node: anchor(match[1], [match[1]]), end: i + match[0].length } : null;
}

function bareUrl(text, i) {
  const match = /^(?:https?:\/\/|www\.)[^\s<]+/i.exec(text.slice(i));
  if (!match) return null;
  let url = match[0];
  // Sentence punctuation after a URL is not part of it; nor is a closing
  // parenthesis that has no opening one inside the URL.
  while (/[.,;:!?'"*_~]$/.test(url) || (url.endsWith(")") && count(url, "(") < count(url, ")"))) {
    url = url.slice(0, -1);
  }
  const href = url.startsWith("www.") ? `https://${url}` : url;
  return { node: anchor(href, [url]), end: i + url.length };
}

function count(text, char) {
  return text.split(char).length - 1;
}

// Emphasis by runs of delimiters, as in CommonMark but simpler. A run opens
// if text follows it and closes if text precedes it. "_" neither opens nor
// closes inside a word (snake_case), "*" does not open inside an ASCII one
// (2*3*4). Only "~~" strikes through: "~5 to ~10 minutes" is text.
function canOpen(text, i, length) {
  const before = text[i - 1] || " ";
  const after = text[i + length] || " ";
  if (/\s/.test(after)) return false;
  if (text[i] === "_") return !WORD.test(before);
  if (text[i] === "*") return !(ASCII_WORD.test(before) && ASCII_WORD.test(after));
  return length === 2;
}

function canClose(text, i, length) {
  const before = text[i - 1] || " ";
  const after = text[i + length] || " ";
  if (/\s/.test(before)) return false;
  if (text[i] === "_") return !WORD.test(after);
  return text[i] !== "~" || length === 2;
}

// The runs of `char` in text, in order, with whether each could open or
// close emphasis; escapes and code spans have none.
function delimiterRuns(text, char) {
  const runs = [];
  runs.lastClose = -1; // the index of the last run that can close
  let j = 0;
  while (j < text.length) {
    if (text[j] === "\\") {
      j += 2;
    } else if (text[j] === "`") {
      const run = runAt(text, j);
      const close = codeSpanClose(text, j + run.length, run);
      j = close < 0 ? j + run.length : close + run.length;
    } else if (text[j] === char) {
      const length = runAt(text, j).length;
      const close = canClose(text, j, length);
      if (close) runs.lastClose = runs.length;
      runs.push({ at: j, length, open: canOpen(text, j, length), close });
      j += length;
    } else {
      j += 1;
    }
  }
  return runs;
}

// The run that closes emphasis whose opening run ends at `from`, passing
// over pairs of runs nested inside. Scanning runs, not characters, and only
// from `from` on, keeps "*a *a *a ..." from being slow.
function closer(runs, from) {
  let low = 0;
  let high = runs.length;
  while (low < high) {
    const middle = (low + high) >> 1;
    if (runs[middle].at < from) low = middle + 1;
    else high = middle;
  }
  let inside = 0;
  for (let n = low; n <= runs.lastClose; n += 1) {
    if (runs[n].close) {
      if (inside === 0) return runs[n];
      inside -= 1;
    } else if (runs[n].open) {
      inside += 1;
    }
  }
  return null;
}

function emphasis(text, i, inLabel, runs) {
  const char = text[i];
  const length = runAt(text, i).length;
  if (length > 3 || nesting >= MAX_NESTING || !canOpen(text, i, length)) return null;
  const first = closer(runs, i + length);
  if (!first) return null;
  if (first.length >= length) {
    const end = first.at + length;
    return { node: emphasized(char, length, nested(() => inline(text.slice(i + length, first.at), inLabel))), end };
  }
  // "***a** b*": the first closing run pairs with the inner part of the
  // opening run, and the rest of it needs a closing run further on.
  const outer = length - first.length;
  const second = closer(runs, first.at + first.length);
  if (!second || second.length < outer) return null;
  const end = second.at + outer;
  return { node: emphasized(char, outer, nested(() => inline(text.slice(i + outer, second.at), inLabel))), end };
}

function emphasized(char, length, children) {
  if (char === "~") return element("del", ...children);
  if (length === 3) return element("em", element("strong", ...children));
  return element(length === 2 ? "strong" : "em", ...children);
}

// A link the visitor can follow safely, or its text alone when the URL is
// not one we allow (javascript:, data:, vbscript:, ...).
function anchor(href, children) {
  let url;
  try {
    url = new URL(href, document.baseURI);
  } catch {
    return element("span", ...children);
  }
  if (!SAFE_PROTOCOLS.has(url.protocol)) return element("span", ...children);
  const node = element("a", ...children);
  node.href = url.href;
  node.target = "_blank";
  node.rel = "noopener noreferrer nofollow";
  return node;
}

// --- streaming -----------------------------------------------------------------------------

// An answer still streaming, or cut short (a Stop, a limit, a failure), ends
// mid-markup: "**[Moderating posts: merging". Shown as it is meant: an open
// code fence closed, an unfinished link as its text, an open code span,
// strikethrough or bold closed. Only the last line is looked at: what came
// before it was complete. The transcript does the same (chat/text.py, mended).
const FENCE_LINE = /^ {0,3}(`{3,}|~{3,})/gm;
const OPEN_LINK = /!?\[([^[\]\n]*)(?:\]\([^()\s]*)?$/;

export function mend(text) {
  if ((text.match(FENCE_LINE) || []).length % 2) return `${text.replace(/\n+$/, "")}\n\`\`\``;
  const cut = text.lastIndexOf("\n");
  const head = cut >= 0 ? text.slice(0, cut + 1) : "";
  let last = text.slice(cut + 1).trimEnd().replace(OPEN_LINK, (_, label) => label);
  for (const marker of ["`", "~~", "**"]) if (unclosed(last, marker)) last += marker;
  return head + last;
}

function unclosed(line, marker) {
  if (marker !== "`") line = line.replace(/`[^`]*`/g, ""); // code spans hold no markup
  const count = line.split(marker).length - 1;
  if (count % 2 === 0) return false;
  const after = line.slice(line.lastIndexOf(marker) + marker.length);
  return after.length > 0 && !/\s/.test(after[0]);
}

// Renders text into container, reusing the nodes of blocks whose source has
// not changed since the last call: while an answer streams, only its last
// block is rebuilt, so nothing above it flickers or re-flows.
export function renderInto(container, text) {
  const blocks = splitBlocks(text);
  const previous = container._blocks || [];
  const kept = [];
  let n = 0;
  for (; n < blocks.length && n < previous.length; n += 1) {
    // Unchanged, and still there: other code may have emptied the container.
    if (key(blocks[n]) !== previous[n].key || previous[n].node.parentNode !== container) break;
    kept.push(previous[n]);
  }
  for (const stale of previous.slice(n)) stale.node.remove();
  for (const block of blocks.slice(n)) {
    const node = renderBlock(block);
    container.append(node);
    kept.push({ key: key(block), node });
  }
  container._blocks = kept;
}

function key(block) {
  return `${block.kind}\u0000${block.lines.join("\n")}`;
}
