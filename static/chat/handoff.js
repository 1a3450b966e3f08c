// A request for a person: the conversation follows what the visitor writes,
// live. The server renders (and escapes) the thread; this only fetches it.
(() => {
  const thread = document.getElementById("kk-thread");
  if (!thread) return;
  const EVERY_MS = 3000;
  const atBottom = () => thread.scrollHeight - thread.scrollTop - thread.clientHeight < 40;
  thread.scrollTop = thread.scrollHeight;
  let last = thread.innerHTML;
  async function refresh() {
    try {
      const response = await fetch(thread.dataset.url, { credentials: "same-origin", cache: "no-store" });
      if (response.ok) {
        const html = await response.text();
        if (html !== last) {
          const follow = atBottom();
          thread.innerHTML = last = html;
          if (follow) thread.scrollTop = thread.scrollHeight;
        }
      }
    } catch {
      // Offline for a moment: the next round tries again.
    }
    setTimeout(refresh, document.hidden ? EVERY_MS * 5 : EVERY_MS);
  }
  setTimeout(refresh, EVERY_MS);
})();
