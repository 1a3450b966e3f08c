// A help article's Markdown, rendered as the chat renders answers.
import { renderInto } from "./markdown.js";

const body = document.getElementById("article-body");
body.replaceChildren();
renderInto(body, JSON.parse(document.getElementById("article-markdown").textContent));
