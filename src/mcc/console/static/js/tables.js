// The console's tables: ranked threats, weapons, engagements, system health and the queue.

import { bytes, classShort, clock, el, identityCell, num, pill, syncRows, threatColour } from "./format.js";

function showEmpty(id, empty) {
  document.getElementById(id).classList.toggle("show", empty);
}

export function renderThreats(threats, selected) {
  const tbody = document.querySelector("#threats tbody");
  syncRows(
    tbody,
    threats,
    (t) => t.track_id,
    (t) => JSON.stringify([t.rank, t.score, t.tti_s, t.cpa_m, t.asset, t.witnesses, t.weapon, t.order_status, t.cls, t.identity, t.track_id === selected]),
    (t) => {
      const level = t.score >= 0.6 ? "r-high" : t.score >= 0.3 ? "r-med" : "r-low";
      const bar = el("span", { class: "bar" }, el("i", { style: { width: `${Math.round(t.score * 100)}%`, background: threatColour(t.score) } }));
      return el(
        "tr",
        { class: t.track_id === selected ? "selected" : "", dataset: { track: t.track_id } },
        el("td", {}, el("span", { class: `rank ${level}` }, t.rank)),
        el("td", { class: "mono" }, t.track_id),
        el("td", {}, identityCell(t.identity)),
        el("td", { title: t.cls.replace("_", " ") }, classShort(t.cls)),
        el("td", {}, el("span", { class: "score" }, bar, num(t.score, 2))),
        el("td", { class: "num" }, t.tti_s === null ? "never" : num(t.tti_s, 1)),
        el("td", { class: "num" }, num(t.cpa_m)),
        el("td", {}, t.asset || "–"),
        witnessCell(t.witnesses),
        el("td", {}, t.weapon ? el("span", { class: `assigned ${t.order_status}`, title: t.order_status.replace("_", " ") }, t.weapon) : "–"),
      );
    },
  );
  document.getElementById("threat-count").textContent = `${threats.length}`;
  showEmpty("threats-empty", threats.length === 0);
}

// How many radars see a threat: one alone is not engaged without an operator's approval.
function witnessCell(witnesses) {
  if (!witnesses) return el("td", { class: "num", title: "not known" }, "–");
  if (witnesses < 2) {
    return el("td", { class: "num lone", title: "one radar only: not engaged without approval" }, witnesses);
  }
  return el("td", { class: "num", title: `${witnesses} radars see it` }, witnesses);
}

export function renderWeapons(weapons) {
  const tbody = document.querySelector("#weapons tbody");
  syncRows(
    tbody,
    weapons,
    (w) => w.id,
    (w) => JSON.stringify([w.state, w.rounds_ready, w.rounds_total, w.track, w.max_range_m, w.age_ms > 5000]),
    (w) => {
      const marks = el("span", { class: "rounds" });
      for (let i = 0; i < Math.min(w.rounds_total, 12); i++) {
        marks.append(el("i", { class: i < w.rounds_ready ? "full" : "" }));
      }
      return el(
        "tr",
        { class: w.age_ms > 5000 ? "stale" : "" },
        el("td", { class: "mono" }, w.id),
        el("td", {}, pill(w.age_ms > 5000 ? "silent" : w.state)),
        el("td", {}, marks, ` ${w.rounds_ready}/${w.rounds_total}`),
        el("td", { class: "mono" }, w.track || "–"),
        el("td", { class: "num" }, `${num(w.min_range_m / 1000, 1)}–${num(w.max_range_m / 1000, 0)}`),
      );
    },
  );
  document.getElementById("weapon-count").textContent = `${weapons.length}`;
  showEmpty("weapons-empty", weapons.length === 0);
}

/** Engagements, newest first; proposed orders get Approve/Reject (commanders only). */
export function renderOrders(orders, { onDecide }) {
  const tbody = document.querySelector("#orders tbody");
  syncRows(
    tbody,
    orders,
    (o) => o.id,
    (o) => JSON.stringify([o.status, o.latency_ms, o.pk, o.issue_ms]),
    (o) => {
      const status = el("td", {}, pill(o.status));
      if (o.status === "proposed") {
        status.append(
          el(
            "span",
            { class: "actions" },
            el("button", { class: "btn tiny ok", type: "button", "data-action": "approve", onclick: () => onDecide("approve", o) }, "Approve"),
            el("button", { class: "btn tiny danger", type: "button", "data-action": "reject", onclick: () => onDecide("reject", o) }, "Reject"),
          ),
        );
      }
      return el(
        "tr",
        { dataset: { order: o.id, status: o.status } },
        el("td", { class: "mono" }, o.id),
        el("td", { class: "mono" }, o.weapon),
        el("td", { class: "mono" }, o.track),
        el("td", { class: "num" }, num(o.pk, 2)),
        status,
        el("td", { class: "num" }, num(o.latency_ms, 0)),
        el("td", { class: "mono" }, clock(o.issue_ms)),
      );
    },
  );
  const proposed = orders.filter((o) => o.status === "proposed").length;
  const badge = document.getElementById("approval-count");
  badge.hidden = proposed === 0;
  badge.textContent = `${proposed} awaiting approval`;
  document.getElementById("order-count").textContent = `${orders.length}`;
  showEmpty("orders-empty", orders.length === 0);
}

export function renderHealth(rows, queue) {
  const tbody = document.querySelector("#health tbody");
  const stale = (r) => r.beat_age_ms !== null && r.beat_age_ms > 3000 && r.state === "running";
  syncRows(
    tbody,
    rows,
    (r) => r.id,
    (r) => JSON.stringify(r),
    (r) => {
      const name = r.id.split("/").slice(1).join("/") || r.id;
      return el(
        "tr",
        { dataset: { id: r.id, state: r.state }, title: r.reason || r.message || "" },
        el("td", { class: "mono" }, name),
        el("td", {}, pill(stale(r) ? "silent" : r.state)),
        el("td", { title: r.host || "" }, (r.host || "–").slice(0, 10)),
        el("td", { class: "num" }, r.pid || "–"),
        el("td", { class: "num" }, num(r.cpu_percent, 0)),
        el("td", { class: "num" }, bytes(r.rss_bytes)),
        el("td", { class: "num" }, num(r.msgs_in_per_s, 1)),
        el("td", { class: "num" }, num(r.msgs_out_per_s, 1)),
        el("td", { class: "num" }, latency(r.latency_p50_us)),
        el("td", { class: "num" }, latency(r.latency_p99_us)),
        el("td", { class: "num" }, r.beat_age_ms === null || r.beat_age_ms === undefined ? "–" : (r.beat_age_ms / 1000).toFixed(1)),
        el("td", { class: "num" }, r.restarts ?? 0),
      );
    },
  );
  document.getElementById("health-count").textContent =
    `${rows.filter((r) => r.state === "running").length}/${rows.length} running`;
  showEmpty("health-empty", rows.length === 0);
  const box = document.getElementById("queue");
  box.replaceChildren(
    ...queue.map((q) => el("span", { class: "chip", title: q.reason }, `${q.id.split("/").slice(1).join("/")}: ${q.reason || "pending"}`)),
  );
}

function latency(us) {
  if (us === null || us === undefined || us === 0) return "–";
  return (us / 1000).toFixed(us < 10000 ? 2 : 1);
}
