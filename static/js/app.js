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

// A form with data-confirm (removing a member, leaving an organization) asks before it is sent.
document.addEventListener("submit", (event) => {
  const message = event.target.dataset ? event.target.dataset.confirm : undefined;
  if (message && !window.confirm(message)) event.preventDefault();
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

// Dialogs: a link with hx-target="#dialog-body" loads a form into the page's <dialog>, which
// opens modally; the response header HX-Trigger-After-Settle: {"close-dialog": …} closes it and
// focus returns to the control that opened it, found by id because a live update may have
// re-rendered it meanwhile (htmx keeps focus on an element with an id across swaps too).
// Without JavaScript the same links open a full page.
(() => {
  let openerId = null;
  const dialog = () => document.getElementById("dialog");
  const close = () => {
    const d = dialog();
    if (d && d.open) d.close();
  };
  document.addEventListener("htmx:beforeRequest", (event) => {
    const target = event.detail.target;
    if (target && target.id === "dialog-body") openerId = event.detail.elt.id || null;
  });
  document.addEventListener("htmx:afterSwap", (event) => {
    const d = dialog();
    if (!d || event.detail.target.id !== "dialog-body") return;
    if (!d.open) d.showModal();
    const invalid = d.querySelector("[role=alert]");
    const scope = invalid ? invalid.closest("fieldset, .field, form") || d : d;
    scope.querySelector("input:not([type=hidden]), textarea, select")?.focus();
  });
  document.addEventListener("close", (event) => {
    if (event.target !== dialog()) return;
    document.getElementById("dialog-body").innerHTML = "";
    if (openerId) document.getElementById(openerId)?.focus();
    openerId = null;
  }, true);
  document.addEventListener("click", (event) => {
    if (event.target.closest("[data-close-dialog]")) close();
  });
  document.body.addEventListener("close-dialog", close);

  let hideTimer = null;
  document.body.addEventListener("toast", (event) => {
    const toast = document.getElementById("toast");
    if (!toast) return;
    toast.textContent = event.detail.value;
    toast.dataset.shown = "";
    clearTimeout(hideTimer);
    hideTimer = setTimeout(() => { delete toast.dataset.shown; }, 4000);
  });
})();

// A control that goes away with its own request (e.g. "Confirm all") names where focus goes
// next with data-focus-after, so keyboard and screen-reader users are not dropped on <body>.
(() => {
  let next = null;
  document.addEventListener("htmx:beforeRequest", (event) => {
    const selector = event.detail.elt?.dataset?.focusAfter;
    if (selector) next = selector;
  });
  document.addEventListener("htmx:afterSettle", () => {
    if (!next) return;
    const target = document.querySelector(next);
    next = null;
    if (!target) return;
    if (!target.hasAttribute("tabindex")) target.setAttribute("tabindex", "-1");
    target.focus();
  });
})();
