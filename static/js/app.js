// Small progressive enhancements; every page works without them.
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  if (!source || !navigator.clipboard) return;
  navigator.clipboard.writeText(source.textContent.trim()).then(() => {
    const label = button.textContent;
    button.textContent = "Copied";
    setTimeout(() => { button.textContent = label; }, 1500);
  });
});

// Live updates. The project's websocket (memorysaas/consumers.py) sends JSON messages
// {event, seq, data}; each becomes DOM events on <body> that htmx elements re-fetch on, e.g.
// hx-trigger="live-memory from:body". A jump in seq means messages were missed (a reconnect, a
// dropped frame): "live-gap" and "live-any" fire so every live element re-fetches.
(() => {
  let lastSeq = null;
  const fire = (name, detail) => document.body.dispatchEvent(new CustomEvent(name, { detail }));
  const setStatus = (state, text) => {
    const status = document.getElementById("live-status");
    if (!status) return;
    status.dataset.state = state;
    status.textContent = text;
  };
  const remember = (seq) => {
    lastSeq = seq;
    document.body.dataset.liveSeq = String(seq);
  };
  document.addEventListener("htmx:wsOpen", () => setStatus("open", "Live"));
  document.addEventListener("htmx:wsClose", () => setStatus("closed", "Reconnecting…"));
  document.addEventListener("htmx:wsBeforeMessage", (event) => {
    let message;
    try { message = JSON.parse(event.detail.message); } catch { return; }  // HTML: htmx swaps it
    event.preventDefault();  // JSON is ours to dispatch, not to swap in
    if (typeof message.seq !== "number") return;
    const missed = lastSeq !== null && message.seq > lastSeq + (message.event === "hello" ? 0 : 1);
    if (lastSeq === null || message.seq > lastSeq) remember(message.seq);
    if (missed) { fire("live-gap", message); fire("live-any", message); }
    if (message.event === "hello") return;
    const [kind, action] = message.event.split(".");
    fire("live-any", message);
    fire(`live-${kind}`, message);
    if (action) fire(`live-${kind}-${action}`, message);
  });
})();
