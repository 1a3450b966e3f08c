// Kookee chat on a customer's site, with one tag:
//   <script src="https://YOUR-KOOKEE-HOST/static/chat/widget.js" async></script>
// A bubble opens the chat in a frame served by Kookee (/embed/). The frame
// does the chatting; this script only shows, hides and places it, inside a
// shadow root so that the host page's styles and ours never mix.
//
// A site whose visitors sign in may tell the chat who they are: its backend
// signs a token (an HS256 JWT, docs/turns.md, "identify") and its page
// calls KookeeChat.identify(token). The script tag is async, so the page
// cannot know when it has run: a call made before then goes into a queue,
// which this script replays when it runs. Put this before the tag (it is a
// no-op once the script has run, so it may also go anywhere after it):
//   <script>
//     window.KookeeChat = window.KookeeChat || { q: [], identify(t) { this.q.push(["identify", t]); },
//       signOut() { this.q.push(["signOut"]); } };
//     KookeeChat.identify("TOKEN FROM YOUR BACKEND");
//   </script>
// When the person signs out of the site, call KookeeChat.signOut(): the
// next person on this browser starts a conversation of their own.
(() => {
  "use strict";
  const script = document.currentScript;
  if (!script || window.__kookeeChat) return; // once per page
  window.__kookeeChat = true;
  const origin = new URL(script.src).origin;
  // Its own few words, on a page that is not ours: in the visitor's
  // language, chosen from the browser's as the server chooses the frame's
  // (Accept-Language). The Portuguese is the catalog's translation of each
  // English string (locale/; tests/test_translations.py keeps them equal).
  const gettext_noop = (text) => text;
  const WORDS = {
    en: {
      label: gettext_noop("Help"),
      title: gettext_noop("Kookee help chat"),
      unavailable: gettext_noop("The help chat is not available on this site."),
      owner: gettext_noop("Site owner: add this site's address to KOOKEE_EMBED_ORIGINS on your Kookee server."),
    },
    "pt-br": {
      label: "Ajuda",
      title: "Chat de ajuda da Kookee",
      unavailable: "O chat de ajuda não está disponível neste site.",
      owner: "Dono do site: adicione o endereço deste site a KOOKEE_EMBED_ORIGINS no seu servidor Kookee.",
    },
  };
  const preferred = (navigator.languages || [navigator.language || "en"]).map((tag) => tag.toLowerCase());
  const words = WORDS[preferred.map((tag) => (tag.startsWith("pt") ? "pt-br" : tag.split("-")[0])).find((tag) => tag in WORDS) || "en"];
  const label = script.dataset.label || words.label;

  const host = document.createElement("div");
  host.id = "kookee-chat";
  const shadow = host.attachShadow({ mode: "open" });
  const style = document.createElement("style");
  style.textContent = `
    :host { all: initial; }
    .bubble { position: fixed; right: 20px; bottom: 20px; z-index: 2147483646; display: flex; align-items: center; gap: 8px;
      font: 600 16px/1 system-ui, sans-serif; color: #fff; background: #3346c8; border: 0; border-radius: 28px;
      padding: 0 20px; height: 56px; box-shadow: 0 4px 14px rgba(16, 24, 40, .25); cursor: pointer; }
    .bubble:focus-visible { outline: 3px solid #1a5fd6; outline-offset: 3px; }
    .bubble svg { width: 22px; height: 22px; }
    .panel { position: fixed; right: 20px; bottom: 88px; z-index: 2147483647; width: 380px; height: min(620px, calc(100vh - 110px));
      border-radius: 14px; overflow: hidden; box-shadow: 0 12px 40px rgba(16, 24, 40, .3); background: #fff; }
    .panel[hidden] { display: none; }
    .panel--notice { height: auto; padding: 18px 20px; font: 15px/1.45 system-ui, sans-serif; color: #1d2433; }
    .notice p { margin: 0; }
    .notice p + p { margin-top: 8px; font-size: 13px; color: #505a6e; }
    .notice:focus-visible { outline: 3px solid #1a5fd6; outline-offset: 4px; }
    iframe { border: 0; width: 100%; height: 100%; display: block; }
    @media (max-width: 480px) {
      .panel { inset: 0; width: auto; height: auto; border-radius: 0; }
      .panel:not([hidden]) + .bubble { display: none; }
      /* A notice has no close button of its own: it stays above the bubble, which closes it. */
      .panel--notice { inset: auto 12px 88px; border-radius: 14px; }
      .panel--notice:not([hidden]) + .bubble { display: flex; }
    }`;

  const panel = document.createElement("div");
  panel.className = "panel";
  panel.id = "kookee-panel";
  panel.hidden = true;
  // A landmark of the host page of its own, whichever it holds: the chat's frame, or a notice.
  panel.setAttribute("role", "region");
  panel.setAttribute("aria-label", words.title);

  const bubble = document.createElement("button");
  bubble.type = "button";
  bubble.className = "bubble";
  bubble.setAttribute("aria-expanded", "false");
  bubble.setAttribute("aria-controls", "kookee-panel");
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("aria-hidden", "true");
  const path = document.createElementNS("http://www.w3.org/2000/svg", "path");
  path.setAttribute("fill", "currentColor");
  path.setAttribute("d", "M4 3h16a2 2 0 0 1 2 2v11a2 2 0 0 1-2 2H9l-5 4v-4a2 2 0 0 1-2-2V5a2 2 0 0 1 2-2z");
  svg.append(path);
  const text = document.createElement("span");
  text.textContent = label;
  bubble.append(svg, text);

  // The visitor's token for the chat, kept here, in the host page's own
  // storage: the frame's storage is third-party and often blocked.
  const TOKEN_KEY = "kookee.token";
  const storage = {
    get() {
      try {
        return localStorage.getItem(TOKEN_KEY);
      } catch {
        return null; // blocked: the conversation lasts as long as the page
      }
    },
    set(value) {
      try {
        localStorage.setItem(TOKEN_KEY, value);
      } catch {
        /* see get() */
      }
    },
    remove() {
      try {
        localStorage.removeItem(TOKEN_KEY);
      } catch {
        /* see get() */
      }
    },
  };

  // The verified visitor's token (KookeeChat.identify): in memory only. It
  // is a credential, the host page's to keep; the frame gets it by message,
  // never in its URL (which a server, a log or a Referer could see).
  let identity = null;
  let frameLoaded = false;

  // To the frame, and only if its document is Kookee's: never "*", which
  // would hand the token to whatever page the frame showed instead (an
  // error page, or one it was navigated to).
  function postIdentity() {
    if (identity && frameLoaded) frame.contentWindow.postMessage({ type: "kookee:identify", token: identity }, origin);
  }

  function identify(token) {
    if (typeof token !== "string" || !token) return;
    identity = token;
    signingOut = false;
    postIdentity();
  }

  // The person signed out of the site: the next one on this browser must
  // not see their conversation. The stored key goes (a new visitor next
  // time), and an open chat starts over as its "New conversation" does (the
  // server revokes the key); a frame still loading is told when it loads.
  let signingOut = false;
  function signOut() {
    identity = null;
    storage.remove();
    signingOut = Boolean(frame);
    postSignOut();
  }

  function postSignOut() {
    if (!signingOut || !frameLoaded) return;
    signingOut = false;
    frame.contentWindow.postMessage({ type: "kookee:sign-out" }, origin);
  }

  // Whether this page's origin may show the chat, as the server's
  // frame-ancestors decides (/embed/allowed): asked once, on the first open.
  // A frame refused by it shows a grey error page, and only the console says
  // why; so a refused site gets a notice instead, and its console the hint.
  // Unsure (an error, an older server without the question), the frame goes
  // ahead: frame-ancestors still has the last word.
  let allowed = null;
  async function mayFrame() {
    try {
      const url = `${origin}/embed/allowed?origin=${encodeURIComponent(location.origin)}`;
      const response = await fetch(url, { credentials: "omit" });
      return !response.ok || (await response.json()).allowed !== false;
    } catch {
      return true;
    }
  }

  let notice = null;
  function showRefused() {
    if (!notice) {
      console.warn(
        `Kookee chat: this page's origin (${location.origin}) may not show the chat, which ${origin} serves. ` +
          `Add ${location.origin} to KOOKEE_EMBED_ORIGINS in that server's settings, then restart it.`,
      );
      notice = document.createElement("div");
      notice.className = "notice";
      notice.tabIndex = -1;
      const [said, hint] = [words.unavailable, words.owner].map((line) => {
        const p = document.createElement("p");
        p.textContent = line;
        return p;
      });
      notice.append(said, hint);
      panel.classList.add("panel--notice");
      panel.append(notice);
    }
    panel.hidden = false;
    bubble.setAttribute("aria-expanded", "true");
    notice.focus();
  }

  async function toggle() {
    if (!panel.hidden) return setOpen(false);
    allowed ??= mayFrame();
    if (await allowed) setOpen(true);
    else showRefused();
  }

  let frame = null;
  function setOpen(open) {
    if (open && !frame) {
      // Loaded on first open: a page view alone costs the server nothing.
      frame = document.createElement("iframe");
      frame.title = words.title;
      // In the fragment: the browser never sends it to a server. The page
      // (origin and path, no query) tells Support where the visitor was.
      const fragment = new URLSearchParams();
      const token = storage.get();
      if (token) fragment.set("token", token);
      fragment.set("page", location.origin + location.pathname);
      frame.src = `${origin}/embed/#${fragment}`;
      // Each document the frame loads (the first, and any reload) starts
      // with no identity: it gets it on its `load`, which comes after the
      // chat's module script has run and listens. (Posted earlier, it would
      // reach the frame's initial about:blank, on the host's origin, and be
      // dropped for the target origin.) The frame keeps it across its own
      // reconnections.
      frame.addEventListener("load", () => {
        frameLoaded = true;
        postSignOut();
        postIdentity();
      });
      panel.append(frame);
    }
    panel.hidden = !open;
    // A disclosure button: its name is its visible label, its state is aria-expanded.
    bubble.setAttribute("aria-expanded", String(open));
    if (open) frame.focus();
    else bubble.focus();
  }
  bubble.addEventListener("click", toggle);
  window.addEventListener("message", (event) => {
    if (event.origin !== origin || event.source !== frame?.contentWindow) return;
    if (event.data?.type === "kookee:close") setOpen(false);
    if (event.data?.type === "kookee:token" && typeof event.data.token === "string") storage.set(event.data.token);
  });

  // The page's API. The object the page may have made for its queue is kept
  // (and its calls replayed in order): a reference the page holds to it
  // then calls the real identify too.
  const api = window.KookeeChat && typeof window.KookeeChat === "object" ? window.KookeeChat : {};
  const queued = Array.isArray(api.q) ? api.q.splice(0) : [];
  api.identify = identify;
  api.signOut = signOut;
  window.KookeeChat = api;
  for (const call of queued) {
    if (Array.isArray(call) && call[0] === "identify") identify(call[1]);
    if (Array.isArray(call) && call[0] === "signOut") signOut();
  }

  shadow.append(style, panel, bubble);
  (document.body || document.documentElement).append(host);
})();
