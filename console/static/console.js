// The kcoord console's few scripts: filter and sort tables in place, draw the charts.
"use strict";

function parseChartData() {
  const node = document.getElementById("chart-data");
  return node ? JSON.parse(node.textContent) : null;
}

function timeLabel(ms) {
  const d = new Date(ms);
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z").slice(5);
}

const PALETTE = ["#2456c8", "#d92d20", "#079455", "#dc6803", "#7a5af8", "#0e9384", "#c11574", "#475467"];

function lineChart(id, datasets, yTitle) {
  const canvas = document.getElementById(id);
  if (!canvas || typeof Chart === "undefined") return null;
  return new Chart(canvas, {
    type: "line",
    data: { datasets: datasets.map((d, i) => Object.assign({
      borderColor: PALETTE[i % PALETTE.length], backgroundColor: PALETTE[i % PALETTE.length],
      pointRadius: 2, borderWidth: 1.5, tension: 0, parsing: false }, d)) },
    options: {
      animation: false, maintainAspectRatio: false, normalized: true,
      scales: {
        x: { type: "linear", ticks: { callback: timeLabel, maxTicksLimit: 6 } },
        y: { beginAtZero: true, title: { display: !!yTitle, text: yTitle } },
      },
      plugins: { legend: { display: datasets.length <= 12 },
                 tooltip: { callbacks: { title: (items) => items.length ? timeLabel(items[0].parsed.x) : "" } } },
    },
  });
}

function barChart(id, points, label) {
  const canvas = document.getElementById(id);
  if (!canvas || typeof Chart === "undefined") return null;
  return new Chart(canvas, {
    type: "bar",
    data: { labels: points.map((p) => timeLabel(p[0])),
            datasets: [{ label: label, data: points.map((p) => p[1]), backgroundColor: PALETTE[0] }] },
    options: { animation: false, maintainAspectRatio: false, scales: { y: { beginAtZero: true } },
               plugins: { legend: { display: false } } },
  });
}

function drawCharts() {
  const data = parseChartData();
  if (!data) return;
  if (data.series) {
    lineChart("history-chart", data.series.map((s) => ({
      label: s.label, data: s.points.map((p) => ({ x: p[0], y: p[1] })) })), "committed offset");
    lineChart("lag-chart", data.series.map((s) => ({
      label: s.label, data: s.points.filter((p) => p[2] !== null).map((p) => ({ x: p[0], y: p[2] })) })), "lag");
    barChart("group-rate-chart", data.rate, "commits");
  }
  if (data.rate && document.getElementById("commit-rate-chart")) {
    lineChart("commit-rate-chart", [{ label: "commits/s", data: data.rate.map((p) => ({ x: p[0], y: p[1] })),
                                      fill: true, pointRadius: 0 }], "commits/s");
  }
}

function enhanceTable(table) {
  const filter = document.getElementById("group-filter");
  const body = table.tBodies[0];
  const rows = Array.from(body.rows).filter((r) => !r.classList.contains("empty"));
  if (filter) {
    filter.addEventListener("input", () => {
      const needle = filter.value.trim().toLowerCase();
      for (const row of rows) row.hidden = needle !== "" && !row.dataset.group.toLowerCase().includes(needle);
    });
  }
  table.querySelectorAll("th[data-sort]").forEach((th, index) => {
    th.addEventListener("click", (event) => {
      event.preventDefault();
      const numeric = th.dataset.numeric === "1";
      const descending = th.getAttribute("aria-sort") === "ascending";
      table.querySelectorAll("th[data-sort]").forEach((other) => other.removeAttribute("aria-sort"));
      th.setAttribute("aria-sort", descending ? "descending" : "ascending");
      const value = (row) => {
        const text = row.cells[index].dataset.value;
        return numeric ? Number(text) : text.toLowerCase();
      };
      rows.sort((a, b) => {
        const x = value(a), y = value(b);
        const order = x < y ? -1 : x > y ? 1 : 0;
        return descending ? -order : order;
      });
      for (const row of rows) body.appendChild(row);
    });
  });
}

document.addEventListener("DOMContentLoaded", () => {
  drawCharts();
  document.querySelectorAll("table.sortable").forEach(enhanceTable);
});
