// The console page: the feed from the server drives the header, the air picture, the tables,
// the charts and the controls. `window.mcc` holds the latest state (for people debugging in
// the browser's console, and for the browser tests).

import { LineChart } from "./chart.js";
import { Controls } from "./controls.js";
import { el, num } from "./format.js";
import { Feed, post } from "./net.js";
import { PPI } from "./ppi.js";
import { renderHealth, renderOrders, renderThreats, renderWeapons } from "./tables.js";

const app = { user: null, role: null, layout: null, secured: null, state: null, clockOffsetMs: 0, updates: 0, link: "connecting" };
window.mcc = app;

function toast(text, kind = "") {
  const box = document.getElementById("toasts");
  const node = el("div", { class: `toast ${kind}`, role: "status" }, text);
  box.append(node);
  setTimeout(() => node.remove(), kind === "bad" ? 8000 : 4000);
}

const ppi = new PPI(document.getElementById("ppi"), {
  readout: document.getElementById("ppi-readout"),
  card: document.getElementById("track-card"),
});
app.ppi = ppi;
const latencyChart = new LineChart(document.getElementById("chart-latency"), {
  title: "Detection → engagement",
  unit: "ms",
  series: [
    { key: "picture_latency_ms", label: "air picture", colour: "#38bdf8", kind: "line" },
    { key: "det_to_order_ms", label: "det→order", colour: "#f59e0b", kind: "dots" },
  ],
});
const trackChart = new LineChart(document.getElementById("chart-tracks"), {
  title: "Track count",
  unit: "tracks",
  series: [{ key: "track_count", label: "tracks", colour: "#22d3ee", kind: "step" }],
});
const controls = new Controls({ toast });

for (const layer of ["coverage", "labels", "trails", "truth"]) {
  const box = document.getElementById(`layer-${layer}`);
  box.addEventListener("change", () => (ppi.layers[layer] = box.checked));
}
document.getElementById("zoom-in").addEventListener("click", () => ppi.zoom(1.4));
document.getElementById("zoom-out").addEventListener("click", () => ppi.zoom(1 / 1.4));
document.getElementById("zoom-fit").addEventListener("click", () => {
  ppi.userMoved = false;
  ppi.fit();
});
document.getElementById("logout").addEventListener("click", async () => {
  await post("/api/logout", {});
  location.replace("/login");
});
document.getElementById("threats").addEventListener("click", (e) => {
  const row = e.target.closest("tr[data-track]");
  if (row) ppi.select(Number(row.dataset.track));
});

function setLink(state) {
  app.link = state;
  const node = document.getElementById("link");
  node.dataset.state = state;
  node.className = `link ${state === "live" ? "live" : state === "stale" ? "stale" : "down"}`;
  node.textContent = state;
}

function renderHeader(s) {
  const m = s.mission;
  document.getElementById("mission-name").textContent = m ? m.name : app.layout?.mission || "no mission on the bus";
  const phase = document.getElementById("phase");
  phase.textContent = m ? m.phase : "—";
  const state = document.getElementById("mission-state");
  state.textContent = m ? m.state : "—";
  state.className = `badge ${m?.state === "running" ? "ok" : m?.state === "degraded" ? "bad" : "warn"}`;
  document.getElementById("kpi-tracks").textContent = s.stats.tracks;
  document.getElementById("kpi-threats").textContent = s.stats.threats;
  document.getElementById("kpi-engaging").textContent = s.interceptors.length;
  document.getElementById("kpi-kills").textContent = s.stats.kills;
  const ids = s.stats.identities || {};
  document.getElementById("kpi-friends").textContent = (ids.friend || 0) + (ids.assumed_friend || 0);
  const bad = document.getElementById("identity-errors");
  bad.hidden = !s.stats.identity_errors;
  bad.textContent = `${s.stats.identity_errors} identity values shown as ?`;
  const p50 = s.stats.det_to_order_p50_ms;
  document.getElementById("kpi-latency").textContent = p50 === null ? "–" : `${num(p50, 0)} ms`;
  const leftOut = Object.entries(s.left_out || {}).filter(([, n]) => n > 0);
  const note = document.getElementById("left-out");
  note.hidden = leftOut.length === 0;
  note.textContent = leftOut.map(([kind, n]) => `${n} ${kind} not shown`).join(" · ");
  note.title = "over the console's bounds: the most relevant are shown (docs/console.md)";
}

let chartsDrawnAt = 0;

const feed = new Feed({
  onHello(msg) {
    app.user = msg.user;
    app.role = msg.role;
    app.layout = msg.layout;
    app.secured = msg.secured;
    document.getElementById("bus-unsecured").hidden = msg.secured !== false;
    const who = document.getElementById("who");
    who.replaceChildren(el("b", {}, msg.user), ` · ${msg.role}`);
    controls.setRole(msg.role, msg.layout);
    ppi.setLayout(msg.layout);
  },
  onState(s) {
    app.state = s;
    app.updates += 1;
    app.clockOffsetMs = s.now_ms - Date.now();
    renderHeader(s);
    ppi.update(s, app.clockOffsetMs);
    renderThreats(s.threats, ppi.selected);
    renderWeapons(s.weapons);
    renderOrders(s.orders, { onDecide: (verb, order) => controls.decide(verb, order) });
    renderHealth(s.health, s.queue);
    controls.update(s);
    if (performance.now() - chartsDrawnAt > 250) {
      chartsDrawnAt = performance.now();
      latencyChart.set(s.series, s.now_ms);
      trackChart.set(s.series, s.now_ms);
    }
  },
  onLink: setLink,
});
feed.connect();

setInterval(() => {
  const now = new Date(Date.now() + app.clockOffsetMs);
  document.getElementById("clock").textContent = `${now.toISOString().slice(11, 19)}Z`;
  if (app.link === "live" && feed.silenceMs() > 3000) setLink("stale");
}, 500);
