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

const FENCE = /^ {0,3}(`{3,}|~{3,})(.*)$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])([ \t]+|$)(.*)$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const TABLE_DIVIDER = /^ {0,3}\|?[ \t]*:?-+:?[ \t]*(\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;
const BLANK = /^[ \t]*$/;

// --- blocks --------------------------------------------------------------------------------

// Splits text into top-level blocks, each {kind, lines}. Splitting is stable
// as text streams in: appending text changes only the last block or two, so
// a renderer can keep the nodes of the blocks before them.
export function splitBlocks(text) {
  const lines = text.replace(/\r\n?/g, "\n").split("\n");
  const blocks = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (BLANK.test(line)) {
      i += 1;
      continue;
    }
    const start = i;
    let kind;
    const fence = FENCE.exec(line);
    if (fence) {
      kind = "code";
      i += 1;
      const closing = new RegExp(`^ {0,3}${fence[1][0]}{${fence[1].length},}[ \\t]*$`);
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
      while (i < lines.length && !BLANK.test(lines[i]) && (QUOTE.test(lines[i]) || !startsBlock(lines[i]))) i += 1;
    } else if (ITEM.test(line)) {
      kind = "list";
      i = listEnd(lines, i);
    } else if (/^( {4}|\t)/.test(line)) {
      kind = "indented";
      while (i < lines.length && (/^( {4}|\t)/.test(lines[i]) || (BLANK.test(lines[i]) && nextIsIndented(lines, i)))) {
        i += 1;
      }
    } else if (line.includes("|") && i + 1 < lines.length && TABLE_DIVIDER.test(lines[i + 1]) && lines[i + 1].includes("-")) {
      kind = "table";
      i += 2;
      while (i < lines.length && !BLANK.test(lines[i]) && lines[i].includes("|")) i += 1;
    } else {
      kind = "paragraph";
      i += 1;
      while (i < lines.length && !BLANK.test(lines[i]) && !startsBlock(lines[i])) i += 1;
    }
    blocks.push({ kind, lines: lines.slice(start, i) });
  }
  return blocks;
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

// A list runs over its items, their indented (or lazy) continuation lines,
// and blank lines followed by more of the same list.
function listEnd(lines, i) {
  const [, indent, marker] = ITEM.exec(lines[i]);
  const base = indent.length;
  const isOrdered = ordered(marker);
  i += 1;
  while (i < lines.length) {
    const line = lines[i];
    if (BLANK.test(line)) {
      let next = i;
      while (next < lines.length && BLANK.test(lines[next])) next += 1;
      if (next >= lines.length) return next;
      const item = ITEM.exec(lines[next]);
      const sameList = item && item[1].length <= base && ordered(item[2]) === isOrdered;
      if (!sameList && !/^[ \t]{2,}/.test(lines[next])) return i;
      i = next;
      continue;
    }
    const item = ITEM.exec(line);
    if (item && item[1].length <= base && ordered(item[2]) !== isOrdered) return i;
    if (!item && !/^[ \t]/.test(line) && startsBlock(line)) return i;
    i += 1;
  }
  return i;
}

// --- rendering -----------------------------------------------------------------------------

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
      return element("blockquote", renderBlocks(block.lines.map((l) => (QUOTE.exec(l) || [l, l])[1]).join("\n")));
    case "list":
      return list(block.lines);
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
  const [, fence, info] = FENCE.exec(lines[0]);
  const closing = new RegExp(`^ {0,3}${fence[0]}{${fence.length},}[ \\t]*$`);
  const body = lines.slice(1);
  if (body.length && closing.test(body[body.length - 1])) body.pop();
  return pre(body.join("\n"), info.trim().split(/\s/)[0]);
}

function list(lines) {
  const first = ITEM.exec(lines[0]);
  const node = document.createElement(ordered(first[2]) ? "ol" : "ul");
  if (ordered(first[2]) && parseInt(first[2], 10) !== 1) node.start = parseInt(first[2], 10);
  const base = first[1].length;
  let item = null;
  let loose = false;
  for (const line of lines) {
    const match = ITEM.exec(line);
    if (match && match[1].length <= base) {
      item = { lines: [match[4]], indent: base + match[2].length + Math.max(match[3].length, 1) };
      node.append(Object.assign(document.createElement("li"), { _item: item }));
    } else {
      if (BLANK.test(line)) loose = true;
      item.lines.push(line.replace(new RegExp(`^[ \\t]{0,${item.indent}}`), ""));
    }
  }
  for (const li of node.children) {
    const text = li._item.lines.join("\n").replace(/\n+$/, "");
    const blocks = splitBlocks(text);
    // A tight item's text sits directly in the <li>, not in a paragraph.
    if (!loose && blocks.length && blocks[0].kind === "paragraph") {
      li.append(...inline(blocks[0].lines.map((l) => l.trim()).join("\n")));
      for (const block of blocks.slice(1)) li.append(renderBlock(block));
    } else {
      for (const block of blocks) li.append(renderBlock(block));
    }
    delete li._item;
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

// Returns an array of nodes for one block's inline text.
export function inline(text) {
  const out = [];
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
    if (c === "\n") {
      flush();
      out.push(document.createElement("br"));
      i += 1;
      continue;
    }
    if (c === "`") found = codeSpan(text, i);
    else if (c === "[" || (c === "!" && text[i + 1] === "[")) found = link(text, i);
    else if (c === "<") found = autolink(text, i);
    else if (c === "*" || c === "_" || c === "~") found = emphasis(text, i);
    else if ((c === "h" || c === "w") && !/\w/.test(text[i - 1] || "")) found = bareUrl(text, i);
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

function codeSpan(text, i) {
  const run = /^`+/.exec(text.slice(i))[0];
  const close = text.indexOf(run, i + run.length);
  if (close < 0) return null;
  let code = text.slice(i + run.length, close).replace(/\n/g, " ");
  if (/^ .*[^ ].* $/.test(code)) code = code.slice(1, -1);
  return { node: element("code", code), end: close + run.length };
}

// [text](url "title"), or ![alt](url), shown as a link to the image.
function link(text, i) {
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
  const target = /^\s*<?([^\s>]*)>?(?:\s+(?:"[^"]*"|'[^']*'))?\s*$/.exec(text.slice(close + 2, end));
  if (!target) return null;
  const label = text.slice(open + 1, close);
  const children = image ? [label || target[1]] : inline(label);
  return { node: anchor(target[1], children), end: end + 1 };
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

const DELIMITERS = [
  ["**", "strong"],
  ["__", "strong"],
  ["~~", "del"],
  ["*", "em"],
  ["_", "em"],
];

function emphasis(text, i) {
  for (const [delimiter, tag] of DELIMITERS) {
    if (!text.startsWith(delimiter, i)) continue;
    const inner = i + delimiter.length;
    // Opening: followed by a non-space; "_" also not inside a word (snake_case).
    if (/\s/.test(text[inner] || " ")) continue;
    if (delimiter[0] === "_" && /\w/.test(text[i - 1] || "")) continue;
    let close = text.indexOf(delimiter, inner + 1);
    while (close >= 0) {
      const closes =
        !/\s/.test(text[close - 1]) &&
        !(delimiter[0] === "_" && /\w/.test(text[close + delimiter.length] || "")) &&
        // "*a **b** c*": the "**" is not the closing "*".
        !(delimiter.length === 1 && text[close + 1] === delimiter);
      if (closes) break;
      close = text.indexOf(delimiter, close + (delimiter.length === 1 && text[close + 1] === delimiter ? 2 : 1));
    }
    if (close < 0) continue;
    return { node: element(tag, ...inline(text.slice(inner, close))), end: close + delimiter.length };
  }
  return null;
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

// Renders text into container, reusing the nodes of blocks whose source has
// not changed since the last call: while an answer streams, only its last
// block is rebuilt, so nothing above it flickers or re-flows.
export function renderInto(container, text) {
  const blocks = splitBlocks(text);
  const previous = container._blocks || [];
  const kept = [];
  let n = 0;
  for (; n < blocks.length && n < previous.length; n += 1) {
    if (key(blocks[n]) !== previous[n].key) break;
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
