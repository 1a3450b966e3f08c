// The chat page: one WebSocket, frames as in docs/contract.md.
// Model text is only ever set with textContent: nothing it writes is markup.
(() => {
  "use strict";
  const log = document.getElementById("log");
  const form = document.getElementById("composer");
  const input = document.getElementById("text");
  const button = document.getElementById("send");
  const connection = document.getElementById("connection");
  const TOOL_LABELS = { search_help_center: "Searching the help center…" };
  const ENDINGS = {
    interrupted: "Stopped",
    truncated: "Cut off: the answer reached its length limit",
    failed: "Something went wrong; please try again",
  };

  let socket = null;
  let current = null; // the answer being streamed: {turnId, bubble, text, tool}
  let pending = null; // a message sent, not yet taken (turn.started) or refused (error)

  function addMessage(role, text) {
    const item = document.createElement("li");
    item.className = `message message--${role}`;
    const body = document.createElement("div");
    body.className = "message__text";
    body.textContent = text;
    item.append(body);
    log.append(item);
    scrollToEnd();
    return item;
  }

  function scrollToEnd() {
    log.scrollTop = log.scrollHeight;
  }

  function markEnding(item, status) {
    item.dataset.status = status;
    if (!ENDINGS[status]) return;
    const note = document.createElement("p");
    note.className = "message__note";
    note.textContent = ENDINGS[status];
    item.append(note);
    scrollToEnd();
  }

  function setStreaming(streaming) {
    button.textContent = streaming ? "Stop" : "Send";
    button.dataset.action = streaming ? "stop" : "send";
    button.disabled = !socket || socket.readyState !== WebSocket.OPEN;
  }

  function showTool(frame) {
    if (!current) return;
    if (!current.tool) {
      current.tool = document.createElement("p");
      current.tool.className = "message__tool";
      current.bubble.prepend(current.tool);
    }
    current.tool.hidden = frame.status !== "started";
    current.tool.textContent = TOOL_LABELS[frame.name] || "Working…";
  }

  const handlers = {
    "turn.started": (frame) => {
      addMessage("user", pending || "");
      pending = null;
      current = { turnId: frame.turn_id, bubble: addMessage("assistant", ""), text: "", tool: null };
      current.bubble.setAttribute("aria-busy", "true");
      setStreaming(true);
    },
    delta: (frame) => {
      if (!current || frame.turn_id !== current.turnId) return;
      current.text += frame.text;
      current.bubble.querySelector(".message__text").textContent = current.text;
      if (current.tool) current.tool.hidden = true;
      scrollToEnd();
    },
    tool: showTool,
    "turn.ended": (frame) => {
      if (!current || frame.turn_id !== current.turnId) return;
      current.bubble.removeAttribute("aria-busy");
      if (current.tool) current.tool.hidden = true;
      markEnding(current.bubble, frame.status);
      current = null;
      setStreaming(false);
      input.focus();
    },
    error: (frame) => {
      connection.textContent = frame.message;
      if (pending !== null && !frame.turn_id) {
        // Refused (busy, too long, a limit): nothing was stored; give the text back.
        input.value = pending;
        pending = null;
        setStreaming(false);
      }
    },
  };

  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    socket = new WebSocket(`${scheme}://${location.host}/ws/chat/`);
    socket.addEventListener("open", () => {
      connection.textContent = "Connected";
      setStreaming(false);
    });
    socket.addEventListener("message", (event) => {
      const frame = JSON.parse(event.data);
      (handlers[frame.type] || (() => {}))(frame);
    });
    socket.addEventListener("close", () => {
      connection.textContent = "Disconnected. Reload the page to reconnect.";
      if (current) markEnding(current.bubble, "interrupted");
      current = null;
      pending = null;
      setStreaming(false);
      button.disabled = true;
    });
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (button.dataset.action === "stop") {
      socket.send(JSON.stringify({ type: "stop" }));
      return;
    }
    const text = input.value.trim();
    if (!text || pending !== null) return;
    pending = text;
    button.disabled = true;
    socket.send(JSON.stringify({ type: "message", text }));
    input.value = "";
  });

  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      form.requestSubmit();
    }
  });

  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && current) socket.send(JSON.stringify({ type: "stop" }));
  });

  for (const turn of JSON.parse(document.getElementById("history").textContent)) {
    addMessage("user", turn.user_text);
    markEnding(addMessage("assistant", turn.assistant_text), turn.status);
  }
  connect();
})();
