// A help article's Markdown, rendered as the chat renders answers, with each
// section's heading given its anchor (helpcenter/passages.py names them), so
// that a link to /help/SLUG/#anchor opens at that section.
import { renderInto } from "./markdown.js";

const body = document.getElementById("article-body");
body.replaceChildren();
renderInto(body, JSON.parse(document.getElementById("article-markdown").textContent));

// The renderer sets an answer's headings under the chat's own ("#" is h3);
// an article's sections sit right under its title, the page's one h1:
// "##" is h2 again ("#" too), "###" h3, and so on.
for (const heading of body.querySelectorAll("h3, h4, h5, h6")) {
  const level = document.createElement(`h${Math.max(2, Number(heading.tagName[1]) - 2)}`);
  level.append(...heading.childNodes);
  heading.replaceWith(level);
}

const anchors = JSON.parse(document.getElementById("article-anchors").textContent);
body.querySelectorAll("h1, h2, h3, h4, h5, h6").forEach((heading, i) => {
  if (anchors[i]) heading.id = anchors[i];
});
if (location.hash) {
  document.getElementById(decodeURIComponent(location.hash.slice(1)))?.scrollIntoView();
}
