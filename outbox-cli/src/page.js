// The outbox page: reads the JSON API of `outbox serve` and, started with --write, presses its
// verbs. The session cookie goes with every request on its own; a POST also carries the page's
// CSRF value and the revision of the record as the page showed it.
"use strict";

const csrf = document.querySelector('meta[name="outbox-csrf"]').content;
const writable = document.querySelector('meta[name="outbox-write"]').content === "true";
const view = { state: "", group: "", after: "", next: null };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key.startsWith("data-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(child ?? ""));
  }
  return node;
}

function span(s) {
  return s < 60 ? s + "s" : s < 3600 ? Math.floor(s / 60) + "m" : s < 86400 ? Math.floor(s / 3600) + "h" : Math.floor(s / 86400) + "d";
}

function ago(ms) {
  const delta = Math.round((ms - Date.now()) / 1000);
  return Math.abs(delta) < 1 ? "now" : delta > 0 ? "in " + span(delta) : span(-delta) + " ago";
}

// A local time, short: the time of day for today, else the date too; then "in 3m" / "3m ago".
function when(ms) {
  if (ms === null || ms === undefined) return "-";
  const d = new Date(ms);
  const two = (n) => String(n).padStart(2, "0");
  const time = two(d.getHours()) + ":" + two(d.getMinutes()) + ":" + two(d.getSeconds());
  const today = d.toDateString() === new Date().toDateString();
  const date = d.getFullYear() + "-" + two(d.getMonth() + 1) + "-" + two(d.getDate());
  return (today ? time : date + " " + time) + " (" + ago(ms) + ")";
}

function say(text, bad) {
  const status = document.getElementById("status");
  status.textContent = text;
  status.className = bad ? "bad" : "";
}

async function getJson(path) {
  const response = await fetch(path, { headers: { "Accept": "application/json" } });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

async function loadStats() {
  const s = await getJson("/api/stats");
  const counts = document.getElementById("counts");
  counts.replaceChildren();
  const names = [["pending", s.counts.pending], ["retrying", s.counts.retrying],
    ["in-flight", s.counts.in_flight], ["needs-attention", s.counts.needs_attention],
    ["rejected", s.counts.rejected], ["discarded", s.counts.discarded]];
  for (const [name, count] of names) {
    const button = el("button", { type: "button", className: view.state === name ? "active" : "" },
      el("b", {}, String(count)), name);
    button.dataset.count = name;
    button.addEventListener("click", () => setFilter(view.state === name ? "" : name, view.group));
    counts.append(button);
  }
  counts.append(el("span", {}, el("b", {}, String(s.counts.delivered)), " delivered, ",
    String(s.held), " held back"));
  const facts = document.getElementById("facts");
  facts.replaceChildren(
    "oldest undelivered: " + when(s.oldest_created_at) + " · next due: " + when(s.next_due) + " · ",
    s.halt ? el("span", { className: "halted" }, "runner HALTED since " + when(s.halt.since) + ": " + s.halt.reason)
           : "runner not halted",
    ...(s.halt && writable ? [" ", resumeButton(s.halt)] : []));
}

// Lifts the halt as shown, after asking; the server leaves a halt that changed meanwhile.
function resumeButton(halt) {
  const button = el("button", { type: "button", id: "resume" }, "resume");
  button.addEventListener("click", () => {
    const dialog = document.getElementById("resume-confirm");
    document.getElementById("resume-question").textContent =
      "Lift the halt since " + when(halt.since) + " (" + halt.reason + ")? Every runner of this outbox resumes " +
      "when it reads that; a refused credential refuses again until it is fixed.";
    dialog.pending = halt;
    dialog.showModal();
  });
  return button;
}

document.getElementById("resume-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const dialog = document.getElementById("resume-confirm");
  const halt = dialog.pending;
  dialog.close();
  try {
    const response = await fetch("/api/halt/resume", {
      method: "POST",
      headers: { "X-Outbox-Csrf": csrf, "Content-Type": "application/json" },
      body: JSON.stringify({ seen: { reason: halt.reason, since: halt.since } }),
    });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error || response.statusText);
    await refresh();
    say(answer.message, false);
  } catch (err) {
    say(err.message, true);
    await refresh();
  }
});
document.getElementById("resume-no").addEventListener("click", () => {
  document.getElementById("resume-confirm").close();
  say("resume cancelled; nothing changed", false);
});

function actions(record) {
  const buttons = [];
  if (!writable) return buttons;
  // A row that cannot be read is discarded with `outbox discard` (it has no revision to show).
  if (["discarded", "in-flight", "unreadable"].includes(record.state)) return buttons;
  if (record.state === "rejected") buttons.push("requeue"); else buttons.push("retry");
  buttons.push("discard");
  return buttons.map((action) => {
    const button = el("button", { type: "button" }, action);
    button.dataset.action = action;
    button.dataset.id = String(record.id);
    button.addEventListener("click", (event) => {
      event.stopPropagation();
      if (action === "discard") askDiscard(record); else act(record, action, null);
    });
    return button;
  });
}

async function loadList() {
  const query = new URLSearchParams({ state: view.state, group: view.group, after: view.after, limit: "50" });
  const page = await getJson("/api/records?" + query);
  view.next = page.next_after;
  const tombstones = view.state === "discarded";
  const unreadable = view.state === "unreadable";
  const head = tombstones ? ["id", "group", "discarded", "attempts", "reason"]
    : unreadable ? ["id", "cannot be read"]
    : ["id", "group", "state", "a/u/i", "next attempt", "age", "last error", ""];
  document.getElementById("head").replaceChildren(el("tr", {}, ...head.map((h) => el("th", {}, h))));
  const rows = document.getElementById("rows");
  rows.replaceChildren();
  for (const r of page.records) {
    const cells = tombstones
      ? [r.id, r.group ?? "-", when(r.discarded_at), r.attempts, r.reason]
      : unreadable ? [r.id, r.reason]
      : [r.id, r.group ?? "-", el("span", { className: "state-" + r.state }, r.state),
         r.attempts + "/" + r.unanswered + "/" + r.interrupted,
         r.lease_until !== null ? "lease ends " + when(r.lease_until) : when(r.next_attempt_at),
         el("span", { title: new Date(r.created_at).toLocaleString() }, span(Math.max(0, Math.round((Date.now() - r.created_at) / 1000)))),
         el("span", { title: r.last_error ?? "" }, r.last_error ?? "-"),
         el("span", {}, ...actions(r))];
    const tr = el("tr", { className: "row" }, ...cells.map((c, i) =>
      el("td", { className: (!tombstones && !unreadable && i === 6) || (unreadable && i === 1) ? "error" : "" },
        c instanceof Node ? c : String(c))));
    tr.dataset.record = String(r.id);
    tr.addEventListener("click", () => showDetail(r.id));
    rows.append(tr);
  }
  if (page.records.length === 0) rows.append(el("tr", {}, el("td", { colSpan: head.length }, "no records match")));
  document.getElementById("next").disabled = page.next_after === null;
  document.getElementById("first").disabled = view.after === "";
}

// The record's last attempts, oldest first: when each ended, its class, the status, how long
// the sink took and the error (as text, never as markup).
function history(r) {
  if (r.history_unreadable) return el("p", { className: "attempts" }, "history: unreadable (damaged on disk; the next attempt starts a new one)");
  if (!r.history || r.history.length === 0) return el("p", { className: "attempts" }, "history: no attempts yet");
  const table = el("table", { className: "attempts" },
    el("caption", {}, "last " + r.history.length + " attempts, oldest first"),
    el("tr", {}, ...["#", "ended", "class", "status", "took", "error"].map((h) => el("th", {}, h))));
  r.history.forEach((a, i) => {
    table.append(el("tr", {},
      el("td", {}, String(i + 1)),
      el("td", {}, when(a.at)),
      el("td", {}, a.class),
      el("td", {}, a.status === null ? "-" : String(a.status)),
      el("td", {}, a.took_ms === null ? "-" : a.took_ms + " ms"),
      el("td", {}, a.error)));
  });
  return table;
}

async function showDetail(id) {
  const detail = document.getElementById("detail");
  try {
    const r = await getJson("/api/records/" + id);
    const fields = Object.entries(r).filter(([key]) => !["payload", "history", "history_unreadable"].includes(key));
    const dl = el("dl", {});
    for (const [key, value] of fields) {
      const text = key.endsWith("_at") || key === "lease_until" ? when(value) : value ?? "-";
      dl.append(el("dt", {}, key), el("dd", {}, String(text)));
    }
    let payload = r.payload ?? "";
    if (r.payload_encoding === "utf-8") {
      try { payload = JSON.stringify(JSON.parse(payload), null, 2); } catch (_) { /* plain text */ }
    }
    if (r.state === "unreadable") {
      detail.replaceChildren(el("h2", {}, "record #" + r.id), dl, el("p", {},
        "Set aside: no runner delivers it, and its group's later records wait behind it. "
        + "`outbox discard TARGET " + r.id + " --reason ...` removes it, keeping a tombstone."));
    } else {
      detail.replaceChildren(el("h2", {}, "record #" + r.id), dl, ...actions(r), history(r),
        r.state === "discarded" ? "" : el("pre", {}, payload));
    }
    detail.hidden = false;
  } catch (err) {
    say(err.message, true);
  }
}

// A discard deletes the payload: ask for the reason and a confirmation first.
function askDiscard(record) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-question").textContent =
    "Discard #" + record.id + "? It leaves delivery for good and its payload is deleted; a tombstone keeps the reason.";
  const reason = document.getElementById("confirm-reason");
  reason.value = "";
  document.getElementById("confirm-problem").textContent = "";
  dialog.dataset.id = String(record.id);
  dialog.pending = record;
  dialog.showModal();
  reason.focus();
}

document.getElementById("confirm-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const dialog = document.getElementById("confirm");
  const reason = document.getElementById("confirm-reason").value.trim();
  if (reason === "") {
    document.getElementById("confirm-problem").textContent = "Say why: a discard needs a reason.";
    return;
  }
  const record = dialog.pending;
  dialog.close();
  act(record, "discard", reason);
});
document.getElementById("confirm-no").addEventListener("click", () => {
  const dialog = document.getElementById("confirm");
  dialog.close();
  say("discard of #" + dialog.dataset.id + " cancelled; nothing changed", false);
});

async function act(record, action, reason) {
  const body = { seen: record.revision };
  if (reason !== null) body.reason = reason;
  try {
    const response = await fetch("/api/records/" + record.id + "/" + action, {
      method: "POST",
      headers: { "X-Outbox-Csrf": csrf, "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error || response.statusText);
    await refresh();
    if (action !== "discard") await showDetail(answer.id); else document.getElementById("detail").hidden = true;
    say(answer.message, false);
  } catch (err) {
    say(err.message, true);
    await refresh();
  }
}

function setFilter(state, group) {
  view.state = state;
  view.group = group;
  view.after = "";
  const form = document.getElementById("filter");
  form.state.value = state;
  form.group.value = group;
  refresh();
}

async function refresh() {
  try {
    await Promise.all([loadStats(), loadList()]);
  } catch (err) {
    say(err.message, true);
  }
}

document.getElementById("filter").addEventListener("submit", (event) => {
  event.preventDefault();
  setFilter(event.target.state.value, event.target.group.value.trim());
});
document.getElementById("next").addEventListener("click", () => {
  if (view.next !== null) { view.after = String(view.next); refresh(); }
});
document.getElementById("first").addEventListener("click", () => { view.after = ""; refresh(); });
document.getElementById("mode").textContent = writable
  ? "Repairs change a record only if it is still as shown here; each is logged with your user name."
  : "Read-only: start `outbox serve --write` for the retry, requeue, discard and resume buttons.";
refresh();
