// The iteration page's roofline: log-log, the device's memory and compute roofs, and the
// candidate and its parent placed by arithmetic intensity (FLOP/byte) and achieved TFLOP/s.
(function () {
  "use strict";
  const el = document.getElementById("roofline");
  const data = document.getElementById("roofline-data");
  if (!el || !data || !window.Plotly) return;
  const r = JSON.parse(data.textContent);
  const ridge = (r.peak_tflops * 1000) / r.peak_gbps; // FLOP/byte where the roofs meet
  const ais = r.points.map((p) => p.ai);
  const lo = Math.min(ridge / 100, ...ais) / 2;
  const hi = Math.max(ridge * 10, ...ais) * 2;
  const roofX = [lo, ridge, hi];
  const roofY = [(lo * r.peak_gbps) / 1000, r.peak_tflops, r.peak_tflops];
  const colors = { candidate: "#2f5bd3", parent: "#8a93a0" };
  const traces = [
    { x: roofX, y: roofY, mode: "lines", name: "roof (" + r.device + ")", line: { color: "#1b1f24", width: 2 } },
  ].concat(
    r.points.map((p) => ({
      x: [p.ai], y: [p.tflops], mode: "markers+text", name: p.label, text: [p.label],
      textposition: p.label === "parent" ? "bottom center" : "top center", marker: { size: 12, color: colors[p.label] || "#b42318" },
      hovertemplate: p.label + ": %{y:.3g} TFLOP/s at %{x:.3g} FLOP/B<extra></extra>",
    }))
  );
  Plotly.newPlot(el, traces, {
    margin: { l: 60, r: 10, t: 10, b: 50 },
    xaxis: { type: "log", title: { text: "arithmetic intensity (FLOP/byte)" } },
    yaxis: { type: "log", title: { text: "TFLOP/s" } },
    showlegend: false,
    font: { family: "system-ui, sans-serif", size: 12, color: "#1b1f24" },
  }, { responsive: true, displaylogo: false });
})();
