// A help article's Markdown, rendered as the chat renders answers, with each
// section's heading given its anchor (helpcenter/passages.py names them), so
// that a link to /help/SLUG/#anchor opens at that section.
import { renderInto } from "./markdown.js";

const body = document.getElementById("article-body");
body.replaceChildren();
renderInto(body, JSON.parse(document.getElementById("article-markdown").textContent));

const anchors = JSON.parse(document.getElementById("article-anchors").textContent);
body.querySelectorAll("h1, h2, h3, h4, h5, h6").forEach((heading, i) => {
  if (anchors[i]) heading.id = anchors[i];
});
if (location.hash) {
  document.getElementById(decodeURIComponent(location.hash.slice(1)))?.scrollIntoView();
}
