// The job page's chart: every attempt over time (kept, reverted, failed, cheat) and each
// problem's best-so-far speedup. Fed by static/js/job_live.js, which batches websocket events
// per animation frame and sends each batch as one "kf:iterations" event; one extendTraces
// call per batch keeps 20 events per second smooth. Also keeps the budget and hypothesis current.
(function () {
  "use strict";
  const el = document.getElementById("speedup-chart");
  if (!el || !window.Plotly) return;
  const categories = [
    { key: "kept", name: "kept", color: "#1d7a46", symbol: "circle" },
    { key: "reverted", name: "reverted", color: "#8a93a0", symbol: "circle-open" },
    { key: "failed", name: "failed", color: "#b42318", symbol: "x" },
    { key: "cheat", name: "cheat", color: "#9a2fbf", symbol: "diamond" },
    { key: "baseline", name: "baseline", color: "#5a3cb0", symbol: "square" },
  ];
  const failed = new Set(["compile_failed", "incorrect", "timeout", "crash", "error"]);
  const bestTraces = {}; // problem -> trace index
  const gpuBudget = Number(el.dataset.gpuBudget) || 0;
  const llmBudget = Number(el.dataset.llmBudget) || 0;
  let gpuUsed = 0;
  let llmUsed = 0;
  let latest = 0;

  const traces = categories.map((c) => ({
    x: [], y: [], text: [], customdata: [], mode: "markers", type: "scatter", name: c.name,
    marker: { color: c.color, symbol: c.symbol, size: 8, line: { width: 1.5, color: c.color } },
    hovertemplate: "#%{customdata}: %{text}<br>%{y:.3g}×<extra>" + c.name + "</extra>",
  }));
  // Until the first attempt there is nothing to scale axes to (plotly would draw Jan-Nov 2000
  // and 0-4): the chart says what it waits for instead.
  let empty = true;
  let interpreter = false;
  const note = (text) => [{ text: text, showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5,
                            font: { size: 14, color: "#5b6470" } }];
  const wide = window.matchMedia("(min-width: 701px)").matches;
  Plotly.newPlot(el, traces, {
    margin: { l: 50, r: 10, t: 10, b: 40 },
    xaxis: { type: "date", title: { text: wide ? "time" : "" }, visible: false },
    // exponentformat none: interpreter ratios (~0.0005) read as numbers, not "500μ".
    yaxis: { title: { text: "× vs torch" }, rangemode: "tozero", exponentformat: "none", visible: false },
    annotations: note(el.dataset.emptyText || ""),
    // On a phone the legend would take half the chart: a static key below replaces it.
    showlegend: wide,
    legend: { orientation: "h", y: -0.25 },
    hovermode: "closest",
    font: { family: "system-ui, sans-serif", size: 12, color: "#1b1f24" },
  }, { responsive: true, displaylogo: false });

  function category(verdict) {
    if (failed.has(verdict)) return "failed";
    return categories.some((c) => c.key === verdict) ? verdict : "reverted";
  }

  function addBatch(items) {
    const layout = {};
    if (empty) Object.assign(layout, { "xaxis.visible": true, "yaxis.visible": true, annotations: [] });
    if (!interpreter && items.some((it) => it.interpreter)) {
      interpreter = true;
      layout["yaxis.title.text"] = wide ? "× vs torch (CPU interpreter)" : "× (interpreter)";
    }
    empty = false;
    if (Object.keys(layout).length) Plotly.relayout(el, layout);
    const per = categories.map(() => ({ x: [], y: [], text: [], customdata: [] }));
    const best = {};
    for (const it of items) {
      const i = categories.findIndex((c) => c.key === category(it.verdict));
      // Failed and cheating attempts have no valid timing: they sit on the zero line.
      per[i].x.push(it.at);
      per[i].y.push(it.speedup == null ? 0 : it.speedup);
      per[i].text.push(
        it.problem + " · " + it.verdict_label + (it.interpreter ? " · CPU interpreter timing" : ""));
      per[i].customdata.push(it.seq);
      if (it.best_speedup != null) {
        (best[it.problem] = best[it.problem] || { x: [], y: [] });
        best[it.problem].x.push(it.at);
        best[it.problem].y.push(it.best_speedup);
      }
      gpuUsed += it.gpu_s || 0;
      llmUsed += it.llm_cost_usd || 0;
      if (it.seq > latest && it.hypothesis) {
        latest = it.seq;
        const h = document.getElementById("current-hypothesis");
        if (h) h.textContent = it.hypothesis;
      }
    }
    const indexes = [];
    const update = { x: [], y: [], text: [], customdata: [] };
    per.forEach((p, i) => {
      if (!p.x.length) return;
      indexes.push(i);
      update.x.push(p.x); update.y.push(p.y); update.text.push(p.text); update.customdata.push(p.customdata);
    });
    if (indexes.length) Plotly.extendTraces(el, update, indexes);
    for (const problem of Object.keys(best)) {
      if (!(problem in bestTraces)) {
        Plotly.addTraces(el, {
          x: [], y: [], mode: "lines", line: { shape: "hv", width: 2 }, name: "best: " + problem,
          hovertemplate: "best %{y:.3g}×<extra>" + problem + "</extra>",
        });
        bestTraces[problem] = el.data.length - 1;
      }
      Plotly.extendTraces(el, { x: [best[problem].x], y: [best[problem].y] }, [bestTraces[problem]]);
    }
    setBudget("gpu", gpuUsed, gpuBudget, (v) => (v / 60).toFixed(1) + " min");
    setBudget("llm", llmUsed, llmBudget, (v) => "$" + v.toFixed(2));
  }

  function setBudget(which, used, budget, fmt) {
    const bar = document.getElementById(which + "-meter");
    const label = document.getElementById(which + "-used");
    if (!bar || !label) return;
    bar.value = Math.min(used, budget || used);
    label.textContent = fmt(used);
  }

  // Points go to the chart; clicking one opens that iteration.
  el.on("plotly_click", function (ev) {
    const p = ev.points && ev.points[0];
    if (p && p.customdata != null && el.dataset.iterationUrl) {
      location.href = el.dataset.iterationUrl + p.customdata + "/";
    }
  });
  document.addEventListener("kf:iterations", (ev) => addBatch(ev.detail));
  document.addEventListener("kf:status", (ev) => {
    if (ev.detail.terminal && empty) Plotly.relayout(el, { annotations: note(el.dataset.endedText || "") });
  });
})();
