// The commander's controls: phase, start/stop/restart, scale, engagement approval; and the
// recent actions of the audit log. Observers see the same page without them.

import { clock, el } from "./format.js";
import { getJson, post } from "./net.js";

export class Controls {
  constructor({ toast }) {
    this.toast = toast;
    this.role = "observer";
    this.layout = { phases: [], systems: [], clusters: [] };
    this.phaseSelect = document.getElementById("phase-select");
    this.systemSelect = document.getElementById("system-select");
    this.clusterSelect = document.getElementById("cluster-select");
    this.clusterSize = document.getElementById("cluster-size");
    this.clusters = {};
    this.busy = false;

    this.phaseTouched = false; // the select follows the mission's phase until it is used
    this.phaseSelect.addEventListener("change", () => (this.phaseTouched = true));
    document.getElementById("phase-form").addEventListener("submit", async (e) => {
      e.preventDefault();
      await this.send({ verb: "phase", target: this.phaseSelect.value });
      this.phaseTouched = false;
    });
    for (const id of ["system-start", "system-stop", "system-restart"]) {
      const button = document.getElementById(id);
      button.addEventListener("click", () =>
        this.send({ verb: button.dataset.verb, target: this.systemSelect.value }),
      );
    }
    document.getElementById("scale-form").addEventListener("submit", (e) => {
      e.preventDefault();
      this.send({ verb: "scale", target: this.clusterSelect.value, size: Number(this.clusterSize.value) });
    });
    this.clusterSelect.addEventListener("change", () => this.showClusterSize());
    this.refreshAudit();
    setInterval(() => this.refreshAudit(), 5000);
  }

  setRole(role, layout) {
    this.role = role;
    this.layout = layout || this.layout;
    document.body.classList.toggle("observer", role !== "commander");
    document.body.classList.toggle("commander", role === "commander");
    document.getElementById("readonly-note").hidden = role === "commander";
    const badge = document.getElementById("role-badge");
    badge.textContent = role;
    badge.className = `badge ${role === "commander" ? "warn" : ""}`;
  }

  /** Keep the selects in step with what the mission has (keeping the operator's choice). */
  update(state) {
    const mission = state.mission;
    const phases = [...new Set([...(this.layout.phases || []), ...(mission ? [mission.phase] : [])])];
    setOptions(this.phaseSelect, phases, mission?.phase);
    if (!this.phaseTouched && mission && this.phaseSelect.value !== mission.phase) {
      this.phaseSelect.value = mission.phase;
    }
    const systems = [...new Set([...(this.layout.systems || []), ...(state.systems_seen || [])])].sort();
    setOptions(this.systemSelect, systems);
    this.clusters = mission?.clusters || {};
    const names = [...new Set([...(this.layout.clusters || []), ...Object.keys(this.clusters)])];
    setOptions(this.clusterSelect, names.length ? names : [""], undefined, "no virtual cluster");
    for (const id of ["cluster-scale", "cluster-select", "cluster-size"]) {
      document.getElementById(id).disabled = names.length === 0;
    }
    if (!this.sizeShown && names.length) this.showClusterSize();
  }

  showClusterSize() {
    const c = this.clusters[this.clusterSelect.value];
    if (c) {
      this.clusterSize.value = c.size;
      this.clusterSize.min = c.min;
      this.clusterSize.max = c.max;
      this.sizeShown = true;
    }
  }

  async decide(verb, order) {
    await this.send({ verb, target: String(order.id) });
  }

  async send(body) {
    if (this.busy) return;
    this.busy = true;
    const what = `${body.verb} ${body.target}${body.size !== undefined ? ` → ${body.size}` : ""}`;
    try {
      const result = await post("/api/command", body);
      if (result.ok) this.toast(`${what}: done`, "ok");
      else this.toast(`${what}: ${result.body.detail || `refused (${result.status})`}`, "bad");
      if (result.status === 401) location.replace("/login");
    } finally {
      this.busy = false;
      this.refreshAudit();
    }
  }

  async refreshAudit() {
    const entries = await getJson("/api/audit?limit=30");
    if (!entries) return;
    const list = document.getElementById("audit-list");
    list.replaceChildren(
      ...entries.map((e) =>
        el(
          "li",
          { class: `r-${e.result}`, title: `${e.time} ${e.who} ${e.action} ${e.target}: ${e.result} — ${e.message}` },
          el("span", { class: "t" }, clock(e.time_ns / 1e6)),
          `${e.who} ${e.action} ${e.target} `,
          el("span", { class: "res" }, e.result),
        ),
      ),
    );
  }
}

function setOptions(select, values, preferred, emptyLabel = "") {
  const current = [...select.options].map((o) => o.value);
  if (current.length === values.length && current.every((v, i) => v === values[i])) return;
  const keep = select.value;
  select.replaceChildren(...values.map((v) => el("option", { value: v }, v || emptyLabel)));
  if (values.includes(keep)) select.value = keep;
  else if (preferred && values.includes(preferred)) select.value = preferred;
}
