// The live job page: a websocket that backfills from the database on every (re)connect.
// The database is the record: each iteration carries a per-job `seq`; we keep the rows we
// have by seq (dropping duplicates), ask for a backfill when we notice a gap, and reconnect
// with the last seq we saw after the connection drops.
(function () {
  "use strict";
  const table = document.getElementById("iterations");
  if (!table) return;
  const body = table.querySelector("tbody");
  const live = document.getElementById("live");
  const counter = document.getElementById("iteration-count");
  const empty = document.getElementById("no-iterations");
  const seen = new Map(); // seq -> row
  let lastSeq = 0; // highest contiguous seq we hold
  let socket = null;
  let retryMs = 500;
  let terminal = false;

  function setLive(state, text) {
    live.dataset.state = state;
    live.textContent = text;
  }

  function cell(text, cls) {
    const td = document.createElement("td");
    if (cls) td.className = cls;
    td.textContent = text;
    return td;
  }

  // A task's search, as templates/jobs/_task_search.html draws it: the outcome line, then a
  // per-family table (screened speedups against torch, verified ones against the fastest
  // baseline; "interp." for CPU-interpreter timings, which are no speedups).
  function speed(value, interpreter) {
    if (value == null) return "—";
    return interpreter ? "interp." : value.toFixed(2) + "×";
  }
  function drawSearch(td, s) {
    const open = td.querySelector("details[open]") !== null;
    td.replaceChildren();
    if (s.outcome) {
      const p = document.createElement("p");
      p.className = "outcome";
      p.dataset.role = "outcome";
      p.textContent = s.outcome;
      td.appendChild(p);
    }
    if (!s.families.length) return;
    const details = document.createElement("details");
    details.className = "families";
    details.open = open;
    const summary = document.createElement("summary");
    const n = s.families.length;
    summary.textContent = n + (n === 1 ? " family: " : " families: ") + s.screened + " screened, " + s.verified + " fully verified";
    details.appendChild(summary);
    const tbl = document.createElement("table");
    tbl.className = "families";
    const head = document.createElement("thead");
    const hr = document.createElement("tr");
    for (const [text, note] of [["Family", ""], ["Passed / screened", ""], ["Best screened ", "vs torch"], ["Best verified ", "vs fastest baseline"], ["Not passed ", "why"]]) {
      const th = document.createElement("th");
      th.scope = "col";
      if (text !== "Family" && text !== "Not passed ") th.className = "num";
      th.textContent = text;
      if (note) {
        const span = document.createElement("span");
        span.className = "muted";
        span.textContent = note;
        th.appendChild(span);
      }
      hr.appendChild(th);
    }
    head.appendChild(hr);
    tbl.appendChild(head);
    const rows = document.createElement("tbody");
    for (const f of s.families) {
      const tr = document.createElement("tr");
      const name = document.createElement("td");
      const code = document.createElement("code");
      code.textContent = f.family;
      name.appendChild(code);
      tr.appendChild(name);
      tr.appendChild(cell(f.passed + " / " + f.screened, "num"));
      tr.appendChild(cell(speed(f.best_screened, s.interpreter), "num"));
      const verified = speed(f.best_verified, s.interpreter);
      tr.appendChild(cell(f.best_verified != null && !s.interpreter ? verified + " " + f.verified_baseline : verified, "num"));
      tr.appendChild(cell(f.why_not || "—", "why-not"));
      rows.appendChild(tr);
    }
    tbl.appendChild(rows);
    const wrap = document.createElement("div");
    wrap.className = "table-wrap";
    wrap.appendChild(tbl);
    details.appendChild(wrap);
    td.appendChild(details);
  }

  const iterationUrl = table.dataset.iterationUrl; // ".../iterations/" (the dashboard's page)
  let maxSeq = 0;
  let pending = [];
  let frame = 0;

  // Events can arrive at tens per second; draw them once per animation frame, in one batch,
  // and tell the chart (static/js/job_chart.js) about the batch with one DOM event.
  const queued = new Set(); // seqs received but not drawn yet
  function queueIterations(items) {
    for (const it of items) {
      if (seen.has(it.seq) || queued.has(it.seq)) continue;
      queued.add(it.seq);
      pending.push(it);
    }
    while (seen.has(lastSeq + 1) || queued.has(lastSeq + 1)) lastSeq += 1;
    // Hidden tabs get no animation frames: draw on a timer there instead.
    if (!frame) frame = document.hidden ? setTimeout(flush, 250) : requestAnimationFrame(flush);
  }

  function flush() {
    frame = 0;
    const batch = pending.sort((a, b) => a.seq - b.seq);
    pending = [];
    queued.clear();
    const fresh = [];
    for (const it of batch) {
      if (seen.has(it.seq)) continue;
      addIteration(it);
      fresh.push(it);
    }
    if (fresh.length) document.dispatchEvent(new CustomEvent("kf:iterations", { detail: fresh }));
  }

  function addIteration(it) {
    if (seen.has(it.seq)) return; // already shown: a backfill and a live message overlapped
    const tr = document.createElement("tr");
    tr.dataset.seq = it.seq;
    if (iterationUrl) {
      const td = cell("", "num");
      const a = document.createElement("a");
      a.href = iterationUrl + it.seq + "/";
      a.textContent = it.seq;
      td.appendChild(a);
      tr.appendChild(td);
    } else {
      tr.appendChild(cell(it.seq, "num"));
    }
    const problem = cell("");
    const code = document.createElement("code");
    code.textContent = it.problem;
    problem.appendChild(code);
    tr.appendChild(problem);
    tr.appendChild(cell(it.index, "num"));
    const verdict = cell("");
    const badge = document.createElement("span");
    badge.className = "badge v-" + it.verdict;
    badge.textContent = it.verdict_label;
    verdict.appendChild(badge);
    tr.appendChild(verdict);
    const hyp = cell(it.hypothesis);
    const reason = document.createElement("div");
    reason.className = "muted small";
    reason.textContent = it.reason;
    hyp.appendChild(reason);
    tr.appendChild(hyp);
    const speed = cell(
      it.speedup == null ? "—" : it.interpreter ? "interp." : it.speedup.toFixed(2) + "×", "num");
    if (it.interpreter) {
      speed.title = "Timed under Triton's CPU interpreter: checks correctness, not speed";
    }
    tr.appendChild(speed);
    // Keep rows in seq order even when a backfill fills a gap behind newer rows (rare: the
    // common case appends, so thousands of rows stay cheap).
    let before = null;
    if (it.seq < maxSeq) {
      for (const [s, row] of seen) {
        if (s > it.seq && (before === null || s < Number(before.dataset.seq))) before = row;
      }
    }
    maxSeq = Math.max(maxSeq, it.seq);
    body.insertBefore(tr, before);
    seen.set(it.seq, tr);
    while (seen.has(lastSeq + 1)) lastSeq += 1;
    counter.textContent = seen.size;
    empty.hidden = true;
  }

  function applyStatus(status) {
    document.dispatchEvent(new CustomEvent("kf:status", { detail: status }));
    const badge = document.getElementById("job-status");
    badge.className = "badge s-" + status.status;
    badge.textContent = status.status_label;
    terminal = status.terminal;
    for (const t of status.tasks) {
      const row = document.querySelector('tr[data-task="' + t.id + '"]');
      if (!row) continue;
      const b = row.querySelector('[data-role="status"]');
      b.className = "badge s-" + t.status;
      b.textContent = t.status_label;
      row.querySelector('[data-role="note"]').textContent = t.note || "";
      const search = document.querySelector('tr[data-search-for="' + t.id + '"] [data-role="search"]');
      if (search && t.search) drawSearch(search, t.search);
    }
    const cancel = document.getElementById("cancel-form");
    if (cancel && (status.terminal || status.cancel_requested)) cancel.hidden = true;
    if (terminal) {
      // Nothing more will arrive: no live dot, and the words say the job has ended.
      setLive("done", "finished");
      const label = document.getElementById("hypothesis-label");
      if (label) label.textContent = "Last hypothesis:";
      if (!seen.size && !pending.length) empty.textContent = empty.dataset.endedText;
    }
    // We hold fewer events than the job has handed out: fetch the missing ones.
    if (status.last_seq > lastSeq) requestBackfill();
    pollWhileQueued(status);
  }

  // A queued task's place moves when other jobs' tasks end, which this job's socket does not
  // hear of: while one of its tasks waits, read the status again every 20 s.
  let pollTimer = 0;
  function pollWhileQueued(status) {
    clearTimeout(pollTimer);
    if (status.terminal || !status.tasks.some((t) => t.status === "queued")) return;
    pollTimer = setTimeout(function () {
      fetch(table.dataset.eventsUrl + "?after=" + lastSeq, { credentials: "same-origin" })
        .then((r) => (r.ok ? r.json() : null))
        .then((data) => {
          if (!data) return pollWhileQueued(status);
          queueIterations(data.iterations);
          applyStatus(data.status);
        })
        .catch(() => pollWhileQueued(status));
    }, 20000);
  }

  // A full backfill page: ask for the next one after its last row (rows not yet drawn).
  function requestMore(rows) {
    const last = rows.length ? rows[rows.length - 1].seq : lastSeq;
    if (socket && socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify({ type: "backfill", after: Math.max(last, lastSeq) }));
    }
  }

  let backfillAt = 0;
  function requestBackfill() {
    // One request covers every gap behind it; at 20 events/s do not ask again for each event.
    if (Date.now() - backfillAt < 1000) return;
    backfillAt = Date.now();
    if (socket && socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify({ type: "backfill", after: lastSeq }));
    }
  }

  function onMessage(event) {
    const msg = JSON.parse(event.data);
    if (msg.type === "iteration") {
      queueIterations([msg.iteration]);
      if (msg.iteration.seq > lastSeq) requestBackfill(); // a gap: something was dropped
    } else if (msg.type === "backfill") {
      queueIterations(msg.iterations);
      if (msg.more) requestMore(msg.iterations);
    } else if (msg.type === "status") {
      applyStatus(msg.status);
    }
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + table.dataset.wsPath + "?last_seq=" + lastSeq);
    socket.addEventListener("open", function () {
      retryMs = 500;
      if (!terminal) setLive("open", "live");
    });
    socket.addEventListener("message", onMessage);
    socket.addEventListener("close", function (event) {
      if (event.code === 4403) {
        setLive("closed", "no access");
        return;
      }
      if (terminal && event.wasClean) {
        setLive("done", "finished");
        return;
      }
      setLive("retry", "reconnecting…");
      setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 10000);
    });
  }

  // Exposed for tests and debugging: drop the connection as a network failure would.
  window.kfDropConnection = function () {
    if (socket) socket.close();
  };
  connect();
})();
