// The chat, on the chat page and in the widget's frame: one WebSocket, the
// frames of docs/turns.md, plus {"type": "history"} to learn what the
// server stored (on every connect: after a drop, the truth about an answer
// that was in flight comes from there, not from what this page guessed),
// and {"type": "forget"} to start over.
//
// A conversation may be open in several tabs: each shows the running turn
// live, whichever tab asked, and a tab that connects while it runs (a
// reload, a second tab, a reconnect) is resumed from the text so far
// (turn.resume), then follows its numbered frames (seq).
import { mend, renderInto } from "./markdown.js";

// The visitor's language: Django's catalog for this page (/jsi18n/), loaded
// before this module; English if it could not be.
const gettext = globalThis.gettext ?? ((text) => text);

const root = document.getElementById("chat");
const log = document.getElementById("log");
// What an empty conversation shows (the team's greeting, or a hint), and
// the team's starter questions under it: server-rendered in the visitor's
// language (templates/chat/_chat.html), on screen until the first turn or
// message, and back for a new conversation. Not a turn: never sent, never stored.
const empty = document.getElementById("empty");
const starters = [...empty.querySelectorAll(".chat__starter")];
const earlier = document.getElementById("earlier");
const input = document.getElementById("text");
const button = document.getElementById("send");
const restartButton = document.getElementById("restart");
const confirmRestart = document.getElementById("confirm-restart");
const connection = document.getElementById("connection");
const personButton = document.getElementById("person");
const askPerson = document.getElementById("ask-person");
const askPersonForm = document.getElementById("ask-person-form");
const askPersonError = document.getElementById("ask-person-error");
const handoffNotice = document.getElementById("handoff-notice");
const handoffText = document.getElementById("handoff-text");
const handoffEmail = document.getElementById("handoff-email");
const embedded = root.dataset.embedded === "true";

const TOOL_LABELS = {
  search_help_center: gettext("Searching the help center…"),
  request_human: gettext("Asking for a person…"),
};
const ENDINGS = {
  interrupted: gettext("Interrupted."), // no reason known: a turn saved before reasons were
  dropped: gettext("Interrupted: the connection dropped while this answer was being written."),
  truncated: gettext("Cut off: the answer reached its length limit."),
  failed: gettext("Something went wrong with this answer."),
};
// Why an interrupted answer stopped (the `reason` of turn.ended and history).
const STOP_REASONS = {
  stopped: gettext("Stopped."), // a Stop, from this tab or another of the visitor's
  left: gettext("This answer stopped when the page was closed."),
  shutdown: gettext("The server restarted while this answer was being written."),
  process_lost: gettext("The connection to the server was lost while this answer was being written."),
};
const SAID_EVEN_IF_DROPPED = new Set(["stopped", "shutdown"]);
// The errors a `feedback` frame can get (they carry its turn_id, as a failed
// turn's error does: told apart by code).
const RATING_ERRORS = new Set(["not_found", "bad_feedback"]);
// The errors a `handoff` frame can get.
const HANDOFF_ERRORS = new Set(["bad_handoff", "handoff_rate_limited"]);
const COMMENT_CHARS = 1000;
const ASK_PLACEHOLDER = input.placeholder;
const interpolate = globalThis.interpolate ?? ((format, args) => args.reduce((text, arg) => text.replace("%s", arg), format));
const timeFormat = new Intl.DateTimeFormat(document.documentElement.lang || undefined, { hour: "numeric", minute: "2-digit" });
const STILL_WRITING = gettext("This answer was still being written when we last heard from the server. Checking again…");
const MAX_BACKOFF_MS = 10000;
const TOO_MANY_BACKOFF_MS = [30000, 300000]; // first and longest wait after a 4429
const BUSY_BACKOFF_MS = [2000, 30000]; // first and longest wait after a 4503
const WAKE_GAP_MS = 3000; // at most one reconnection on activity this often
const STILL_STREAMING_RECHECK_MS = 2000;
const TOO_MANY = gettext("Too many chat windows are open. Close one, or come back to this one later.");
// A card that asks the visitor's yes before an action changes something
// (action.confirm): how its question ended.
const CARD_STATES = {
  confirmed: gettext("Confirmed"),
  cancelled: gettext("Cancelled"),
  over: gettext("No answer: nothing was done."),
  late: gettext("Too late: this question had already ended."),
};

// Close codes the server sends after accepting the socket (chat/engine/consumers.py).
// Anything else (1006: server down, a proxy's 502, no network) means "try again".
const REFUSED = 4401; // this visitor's key is no good (expired, revoked, or they started over)
const IDLE = 4408; // closed for idleness: come back when the visitor does
const CROWDED = 4429; // too many sockets for this visitor or network
const FLOOD = 4008; // too many frames (daphne cannot send 1008, "policy violation", which means the same)
const BUSY = 4503; // the server is saturated: try again shortly (behind a balancer, maybe another process)

let socket = null;
let ready = false; // the socket is open and has answered its first history: frames can go
let dormant = false; // closed by the server for now: the visitor's next move reconnects
let attempts = 0; // connection attempts in a row that did not get ready
let lastAttempt = 0; // when the last one started (ms)
let reconnectTimer = null;
let outbox = []; // frames sent while dormant: they go once the socket is ready
let notice = ""; // said once the socket is ready
let restarting = false; // the visitor asked to start over
let current = null; // the answer streaming now, shown live
let pending = null; // {text, sent, dropped}: asked, neither started (turn.started) nor refused yet
let recheck = null; // timer: a dropped answer the server had not closed yet
let held = []; // turn frames that came before this socket's first history: applied after it
let looked = false; // this socket's history has answered once already
let loadingEarlier = false;
let handoff = null; // the conversation's request for a person, waiting: {handoff_id, status, email}
let lastAnswered = null; // the card this socket last answered: a not_found error is about it
const views = new Map(); // turn id -> the turn on screen
const messages = new Map(); // Support's replies and the visitor's messages to them: id -> element

// --- the widget's visitor ------------------------------------------------------------------
// The frame is third-party on the customer's site, where its cookies and
// storage are often blocked. Its visitor is a signed token that the host
// page keeps in its own, first-party, storage (static/chat/widget.js): it
// hands it over in the frame's URL fragment, which never reaches a server.
// Only a frame takes it: frame-ancestors (CSP) has vetted its parent, while
// anyone can send a link to /embed/#token=THEIRS, to have a victim chat in a
// conversation they can read (fixation). The page's own token is fresh.
// The script also says which page of the customer's site the visitor is
// on, for Support (the server keeps it only from a site allowed to embed us).
const framed = window.parent !== window;
let token = null;
let spare = null; // a fresh token not yet used, for when ours is refused
let page = null; // the host page, when framed
if (embedded) {
  const fragment = new URLSearchParams(location.hash.slice(1));
  const given = framed ? fragment.get("token") : null;
  page = framed ? fragment.get("page") : null;
  spare = given ? root.dataset.token : null;
  keepToken(given || root.dataset.token);
}

function keepToken(value) {
  token = value;
  if (framed) {
    window.parent.postMessage({ type: "kookee:token", token }, "*");
    // A reload of the frame picks up the current token, not the first one.
    const fragment = new URLSearchParams({ token });
    if (page) fragment.set("page", page);
    history.replaceState(null, "", `#${fragment}`);
  } else {
    history.replaceState(null, "", location.pathname); // no token in a link someone might share
  }
}

// A token nobody has used: the /embed/ page mints one on every load.
async function freshToken() {
  const response = await fetch(location.pathname, { cache: "no-store", credentials: "omit" });
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  const page = new DOMParser().parseFromString(await response.text(), "text/html");
  return page.getElementById("chat").dataset.token;
}

// --- a verified visitor --------------------------------------------------------------------
// The customer's site may vouch for who its visitor is: a token its backend
// signed (docs/turns.md, "identify"). In the widget, the host page gives
// it to static/chat/widget.js (KookeeChat.identify), which posts it to this
// frame; on the chat page, KookeeChat.identify is this page's own. It is a
// credential: kept in memory only (never in storage, never in the URL), and
// presented on every socket this page opens, since the server forgets it
// with the socket. A token the server refuses leaves the chat anonymous.
let identity = null;
let identitySent = null; // the token this socket was given (reset on each connect)
let person = null; // whom the server says it proves: {id, name}

// The person signed out of the site (KookeeChat.signOut): the next one on
// this browser must not see their conversation. It starts over as "New
// conversation" does, without asking: the server revokes the key and
// closes with 4401, and renew() comes back as a new, anonymous visitor.
function signOut() {
  identity = null;
  identitySent = null;
  person = null;
  restarting = true;
  sendSoon({ type: "forget" });
}

function identify(value) {
  if (typeof value !== "string" || !value) return;
  identity = value;
  sendIdentity(socket);
}

// Straight onto an open socket, not through send(): it may go before the
// first history has answered, and the server takes frames in order, so it
// is settled before anything the visitor sends on this socket.
function sendIdentity(ws) {
  if (!identity || identity === identitySent || ws?.readyState !== WebSocket.OPEN) return;
  identitySent = identity;
  ws.send(JSON.stringify({ type: "identify", token: identity }));
}

// Whether a page of this origin may frame the chat, as the server decides
// it: our own origin ('self' in frame-ancestors) or one of the sites the
// embed page lists (data-parent-origins: KOOKEE_EMBED_ORIGINS), matched as
// chat/visitors/origins.py does (scheme, host and port exactly;
// `https://*.example.com` covers the subdomains, not the domain itself).
function mayFrame(origin) {
  if (origin === location.origin) return true;
  let url;
  try {
    url = new URL(origin);
  } catch {
    return false; // "null": a sandboxed parent, or a file
  }
  return (root.dataset.parentOrigins || "")
    .split(" ")
    .filter(Boolean)
    .some((allowed) => {
      const wildcard = allowed.includes("://*.");
      let listed;
      try {
        listed = new URL(allowed.replace("://*.", "://"));
      } catch {
        return false;
      }
      if (listed.protocol !== url.protocol || listed.port !== url.port) return false;
      if (!wildcard) return url.hostname === listed.hostname;
      const below = url.hostname.slice(0, -(listed.hostname.length + 1));
      return url.hostname.endsWith(`.${listed.hostname}`) && below.split(".").every(Boolean);
    });
}

if (embedded && framed) {
  // From the host page only: the frame's parent, not any window that holds
  // a reference to this frame (a sibling frame, an opener, a popup), and on
  // a site allowed to frame the chat. frame-ancestors vetted the parent when
  // this page loaded; its origin is checked again here, so that a site the
  // server does not list cannot make the visitor someone else, even were
  // that header lost on the way (a proxy, a cache) or not enforced.
  window.addEventListener("message", (event) => {
    if (event.source !== window.parent || !mayFrame(event.origin)) return;
    if (event.data?.type === "kookee:identify") identify(event.data.token);
    if (event.data?.type === "kookee:sign-out") signOut();
  });
} else if (!embedded) {
  // On the chat page, the same API the widget's script gives a host page,
  // its queue of earlier calls included (see static/chat/widget.js).
  const api = window.KookeeChat && typeof window.KookeeChat === "object" ? window.KookeeChat : {};
  const queued = Array.isArray(api.q) ? api.q.splice(0) : [];
  api.identify = identify;
  api.signOut = signOut;
  window.KookeeChat = api;
  for (const call of queued) {
    if (Array.isArray(call) && call[0] === "identify") identify(call[1]);
    if (Array.isArray(call) && call[0] === "signOut") signOut();
  }
}

// --- rendering -----------------------------------------------------------------------------

function nearBottom() {
  return log.scrollHeight - log.scrollTop - log.clientHeight < 80;
}

// Whether the log follows what is added at its end: true until the visitor
// scrolls up to read, true again once they are back at the bottom. Kept
// from the visitor's own scrolling, not measured at each addition: an
// answer's Sources and rating row, added at once, are taller than any
// "near the bottom" margin, and measuring after them would stop following.
let following = true;
let autoTop = 0; // where follow() last scrolled to: its own scroll events are not the visitor's
log.addEventListener(
  "scroll",
  () => {
    following = nearBottom() || log.scrollTop >= autoTop - 1;
  },
  { passive: true },
);
// The log's own height changes too (the composer grows, a notice shows, a
// phone's keyboard opens): follow then as well.
new ResizeObserver(() => follow()).observe(log);

function follow() {
  if (!following) return;
  log.scrollTop = log.scrollHeight;
  autoTop = log.scrollTop;
}

function bubble(role, before) {
  empty.remove();
  const item = document.createElement("article");
  item.className = `message message--${role}`;
  const who = document.createElement("h2");
  who.className = "visually-hidden";
  who.textContent = role === "user" ? gettext("You said:") : gettext("Kookee said:");
  const body = document.createElement("div");
  body.className = "message__text";
  item.append(who, body);
  log.insertBefore(item, before);
  return { item, body };
}

// Turns are shown in the order they were asked, whichever way they came
// (a history page, a resume, another tab's turn): before the first later one.
function placeFor(turnId) {
  let next = null;
  for (const view of views.values()) if (view.turnId > turnId && (!next || view.turnId < next.turnId)) next = view;
  return next ? next.user : null;
}

// `before`: the element to insert the turn before (an earlier page), or null.
function addTurn(turnId, userText, before = placeFor(turnId), at = null) {
  const user = bubble("user", before).item;
  const { item, body } = bubble("assistant", before);
  const view = { turnId, userText: "", user, item, body, text: "", status: "streaming", frame: 0, dropped: false, seq: 0, cards: new Map() };
  item.dataset.turnId = turnId;
  // When it started: Support's messages are placed among the turns by time.
  user.dataset.at = item.dataset.at = String(at ? Date.parse(at) : Date.now());
  views.set(turnId, view);
  setUserText(view, userText);
  follow();
  return view;
}

function setUserText(view, text) {
  view.userText = text;
  view.user.querySelector(".message__text").textContent = text;
  // A turn asked in another tab comes without its question: hidden until
  // the history brings it, rather than an empty bubble.
  view.user.hidden = !text;
}

function setText(view, text, now = false) {
  view.text = text;
  if (now) {
    cancelAnimationFrame(view.frame);
    view.frame = 0;
    paint(view);
  } else if (!view.frame) {
    // Deltas arrive faster than frames are drawn: paint once per frame.
    view.frame = requestAnimationFrame(() => {
      view.frame = 0;
      paint(view);
    });
  }
}

function paint(view) {
  // Streaming, or cut short: its last line may end mid-markup (see mend).
  renderInto(view.body, view.status === "completed" ? view.text : mend(view.text));
  follow();
}

// `title`: an action's, which the visitor reads while it runs.
function showTool(view, name, status, title = "") {
  if (!view.tool) {
    view.tool = document.createElement("p");
    view.tool.className = "message__tool";
    view.item.insertBefore(view.tool, view.body);
  }
  view.tool.textContent = title ? `${title}…` : TOOL_LABELS[name] || gettext("Working…");
  view.toolName = name;
  view.toolStatus = status;
  // A finished search stays on show while the model reads the results: it
  // is hidden by the next text, or by the end of the turn. An action that
  // did nothing (declined, or never answered) is not shown as working.
  if (status === "started") {
    view.tool.hidden = Boolean(openCard(view, name)); // the card says what it would do
  } else {
    // The action's end ends its question too, answered or not: no card
    // is left asking about something that is over.
    const open = openCard(view, name);
    if (open) settleCard(open, "over");
    const asked = lastCard(view, name);
    view.tool.hidden = status === "failed" || (asked !== undefined && asked.state !== "confirmed");
  }
  follow();
}

// `action`: the label of a button that asks the turn's question again
// ("Retry" a failure, "Continue" an interrupted answer), or "".
function setNote(view, text, action = "") {
  view.end?.remove();
  view.end = view.note = null;
  if (!text) return;
  view.end = document.createElement("div");
  view.end.className = "message__end";
  view.note = document.createElement("p");
  view.note.className = "message__note";
  view.note.textContent = text;
  view.end.append(view.note);
  if (action) {
    const again = document.createElement("button");
    again.type = "button";
    again.className = "message__retry";
    again.textContent = action;
    again.disabled = !canAsk();
    again.addEventListener("click", () => ask(view.userText));
    view.end.append(again);
  }
  view.item.append(view.end);
}

function showSources(view, sources) {
  view.sources?.remove();
  view.sources = null;
  if (!sources || !sources.length) return;
  const nav = document.createElement("nav");
  nav.className = "message__sources";
  nav.setAttribute("aria-label", gettext("Sources"));
  const title = document.createElement("h3");
  title.textContent = gettext("Sources");
  const list = document.createElement("ul");
  for (const source of sources) {
    const link = document.createElement("a");
    link.href = new URL(source.url, location.href).href;
    link.target = "_blank";
    link.rel = "noopener";
    link.textContent = source.title;
    const entry = document.createElement("li");
    entry.append(link);
    list.append(entry);
  }
  nav.append(title, list);
  view.item.insertBefore(nav, view.end || null);
  view.sources = nav;
}

// Shows how a turn ended. `text` is the server's, when it is known.
function finish(view, { status, text, sources, message, reason = null, rating }) {
  view.status = status; // before painting: a completed answer is shown as written (see mend)
  setText(view, text ?? view.text, true);
  if (view === current) current = null; // before the note: its button may ask again
  view.reason = reason ?? null;
  view.item.dataset.status = status;
  view.item.removeAttribute("aria-busy");
  if (view.tool) view.tool.hidden = true;
  // A question still open is over: whatever it asked was not done.
  for (const card of view.cards.values()) if (card.state === "open") settleCard(card, "over");
  showSources(view, sources);
  if (status === "interrupted") setNote(view, interruption(view, reason), gettext("Continue"));
  else if (status === "failed") setNote(view, message || ENDINGS.failed, gettext("Retry"));
  else setNote(view, ENDINGS[status] || "");
  showRating(view, rating === undefined ? view.rated : rating);
  follow(); // the Sources and the rating row, added below the answer
}

// --- an action's confirmation ---------------------------------------------------------------

// An action that would change something (cancel an order, say) waits for
// the visitor's yes: a card in the answer, with what it would do and with
// what, and Confirm and Cancel. One card per call id: the question comes
// again to a tab that reconnects while it is open. An answer from any tab
// comes back to all as action.answered; no answer before the action's end
// (its time ran out) or the turn's, and nothing was done.
function showCard(view, frame) {
  const known = view.cards.get(frame.call_id);
  if (known) {
    // Asked again while this page thinks it answered: the answer went on a
    // socket that closed before it arrived. The question is open again.
    if ((known.state === "confirmed" || known.state === "cancelled") && known.sentOn !== socket) openAgain(known);
    return known;
  }
  const title = String(frame.title || frame.action || "");
  const box = document.createElement("div");
  box.className = "message__action";
  box.setAttribute("role", "group");
  box.setAttribute("aria-label", title);
  box.dataset.callId = frame.call_id;
  const heading = document.createElement("p");
  heading.className = "message__action-title";
  heading.textContent = title;
  box.append(heading);
  const list = argumentList(frame.arguments);
  if (list) box.append(list);
  const hint = document.createElement("p");
  hint.className = "message__action-hint";
  hint.textContent = gettext("Nothing is done unless you confirm.");
  const buttons = document.createElement("div");
  buttons.className = "message__action-buttons";
  const yes = cardButton("message__action-confirm", gettext("Confirm"));
  const no = cardButton("message__action-cancel", gettext("Cancel"));
  buttons.append(yes, no);
  const status = document.createElement("p");
  status.className = "message__action-status";
  box.append(hint, buttons, status);
  const card = { view, box, hint, yes, no, status, callId: frame.call_id, action: frame.action, title, state: "open", sentOn: null, back: null };
  yes.addEventListener("click", () => answerCard(card, true));
  no.addEventListener("click", () => answerCard(card, false));
  view.cards.set(frame.call_id, card);
  if (!view.actions) {
    view.actions = document.createElement("div");
    view.actions.className = "message__actions";
    view.body.after(view.actions);
  }
  view.actions.append(box);
  // The card says what is being done: not the progress line too, until it is confirmed.
  if (view.tool && view.toolName === frame.action) view.tool.hidden = true;
  openAgain(card);
  announce(interpolate(gettext("Please confirm or cancel: %s"), [title]));
  // Only from within the chat: never from the customer's page around the
  // widget, nor from someone writing their next question (a key meant for
  // it would answer this one).
  const typing = document.activeElement === input && input.value.trim() !== "";
  if (document.hasFocus() && root.contains(document.activeElement) && !typing) {
    card.back = document.activeElement;
    yes.focus();
  }
  follow();
  return card;
}

function cardButton(className, label) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = className;
  button.textContent = label;
  return button;
}

// The arguments as the visitor would read them: "order_id: A-1001", as
// text (whatever the model wrote), a structure as its JSON.
function argumentList(args) {
  if (!args || typeof args !== "object") return null;
  const entries = Object.entries(args);
  if (!entries.length) return null;
  const list = document.createElement("dl");
  list.className = "message__action-args";
  for (const [name, value] of entries) {
    const row = document.createElement("div");
    const term = document.createElement("dt");
    term.textContent = name;
    const detail = document.createElement("dd");
    detail.dir = "auto";
    detail.textContent = typeof value === "string" ? value : JSON.stringify(value);
    row.append(term, detail);
    list.append(row);
  }
  return list;
}

function openCard(view, action) {
  return [...view.cards.values()].find((card) => card.action === action && card.state === "open");
}

function lastCard(view, action) {
  return [...view.cards.values()].filter((card) => card.action === action).pop();
}

function openAgain(card) {
  card.state = "open";
  card.sentOn = null;
  card.box.dataset.state = "open";
  card.hint.hidden = false;
  card.status.textContent = "";
  card.yes.disabled = card.no.disabled = !ready;
}

function answerCard(card, approve) {
  if (card.state !== "open" || !ready) return;
  send({ type: "action.answer", call_id: card.callId, approve });
  card.sentOn = socket;
  lastAnswered = card;
  settleCard(card, approve ? "confirmed" : "cancelled");
  // Confirmed: what runs now is shown running.
  const view = card.view;
  if (approve && view.tool && view.toolName === card.action && view.toolStatus === "started") view.tool.hidden = false;
}

// The card's question is over: answered here ("confirmed", "cancelled"), in
// another window of this browser, or never ("over", "late").
function settleCard(card, state) {
  const focused = card.box.contains(document.activeElement);
  card.state = state;
  card.box.dataset.state = state;
  card.hint.hidden = true;
  card.yes.disabled = card.no.disabled = true;
  card.status.textContent = CARD_STATES[state];
  announce(`${card.title}: ${CARD_STATES[state]}`);
  if (focused) {
    // Not lost to the body with the disabled button: back where it was.
    const back = card.back?.isConnected && !card.back.disabled ? card.back : input;
    back.focus();
  }
  card.back = null;
}

// Said once, politely, whatever the log's own live region is doing (an
// answer being written is aria-busy: what is added to it is not read out).
const announcer = document.createElement("p");
announcer.className = "visually-hidden";
announcer.setAttribute("role", "status");
announcer.id = "announcer";
root.append(announcer);
let announced = 0;

function announce(text) {
  clearTimeout(announced);
  announcer.textContent = "";
  announced = setTimeout(() => {
    announcer.textContent = text;
  }, 50);
}

// --- ratings -------------------------------------------------------------------------------

// Thumbs up or down under a finished answer; after a thumbs down, an
// optional comment. `rated`: the rating the server has ("up", "down", null).
function showRating(view, rated = null) {
  view.rating?.box.remove();
  view.rating = null;
  view.rated = rated ?? null;
  if (view.status === "streaming" || !view.text.trim()) return;
  const box = document.createElement("div");
  box.className = "message__rating";
  const question = document.createElement("span");
  question.className = "message__rating-question";
  question.textContent = gettext("Was this helpful?");
  const up = ratingButton(view, "up", gettext("Helpful"));
  const down = ratingButton(view, "down", gettext("Not helpful"));
  const status = document.createElement("span");
  status.className = "message__rating-status";
  status.setAttribute("role", "status");
  box.append(question, up, down, status);
  view.item.append(box);
  view.rating = { box, up, down, status, form: null };
  markRating(view, view.rated);
}

// The thumbs, drawn: an emoji needs an emoji font, which many systems lack
// (an empty box). The same drawing as the admin's (chat/text.py, thumb_svg).
const THUMB_PATH =
  "M7 10v11H3V10h4zm2 11h8.3a2 2 0 0 0 2-1.6l1.4-7A2 2 0 0 0 18.7 10H14V5.5A2.5 2.5 0 0 0 11.5 3L9 10v11z";

function thumb(value) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("focusable", "false");
  const path = document.createElementNS("http://www.w3.org/2000/svg", "path");
  path.setAttribute("d", THUMB_PATH);
  path.setAttribute("fill", "currentColor");
  if (value === "down") path.setAttribute("transform", "rotate(180 12 12)");
  svg.append(path);
  return svg;
}

function ratingButton(view, value, label) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = `message__rate message__rate--${value}`;
  button.append(thumb(value));
  button.title = label;
  button.setAttribute("aria-label", label);
  button.setAttribute("aria-pressed", "false");
  button.addEventListener("click", () => rate(view, value));
  return button;
}

function markRating(view, rated) {
  view.rated = rated ?? null;
  if (!view.rating) return;
  view.rating.up.setAttribute("aria-pressed", String(rated === "up"));
  view.rating.down.setAttribute("aria-pressed", String(rated === "down"));
}

function rate(view, value, comment = "") {
  view.ratingSent = { value, comment };
  view.rating.status.textContent = "";
  sendSoon({ type: "feedback", turn_id: view.turnId, rating: value, comment });
}

function askForComment(view) {
  if (!view.rating || view.rating.form) return;
  const form = document.createElement("form");
  form.className = "message__comment";
  const label = document.createElement("label");
  label.textContent = gettext("What was missing or wrong? (optional)");
  const field = document.createElement("textarea");
  field.maxLength = COMMENT_CHARS;
  field.rows = 2;
  label.append(field);
  const submit = document.createElement("button");
  submit.type = "submit";
  submit.textContent = gettext("Send");
  form.append(label, submit);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (field.value.trim()) rate(view, "down", field.value.trim());
  });
  view.rating.box.append(form);
  view.rating.form = form;
  field.focus();
}

function ratingSaved(view) {
  const sent = view.ratingSent || { value: view.rated, comment: "" };
  view.ratingSent = null;
  markRating(view, sent.value);
  if (!view.rating) return;
  if (sent.value === "down" && !sent.comment && !view.rating.form) {
    view.rating.status.textContent = gettext("Thanks for telling us.");
    askForComment(view);
    return;
  }
  view.rating.form?.remove();
  view.rating.form = null;
  view.rating.status.textContent = sent.comment ? gettext("Thanks: your comment was sent.") : gettext("Thanks for your feedback.");
}

// A lost connection that this page saw itself is told as the visitor saw
// it: the server only saw every tab leave ("left"), or a process die. A
// Stop (from whichever tab) or a restart is told as such, drop or not.
function interruption(view, reason) {
  if (view.dropped && !SAID_EVEN_IF_DROPPED.has(reason)) return ENDINGS.dropped;
  return STOP_REASONS[reason] || ENDINGS.interrupted;
}

function showTurn(turn, before = null) {
  const view = addTurn(turn.turn_id, turn.user_text, before, turn.at);
  finish(view, { status: turn.status, text: turn.assistant_text, sources: turn.sources, reason: turn.reason, rating: turn.rating });
}

// The turn running now, from this tab's question, another tab's (the frame
// does not carry its question: the history does), or found running on
// connecting (a resume): shown live, its frames appended from here.
function goLive(turnId, userText = "") {
  if (current?.turnId === turnId) return current; // a resync: the resume replaces the text
  const view = views.get(turnId) || addTurn(turnId, userText);
  if (!view.userText && userText) setUserText(view, userText);
  if (!view.userText) send({ type: "history" });
  view.status = "streaming";
  view.reason = null;
  delete view.item.dataset.status;
  view.item.setAttribute("aria-busy", "true");
  view.dropped = false; // back in time: the answer goes on
  view.seq = 0;
  setNote(view, "");
  showSources(view, null);
  showRating(view, null);
  current = view;
  return view;
}

// The live turn's view, for a frame that is new: null for another turn's
// frame, or one already seen (a seq not past the last one's, as when a
// resume overtook it).
function freshFrame(frame) {
  const view = views.get(frame.turn_id);
  if (!view || view !== current) return null;
  if (typeof frame.seq === "number") {
    if (frame.seq <= view.seq) return null;
    view.seq = frame.seq;
  }
  return view;
}

function clearLog() {
  for (const view of views.values()) cancelAnimationFrame(view.frame);
  views.clear();
  current = null;
  lastAnswered = null;
  clearTimeout(recheck);
  log.querySelectorAll(".message, .chat__event").forEach((item) => item.remove());
  messages.clear();
  log.append(empty);
  empty.hidden = false; // hidden on a page that came with a history
  setMore(false);
  showHandoff(null);
}

// History comes in pages, the latest first: older ones on request.
function oldestTurnId() {
  return Number(log.querySelector(".message--assistant")?.dataset.turnId) || null;
}

function setMore(more) {
  if (!more && document.activeElement === earlier) log.focus(); // not lost to the body
  earlier.hidden = !more;
}

function askEarlier() {
  if (loadingEarlier || !oldestTurnId()) return;
  loadingEarlier = true;
  sendSoon({ type: "history", before: oldestTurnId() });
}

function showEarlier(page) {
  loadingEarlier = false;
  if (page.before !== oldestTurnId()) return; // the log was started afresh meanwhile
  // Keep what the visitor is reading where it is: the page grows above it.
  const fromBottom = log.scrollHeight - log.scrollTop;
  const first = log.querySelector(".message");
  for (const turn of page.turns) showTurn(turn, first);
  for (const message of page.messages || []) showMessage(message);
  setMore(page.more);
  log.scrollTop = log.scrollHeight - fromBottom;
  autoTop = Infinity; // the visitor is reading up there: follow again once they are back down
  following = nearBottom();
}

// --- talk to a person ---------------------------------------------------------------------

// The request for a person, once received: said under the conversation
// until Support closes it, with a form for an address the reply may also go to.
function showHandoff(state) {
  handoff = state && state.status !== "closed" ? state : null;
  handoffNotice.hidden = !handoff;
  // While a person has the conversation, what the visitor writes goes to them.
  const agent = handoff?.status === "claimed" ? handoff.agent : null;
  // A placeholder holds no markup to isolate a name in: its format characters go.
  input.placeholder = agent ? interpolate(gettext("Write to %s…"), [agent.replace(/\p{Cf}/gu, "")]) : ASK_PLACEHOLDER;
  follow();
  if (!handoff) return;
  // A person answers here, in this chat; an address left gets the reply by
  // email too, if no tab has shown it for a while (chat/support/replies.py).
  if (agent) withName(handoffText, gettext("%s from our support team is answering your messages."), agent);
  else if (handoff.status === "claimed") handoffText.textContent = gettext("A person from our support team has your request and will reply here, in this chat.");
  else if (handoff.email) handoffText.textContent = gettext("Your request for a person was received. Someone from our support team will reply here, in this chat, and by email if you are not here to read it.");
  else handoffText.textContent = gettext("Your request for a person was received. Someone from our support team will reply here, in this chat.");
  handoffEmail.hidden = Boolean(handoff.email);
}

// A message between the visitor and a person from Support (not a turn):
// Support's reply, or what the visitor wrote while a person had the
// conversation. Plain text, placed among the turns by time; once only.
function showMessage(message) {
  if (messages.has(message.id)) return;
  empty.remove();
  const agent = message.kind === "agent";
  const item = document.createElement("article");
  item.className = `message ${agent ? "message--agent" : "message--user message--to-person"}`;
  item.dataset.messageId = message.id;
  item.dataset.at = String(Date.parse(message.at));
  const who = document.createElement("h2");
  who.className = agent ? "message__author" : "visually-hidden";
  const time = document.createElement("time");
  time.dateTime = message.at;
  time.textContent = timeFormat.format(new Date(message.at));
  if (agent) who.append(isolated(message.author), " · ", time);
  else who.textContent = gettext("You said:");
  const body = document.createElement("div");
  body.className = "message__text message__text--plain";
  body.textContent = message.text;
  item.append(who, body);
  log.insertBefore(item, placeAt(Number(item.dataset.at)));
  messages.set(message.id, item);
  follow();
}

// A name someone typed, isolated in a <bdi>: a bidi override in it (or a
// right-to-left name) reorders nothing around it, such as the time beside it.
function isolated(name) {
  const bdi = document.createElement("bdi");
  bdi.textContent = name;
  return bdi;
}

// A translated sentence whose %s is a name: the name isolated.
function withName(element, sentence, name) {
  const [before, after = ""] = sentence.split("%s");
  element.replaceChildren(before, isolated(name), after);
}

// Before the first message or turn that came later, or at the end.
function placeAt(at) {
  for (const item of log.querySelectorAll(".message")) {
    if (Number(item.dataset.at) > at) return item;
  }
  return null;
}

// A line in the log that is neither side's message: who answers now.
function showEvent(text, before = null) {
  empty.remove();
  const line = document.createElement("p");
  line.className = "chat__event";
  line.textContent = text;
  log.insertBefore(line, before);
  follow();
  return line;
}

// "Sam joined the conversation": live when Support claims the request, and
// again from every history (a reload, a reconnect), once per request and
// person. From a history it goes where the claim was: after the latest turn
// (while a person has the conversation, no turn starts) and before what was
// written to them since (placed by time, after it).
function showJoined(state, live = false) {
  if (state?.status !== "claimed" || !state.agent) return;
  const key = `${state.handoff_id} ${state.agent}`;
  if ([...log.querySelectorAll(".chat__event")].some((line) => line.dataset.joined === key)) return;
  const latest = [...log.querySelectorAll(".message--assistant")].pop();
  const before = live ? null : latest ? latest.nextSibling : log.querySelector(".message");
  const line = showEvent("", before);
  line.dataset.joined = key;
  withName(line, gettext("%s from our support team joined the conversation."), state.agent);
}

personButton.addEventListener("click", () => {
  askPersonError.textContent = "";
  askPerson.showModal();
  document.getElementById("ask-person-reason").focus();
});
askPerson.addEventListener("click", (event) => {
  if (event.target.closest("button")?.value === "cancel") askPerson.close();
});
askPersonForm.addEventListener("submit", (event) => {
  event.preventDefault(); // the dialog stays open until the server has the request
  askPersonError.textContent = "";
  const reason = document.getElementById("ask-person-reason").value.trim();
  const email = document.getElementById("ask-person-email").value.trim();
  sendSoon({ type: "handoff", reason, email });
});
handoffEmail.addEventListener("submit", (event) => {
  event.preventDefault();
  const email = document.getElementById("handoff-email-input").value.trim();
  if (email) sendSoon({ type: "handoff", email });
});

// --- controls ------------------------------------------------------------------------------

function updateControls() {
  const streaming = current !== null;
  // Dormant, the socket is closed but a send (or any move) brings it back.
  const usable = ready || dormant;
  button.textContent = streaming ? gettext("Stop") : gettext("Send");
  button.dataset.action = streaming ? "stop" : "send";
  button.setAttribute("aria-label", streaming ? gettext("Stop the answer") : gettext("Send your question"));
  button.disabled = !usable || (!streaming && pending !== null);
  restartButton.disabled = !usable || views.size === 0;
  personButton.disabled = !usable;
  // Retry and Continue ask again: not while a turn runs, in any tab.
  for (const again of log.querySelectorAll(".message__retry")) again.disabled = !canAsk();
  for (const starter of starters) starter.disabled = !canAsk();
  // An action's question is answered on an open socket only.
  for (const view of views.values()) {
    for (const card of view.cards.values()) if (card.state === "open") card.yes.disabled = card.no.disabled = !ready;
  }
}

function canAsk() {
  return (ready || dormant) && !current && !pending;
}

function setConnection(text, state) {
  connection.textContent = text;
  root.dataset.connection = state;
}

function send(frame) {
  if (ready) socket.send(JSON.stringify(frame));
}

// Sends now, or once the dormant socket is back.
function sendSoon(frame) {
  if (ready) return send(frame);
  outbox.push(frame);
  wake();
}

function ask(text) {
  text = text.trim();
  if (!text || !canAsk()) return false;
  pending = { text, sent: ready, dropped: false };
  sendSoon({ type: "message", text });
  updateControls();
  return true;
}

function stop() {
  if (current) send({ type: "stop" });
}

// --- frames --------------------------------------------------------------------------------

const handlers = {
  "turn.started": (frame) => {
    // Our question's turn, or another tab's: then there is no question of
    // ours on this socket (one still in the outbox will get a busy error).
    const asked = pending?.sent ? pending.text : "";
    const view = goLive(frame.turn_id, asked);
    view.asked = asked;
    if (asked) pending = null;
    setConnection("", "open");
    updateControls();
  },
  "turn.resume": (frame) => {
    // The answer so far, as the server has it: it replaces what this page
    // had, and the frames up to its seq are in it.
    const view = goLive(frame.turn_id);
    view.seq = frame.seq;
    if (view.tool) view.tool.hidden = true;
    setText(view, frame.text, true);
    updateControls();
  },
  delta: (frame) => {
    const view = freshFrame(frame);
    if (!view) return;
    if (view.tool) view.tool.hidden = true;
    setText(view, view.text + frame.text);
  },
  tool: (frame) => {
    const view = freshFrame(frame);
    if (view) showTool(view, frame.name, frame.status, typeof frame.title === "string" ? frame.title : "");
  },
  "action.answered": (frame) => {
    // Answered in some tab, on some device: every card of it says how.
    const card = views.get(frame.turn_id)?.cards.get(frame.call_id);
    const state = frame.approve === true ? "confirmed" : "cancelled";
    if (card && card.state !== state) settleCard(card, state);
  },
  "action.confirm": (frame) => {
    // Not numbered: it is sent again to a tab that comes in while it is open.
    const view = views.get(frame.turn_id);
    if (view && view.status === "streaming" && typeof frame.call_id === "string") showCard(view, frame);
  },
  error: (frame) => {
    if (frame.code === "bad_identity") {
      // The site's token proved nothing (expired, signed with another key, no
      // key set here): the chat goes on anonymously, and the visitor needs
      // to know nothing of it. Not a refusal of a pending question either.
      console.warn("Kookee chat: the identity token was refused (bad_identity); chatting anonymously.");
      return;
    }
    if (frame.code === "not_found" && frame.turn_id === undefined) {
      // An action.answer that came too late: the question was over (its
      // time ran out, or another window answered it).
      if (lastAnswered?.box.isConnected) settleCard(lastAnswered, "late");
      lastAnswered = null;
      return;
    }
    if (HANDOFF_ERRORS.has(frame.code)) {
      if (askPerson.open) askPersonError.textContent = frame.message;
      else setConnection(frame.message, "open");
      return;
    }
    if (RATING_ERRORS.has(frame.code)) {
      const view = views.get(frame.turn_id);
      if (view?.rating) view.rating.status.textContent = gettext("Your rating could not be saved.");
      return;
    }
    if (frame.turn_id) {
      // Why a turn failed; its turn.ended follows.
      const view = views.get(frame.turn_id);
      if (view) view.message = frame.message;
      return;
    }
    setConnection(frame.message, "open");
    if (pending) {
      // Refused (busy, too long, a limit): nothing was stored; give the text back.
      if (!input.value) input.value = pending.text;
      pending = null;
      updateControls();
    } else if (frame.code === "busy" && current?.asked) {
      // Another tab's turn started just before our question reached the
      // server, and its turn.started was taken for ours: the question was
      // not stored. Give it back; the history tells whose turn this is.
      if (!input.value) input.value = current.asked;
      current.asked = "";
      setUserText(current, "");
      send({ type: "history" });
    }
  },
  identified: (frame) => {
    // Nothing changes on screen: the conversation is the person's now. Said
    // on the root, for whoever styles or tests it.
    person = { id: frame.id, name: frame.name };
    root.dataset.identified = "true";
  },
  "agent.message": (frame) => showMessage({ ...frame, kind: "agent" }),
  "visitor.message": (frame) => {
    // Our own message, taken by the person who has the conversation (every
    // tab gets it; here it is also the answer to what was sent).
    if (pending?.text === frame.text) pending = null;
    showMessage({ ...frame, kind: "visitor" });
    setConnection("", "open");
    updateControls();
  },
  "handoff.updated": (frame) => {
    const was = handoff;
    const state = frame.handoff;
    if (state.status === "claimed" && state.agent && was?.agent !== state.agent) {
      showJoined(state, true);
    } else if (state.status === "closed" && was) {
      showEvent(gettext("Support closed the conversation. The assistant answers again."));
    }
    showHandoff(state);
  },
  "handoff.saved": (frame) => {
    if (askPerson.open) askPerson.close();
    askPersonForm.reset();
    handoffEmail.reset();
    showHandoff(frame);
  },
  "feedback.saved": (frame) => {
    const view = views.get(frame.turn_id);
    if (view) ratingSaved(view);
  },
  "turn.ended": (frame) => {
    const view = views.get(frame.turn_id);
    if (!view || view.status !== "streaming") return;
    if (view !== current) {
      // A turn this page only knew from the history, unfollowed (its process
      // died, and another closed it): the history has what was stored.
      send({ type: "history" });
      return;
    }
    finish(view, { status: frame.status, sources: frame.sources, message: view.message, reason: frame.reason });
    if (frame.handoff) showHandoff(frame.handoff); // the assistant asked for a person
    updateControls();
    if (document.activeElement === button || document.activeElement === document.body) input.focus();
  },
  history: (frame) => {
    if (frame.before) return showEarlier(frame); // an older page, asked for by the visitor
    const first = !ready;
    if (first) becomeReady();
    reconcile(frame, looked);
    looked = true;
    if (first) for (const early of held.splice(0)) handlers[early.type]?.(early);
    flushOutbox();
  },
};

// Brings the screen in line with what the server stored, from the latest
// page of the conversation: turns this page missed (or only half saw,
// before a drop) are shown as they were saved. The running turn is left to
// its live frames. `again`: this socket has had a history before.
function reconcile(page, again = false) {
  const reaches = !page.more || page.turns.some((turn) => views.has(turn.turn_id));
  // More happened elsewhere than a page holds: start again from this page
  // rather than leave a hole. (On a first look, the log is empty anyway.)
  if (!reaches) clearLog();
  if (views.size === 0) setMore(page.more);
  if ("handoff" in page) showHandoff(page.handoff);
  const oldest = oldestTurnId();
  let stillStreaming = false;
  for (const turn of page.turns) {
    let view = views.get(turn.turn_id);
    if (!view) {
      if (oldest && turn.turn_id < oldest) continue; // "Show earlier messages" brings those
      if (pending?.dropped && turn.user_text === pending.text) pending = null; // sent just before a drop
      view = addTurn(turn.turn_id, turn.user_text, placeFor(turn.turn_id), turn.at);
    }
    if (view.userText !== turn.user_text) setUserText(view, turn.user_text);
    if (turn.at) view.user.dataset.at = view.item.dataset.at = String(Date.parse(turn.at));
    if (view === current || held.some((frame) => frame.turn_id === turn.turn_id)) continue; // live
    if (turn.status === "streaming") {
      // No live frame for it (yet): a resume usually follows a connect at
      // once; if none has come by the next look, its server may have died
      // (then it is closed later) or not noticed a drop yet. Ask again shortly.
      stillStreaming = true;
      setText(view, turn.assistant_text, true);
      if (again) setNote(view, STILL_WRITING);
    } else if (view.status !== turn.status || view.text !== turn.assistant_text || view.reason !== (turn.reason ?? null)) {
      const ending = { status: turn.status, text: turn.assistant_text, sources: turn.sources, reason: turn.reason };
      finish(view, { ...ending, message: view.message, rating: turn.rating });
    } else if (view.rated !== (turn.rating ?? null)) {
      markRating(view, turn.rating); // rated in another tab
    }
  }
  if (pending?.dropped) {
    // Sent as the connection dropped, and never reached the server. (A
    // message sent on this connection is still on its way: its turn.started
    // or error will come.)
    if (!input.value) input.value = pending.text;
    pending = null;
    setConnection(gettext("Your last message was not sent. Please send it again."), "open");
  }
  for (const message of page.messages || []) showMessage(message);
  showJoined(page.handoff);
  if (stillStreaming) scheduleRecheck();
  if (!oldest) {
    following = true; // a first look starts at the latest
    follow();
  }
  updateControls();
}

function scheduleRecheck() {
  clearTimeout(recheck);
  recheck = setTimeout(() => send({ type: "history" }), STILL_STREAMING_RECHECK_MS);
}

// --- the connection ------------------------------------------------------------------------

function socketUrl() {
  const url = new URL(root.dataset.socket, location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  if (token) url.searchParams.set("token", token);
  if (page) url.searchParams.set("page", page);
  return url.href;
}

function connect() {
  clearTimeout(reconnectTimer);
  reconnectTimer = null;
  dormant = false;
  lastAttempt = Date.now();
  held = [];
  looked = false;
  identitySent = null;
  const ws = new WebSocket(socketUrl());
  let opened = false;
  socket = ws;
  // The server accepts every handshake it does not refuse outright, then
  // closes a visitor it will not serve: the socket is ready only once the
  // history answers (see becomeReady).
  ws.addEventListener("open", () => {
    opened = true;
    ws.send(JSON.stringify({ type: "history" }));
    // Right after, so that the history is not kept waiting for it.
    if (socket === ws) sendIdentity(ws);
  });
  ws.addEventListener("message", (event) => {
    let frame;
    try {
      frame = JSON.parse(event.data);
    } catch {
      return;
    }
    if (socket !== ws) return;
    // Until the history answers, the log is not built (the widget's is
    // empty): a resume, or another tab's turn, waits for it, in order.
    if (!ready && frame.type !== "history") held.push(frame);
    else handlers[frame.type]?.(frame);
  });
  ws.addEventListener("close", (event) => {
    if (socket !== ws) return;
    // The chat page's handshake is refused outright when its session has
    // expired; a browser cannot tell that from a network failure, so ask the
    // page for a session (GET / keeps a live one, makes one otherwise)
    // before trying again. The widget never does this: its token is only
    // replaced on the server's explicit 4401.
    if (!opened && !embedded) refreshSession();
    closed(event.code);
  });
}

function refreshSession() {
  fetch("/", { method: "HEAD", cache: "no-store", credentials: "same-origin" }).catch(() => {});
}

function becomeReady() {
  ready = true;
  attempts = 0;
  setConnection(notice, "open");
  notice = "";
}

function flushOutbox() {
  for (const frame of outbox) send(frame);
  if (pending) pending.sent = true;
  outbox = [];
  updateControls();
}

function closed(code) {
  socket = null;
  ready = false;
  lastAnswered = null; // an error about its answer would come on that socket
  outbox = [];
  held = [];
  loadingEarlier = false;
  if (code !== REFUSED) restarting = false; // its forget was lost with the socket
  if (pending?.sent) {
    pending.dropped = true; // the history after reconnecting tells if it arrived
  } else if (pending) {
    if (!input.value) input.value = pending.text; // never left this page
    pending = null;
  }
  if (current) {
    // What the server saved is asked for once we are back.
    setText(current, current.text, true);
    setNote(current, gettext("Connection lost. Checking what was saved…"));
    current.dropped = true;
    current.item.removeAttribute("aria-busy");
    current = null;
  }
  if (code === FLOOD || code === 1008) {
    setConnection(gettext("Disconnected: too many messages at once. Reload the page to continue."), "closed");
  } else if (code === REFUSED) {
    renew();
  } else if (code === IDLE) {
    dormant = true; // nothing to say: the visitor's next move reconnects
    setConnection("", "idle");
  } else if (code === CROWDED) {
    dormant = true;
    reconnect(TOO_MANY, ...TOO_MANY_BACKOFF_MS);
  } else if (code === BUSY) {
    reconnect(gettext("The assistant is very busy right now. Trying again in a moment…"), ...BUSY_BACKOFF_MS);
  } else {
    reconnect(attempts >= 5 ? gettext("Still reconnecting… Check your connection.") : gettext("Connection lost. Reconnecting…"));
  }
  updateControls();
}

// Our key is refused: the visitor started over, or it expired or was
// revoked. Only now is a new one taken (never on a network failure, which
// would cost the visitor their conversation), and the conversation shown
// is no longer theirs.
async function renew() {
  if (restarting) notice = gettext("Started a new conversation.");
  else if (views.size) notice = gettext("This conversation has ended. Your next message starts a new one.");
  restarting = false;
  // A new key, not yet anyone's: the identity (if any) goes again on the
  // next socket. Refused after an identify, this is how the conversation of
  // whoever this browser proved before is left behind.
  person = null;
  delete root.dataset.identified;
  clearLog();
  setConnection(gettext("Starting a new conversation…"), "reconnecting");
  try {
    if (embedded) keepToken(spare || (await freshToken()));
    // A new session cookie (the admin's Preview page: a new preview key).
    else await fetch(root.dataset.renew || "/", { method: "HEAD", cache: "no-store", credentials: "same-origin" });
    spare = null;
  } catch {
    // The network or the server is down: the next attempt finds out.
  }
  reconnect(gettext("Starting a new conversation…"));
}

function reconnect(text, base = 500, longest = MAX_BACKOFF_MS) {
  const delay = Math.min(longest, base * 2 ** attempts) * (0.75 + Math.random() / 2);
  attempts += 1;
  setConnection(text, text === TOO_MANY ? "closed" : "reconnecting");
  clearTimeout(reconnectTimer);
  reconnectTimer = setTimeout(connect, delay);
}

// The visitor is back (a key, a click, focus, the tab shown again): reopen a
// socket the server closed as idle or as one too many, at most once every
// few seconds, so that typing into a crowded chat does not knock per key.
function wake() {
  if (!dormant || socket) return;
  clearTimeout(reconnectTimer);
  reconnectTimer = setTimeout(connect, Math.max(0, lastAttempt + WAKE_GAP_MS - Date.now()));
}

for (const type of ["keydown", "pointerdown", "focusin"]) document.addEventListener(type, wake, true);
window.addEventListener("focus", wake);
document.addEventListener("visibilitychange", () => {
  if (document.visibilityState === "visible") wake();
});

// Offline, an open socket can linger for minutes before it errors: let it go
// now, so the page says so. Back online: no need to wait out the backoff.
window.addEventListener("offline", () => socket?.close());
window.addEventListener("online", () => {
  if (reconnectTimer) connect();
});

// --- input ---------------------------------------------------------------------------------

document.getElementById("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  if (button.dataset.action === "stop") stop();
  else if (ask(input.value)) input.value = "";
  resize();
});

input.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    // Enter sends; it never stops an answer (that is the button or Esc).
    if (!current && ask(input.value)) input.value = "";
    resize();
  }
});

document.addEventListener("keydown", (event) => {
  // Escape in the confirmation closes it, and must not stop the answer too.
  if (event.key === "Escape" && current && !confirmRestart.open) {
    event.preventDefault();
    stop();
  }
});

function resize() {
  input.style.height = "auto";
  input.style.height = `${Math.min(input.scrollHeight, 160)}px`;
}
input.addEventListener("input", resize);

document.getElementById("close")?.addEventListener("click", () => {
  // The widget's script on the host page closes the frame; the message says nothing else.
  window.parent.postMessage({ type: "kookee:close" }, "*");
});

earlier.addEventListener("click", askEarlier);

// A starter question is sent as the visitor's message, as if typed and sent.
for (const starter of starters) {
  starter.addEventListener("click", (event) => {
    if (!ask(starter.textContent)) return;
    // From the keyboard, on to the question box, as after typing: the
    // button goes with the greeting. (A tap opens no phone's keyboard now.)
    if (event.detail === 0) input.focus();
  });
}

// Starting over cannot be undone: it asks first.
restartButton.addEventListener("click", () => confirmRestart.showModal());
confirmRestart.addEventListener("click", (event) => {
  const choice = event.target.closest("button")?.value;
  if (!choice) return;
  confirmRestart.close();
  if (choice !== "restart") return;
  // The server stops any answer, revokes our key and closes with 4401:
  // renew() then clears the log and comes back as a new visitor.
  restarting = true;
  sendSoon({ type: "forget" });
  input.focus();
});

// The chat page carries the latest page of its history; the widget asks.
const inline = document.getElementById("history");
if (inline) reconcile(JSON.parse(inline.textContent));
updateControls();
connect();
