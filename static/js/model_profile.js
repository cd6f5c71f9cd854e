// The model job's profile: one horizontal bar per op group (time per forward step).
// Data comes from the page (json_script "model-profile"); plotly is vendored, no CDN.
(function () {
  "use strict";
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
