// A model job's page: the profile chart (one horizontal bar per op group, time per forward
// step; data from json_script "model-profile"; plotly is vendored, no CDN), and a reload when
// the model run moves on (profiled -> tasks appear, verified -> the end-to-end result).
(function () {
  "use strict";
  const run = document.getElementById("model-run");
  if (run && !["done", "failed"].includes(run.dataset.status)) {
    const rows = document.querySelectorAll("tr[data-task]").length;
    const poll = function () {
      fetch(window.location.href, { credentials: "same-origin" })
        .then((r) => r.text())
        .then((html) => {
          const status = (html.match(/id="model-run" data-status="([a-z]+)"/) || [])[1];
          const tasks = (html.match(/<tr data-task=/g) || []).length;
          if ((status && status !== run.dataset.status) || tasks !== rows) window.location.reload();
          else window.setTimeout(poll, 4000);
        })
        .catch(() => window.setTimeout(poll, 8000));
    };
    window.setTimeout(poll, 4000);
  }
  const data = document.getElementById("model-profile");
  const chart = document.getElementById("profile-chart");
  if (!data || !chart || !window.Plotly) return;
  const profile = JSON.parse(data.textContent);
  const groups = (profile.groups || []).slice(0, 25).reverse(); // largest at the top
  const unit = profile.device === "cuda" ? "GPU µs per step" : "CPU µs per step (not GPU time)";
  const trace = {
    type: "bar",
    orientation: "h",
    x: groups.map((g) => g.time_us),
    y: groups.map((g) => g.label),
    text: groups.map((g) => (100 * g.share).toFixed(1) + " %"),
    textposition: "auto",
    marker: { color: groups.map((g) => (g.problem ? "#2f6fdf" : "#9aa3ad")) },
    hovertemplate: "%{y}<br>%{x:.1f} µs (%{text})<extra></extra>",
  };
  window.Plotly.newPlot(
    chart,
    [trace],
    {
      margin: { l: 320, r: 20, t: 10, b: 40 },
      xaxis: { title: { text: unit } },
      yaxis: { automargin: true },
      showlegend: false,
    },
    { displayModeBar: false, responsive: true }
  );
})();

// The end-to-end chart: every way the model ran, PyTorch alone (grey) and with the kernels
// (blue), median forward time; data from json_script "model-end-to-end".
(function () {
  "use strict";
  const data = document.getElementById("model-end-to-end");
  const chart = document.getElementById("end-to-end-chart");
  if (!data || !chart || !window.Plotly) return;
  const e2e = JSON.parse(data.textContent);
  const trace = {
    type: "bar",
    orientation: "h",
    x: e2e.us.slice().reverse(),
    y: e2e.labels.slice().reverse(),
    marker: { color: e2e.side.slice().reverse().map((s) => (s === "ours" ? "#2f6fdf" : "#9aa3ad")) },
    hovertemplate: "%{y}<br>%{x:.1f} µs<extra></extra>",
  };
  window.Plotly.newPlot(
    chart,
    [trace],
    {
      margin: { l: 320, r: 20, t: 10, b: 40 },
      xaxis: { title: { text: e2e.unit } },
      yaxis: { automargin: true },
      showlegend: false,
    },
    { displayModeBar: false, responsive: true }
  );
})();

// Where one forward's GPU time goes: the best baseline and the best way with the kernels, one
// stacked bar each, a segment per kernel; data from json_script "model-kernel-split".
(function () {
  "use strict";
  const data = document.getElementById("model-kernel-split");
  const chart = document.getElementById("kernel-split-chart");
  if (!data || !chart || !window.Plotly) return;
  const split = JSON.parse(data.textContent);
  // Up to 17 segments: twenty distinct colours (d3's category20), the rest in grey.
  const colours = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22",
    "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2",
    "#dbdb8d", "#9edae5", "#393b79", "#637939",
  ];
  const last = split.segments.length - 1;
  const traces = split.segments.map((s, i) => ({
    type: "bar",
    orientation: "h",
    name: s.label,
    marker: { color: i === last ? "#9aa3ad" : colours[i % colours.length] },
    x: s.us.slice().reverse(),
    y: split.ways.slice().reverse(),
    customdata: [s.name, s.name],
    hovertemplate: "%{customdata}<br>%{x:.1f} µs<extra>%{y}</extra>",
  }));
  window.Plotly.newPlot(
    chart,
    traces,
    {
      barmode: "stack",
      margin: { l: 320, r: 20, t: 10, b: 40 },
      xaxis: { title: { text: "GPU µs per forward" } },
      yaxis: { automargin: true },
      legend: { orientation: "h", y: -0.3, font: { size: 10 } },
    },
    { displayModeBar: false, responsive: true }
  );
})();
