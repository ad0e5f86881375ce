// The plan-position view: range rings and bearings, radar and weapon coverage, defended
// assets, tracks (ID, velocity leader, trail; identity symbol and colour as APP-6 /
// MIL-STD-2525 draw them: friend blue circle, hostile red diamond, unknown yellow quatrefoil,
// neutral green square), interceptors in flight.
// World: ENU metres (x east, y north); the origin is the mission's. Drag to pan, wheel to
// zoom at the cursor, click a track for its card, double-click to fit.

import { fitCanvas, identityStyle, km, num, niceStep } from "./format.js";

const LEADER_S = 20; // velocity leader: where the track will be in 20 s
const TRAIL_POINTS = 12;
const TRAIL_PERIOD_MS = 1000;
const MAX_EXTRAPOLATION_S = 3;
const FRAME_MS = 1000 / 20;

const WEAPON_COLOUR = {
  ready: "#22c55e",
  engaging: "#a78bfa",
  reloading: "#60a5fa",
  offline: "#64748b",
  fault: "#ef4444",
};

export class PPI {
  constructor(canvas, { readout, card }) {
    this.canvas = canvas;
    this.ctx = canvas.getContext("2d");
    this.readout = readout;
    this.card = card;
    this.view = { cx: 0, cy: 0, scale: 0.02 }; // px per metre
    this.layers = { coverage: true, labels: true, trails: true, truth: false };
    this.layout = null;
    this.state = null;
    this.clockOffsetMs = 0;
    this.userMoved = false;
    this.fittedOnTracks = false;
    this.trails = new Map();
    this.selected = null;
    this.drag = null;
    this.lastFrame = 0;
    this.labels = [];
    /** Track id → identity of the symbol drawn in the last frame (for tests and debugging). */
    this.drawn = new Map();
    this.resize();
    new ResizeObserver(() => this.resize()).observe(canvas.parentElement);
    this.bindPointer();
    const loop = (t) => {
      if (t - this.lastFrame >= FRAME_MS) {
        this.lastFrame = t;
        this.draw();
      }
      requestAnimationFrame(loop);
    };
    requestAnimationFrame(loop);
  }

  // -- data ---------------------------------------------------------------------------------

  setLayout(layout) {
    this.layout = layout;
    if (!this.userMoved) this.fit();
  }

  update(state, clockOffsetMs) {
    this.state = state;
    this.clockOffsetMs = clockOffsetMs;
    const now = state.now_ms;
    const live = new Set();
    for (const t of state.tracks) {
      live.add(t.id);
      let trail = this.trails.get(t.id);
      if (!trail) this.trails.set(t.id, (trail = []));
      const last = trail[trail.length - 1];
      if (!last || now - last.t >= TRAIL_PERIOD_MS) {
        trail.push({ t: now, x: t.x, y: t.y });
        if (trail.length > TRAIL_POINTS) trail.shift();
      }
    }
    for (const id of this.trails.keys()) if (!live.has(id)) this.trails.delete(id);
    if (this.selected !== null && !live.has(this.selected)) this.select(null);
    if (!this.userMoved && !this.fittedOnTracks && state.tracks.length) {
      this.fittedOnTracks = true;
      this.fit();
    }
    this.renderCard();
  }

  nowMs() {
    return Date.now() + this.clockOffsetMs;
  }

  /** A track's position now (dead reckoning from its last update, at most 3 s ahead). */
  position(track, nowMs = this.nowMs()) {
    const dt = Math.min(Math.max((nowMs - track.t_ms) / 1000, 0), MAX_EXTRAPOLATION_S);
    return [track.x + track.vx * dt, track.y + track.vy * dt];
  }

  // -- view ---------------------------------------------------------------------------------

  resize() {
    fitCanvas(this);
    this.draw();
  }

  toScreen(x, y) {
    const v = this.view;
    return [this.width / 2 + (x - v.cx) * v.scale, this.height / 2 - (y - v.cy) * v.scale];
  }

  toWorld(px, py) {
    const v = this.view;
    return [v.cx + (px - this.width / 2) / v.scale, v.cy - (py - this.height / 2) / v.scale];
  }

  /** Frame the assets, weapons, radars and tracks (at least 8 km around the centre). */
  fit() {
    const points = [];
    const layout = this.layout || {};
    for (const a of layout.assets || []) points.push([a.x, a.y]);
    const anchor = points.length
      ? [points.reduce((s, p) => s + p[0], 0) / points.length, points.reduce((s, p) => s + p[1], 0) / points.length]
      : [0, 0];
    for (const w of layout.weapons || []) points.push([w.x, w.y]);
    for (const w of this.state?.weapons || []) points.push([w.x, w.y]);
    for (const r of layout.radars || []) points.push([r.x, r.y]);
    let radius = 8000;
    for (const [x, y] of points) radius = Math.max(radius, Math.hypot(x - anchor[0], y - anchor[1]) + 1500);
    // tracks: frame most of them (a straggler far out does not shrink the raid to a dot)
    const ranges = (this.state?.tracks || []).map((t) => Math.hypot(t.x - anchor[0], t.y - anchor[1]));
    ranges.sort((a, b) => a - b);
    if (ranges.length) radius = Math.max(radius, ranges[Math.floor(0.85 * (ranges.length - 1))] + 1500);
    this.view.cx = anchor[0];
    this.view.cy = anchor[1];
    this.view.scale = (Math.min(this.width, this.height) / 2 / radius) * 0.95;
  }

  zoom(factor, px = this.width / 2, py = this.height / 2) {
    const [wx, wy] = this.toWorld(px, py);
    const scale = Math.min(Math.max(this.view.scale * factor, 2e-4), 2);
    this.view.scale = scale;
    // keep the world point under the cursor where it was
    this.view.cx = wx - (px - this.width / 2) / scale;
    this.view.cy = wy + (py - this.height / 2) / scale;
    this.userMoved = true;
  }

  bindPointer() {
    const c = this.canvas;
    c.addEventListener("pointerdown", (e) => {
      c.setPointerCapture(e.pointerId);
      this.drag = { x: e.offsetX, y: e.offsetY, cx: this.view.cx, cy: this.view.cy, moved: false };
    });
    c.addEventListener("pointermove", (e) => {
      const [wx, wy] = this.toWorld(e.offsetX, e.offsetY);
      const range = Math.hypot(wx, wy);
      const bearing = ((Math.atan2(wx, wy) * 180) / Math.PI + 360) % 360;
      this.readout.textContent =
        `RNG ${km(range, 2).padStart(6)} km  BRG ${num(bearing).padStart(3, "0")}°` +
        `   E ${km(wx, 2)}  N ${km(wy, 2)} km`;
      if (!this.drag) return;
      const dx = e.offsetX - this.drag.x;
      const dy = e.offsetY - this.drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 3) {
        this.drag.moved = true;
        c.classList.add("dragging");
      }
      if (this.drag.moved) {
        this.view.cx = this.drag.cx - dx / this.view.scale;
        this.view.cy = this.drag.cy + dy / this.view.scale;
        this.userMoved = true;
      }
    });
    c.addEventListener("pointerup", (e) => {
      if (this.drag && !this.drag.moved) this.pick(e.offsetX, e.offsetY);
      this.drag = null;
      c.classList.remove("dragging");
    });
    c.addEventListener("wheel", (e) => {
      e.preventDefault();
      this.zoom(Math.exp(-e.deltaY * 0.0015), e.offsetX, e.offsetY);
    }, { passive: false });
    c.addEventListener("dblclick", () => {
      this.userMoved = false;
      this.fit();
    });
    c.addEventListener("pointerleave", () => (this.readout.textContent = ""));
  }

  pick(px, py) {
    let best = null;
    let bestD = 14;
    for (const t of this.state?.tracks || []) {
      const [sx, sy] = this.toScreen(...this.position(t));
      const d = Math.hypot(sx - px, sy - py);
      if (d < bestD) {
        best = t.id;
        bestD = d;
      }
    }
    this.select(best);
  }

  select(trackId) {
    this.selected = trackId;
    this.renderCard();
    this.canvas.dispatchEvent(new CustomEvent("trackselect", { detail: trackId }));
  }

  renderCard() {
    const card = this.card;
    const track = this.state?.tracks.find((t) => t.id === this.selected);
    if (!track) {
      card.hidden = true;
      return;
    }
    const threat = this.state.threats.find((t) => t.track_id === track.id);
    const speed = Math.hypot(track.vx, track.vy, track.vz);
    const course = ((Math.atan2(track.vx, track.vy) * 180) / Math.PI + 360) % 360;
    const identity = track.identity === null || track.identity === undefined ? "–" : String(track.identity).replace("_", " ");
    const rows = [
      ["Identity", identity],
      ["IFF", track.iff === null || track.iff === undefined ? "–" : String(track.iff).replace("_", " ")],
      ["Class", track.cls.replace("_", " ")],
      ["Status", track.status],
      ["Range", `${km(Math.hypot(track.x, track.y), 2)} km`],
      ["Altitude", `${num(track.z)} m`],
      ["Speed", `${num(speed)} m/s`],
      ["Course", `${num(course).padStart(3, "0")}°`],
      ["Quality", num(track.quality, 2)],
    ];
    if (threat) {
      rows.push(["Threat", `#${threat.rank} · ${num(threat.score, 2)}`]);
      rows.push(["TTI", threat.tti_s === null ? "never" : `${num(threat.tti_s, 1)} s`]);
      rows.push(["CPA", `${num(threat.cpa_m)} m → ${threat.asset || "–"}`]);
      rows.push(["Weapon", threat.weapon ? `${threat.weapon} (${threat.order_status})` : "–"]);
      rows.push(["Radars", threat.witnesses ? String(threat.witnesses) : "–"]);
    }
    const title = document.createElement("h3");
    title.append(`Track ${track.id}`);
    const close = document.createElement("span");
    close.textContent = "×";
    close.style.cursor = "pointer";
    close.addEventListener("click", () => this.select(null));
    title.append(close);
    const dl = document.createElement("dl");
    for (const [k, v] of rows) {
      const dt = document.createElement("dt");
      dt.textContent = k;
      const dd = document.createElement("dd");
      dd.textContent = v;
      dl.append(dt, dd);
    }
    card.replaceChildren(title, dl);
    card.hidden = false;
  }

  // -- drawing ------------------------------------------------------------------------------

  /** Queue the label of a symbol at (sx, sy); `drawLabels` places labels by priority (lower
   * first) right of the symbol, else left of it, else below, and drops the ones that would
   * overlap a placed label. (dx, dy): offset of the right-hand position. */
  label(text, sx, sy, { dx = 9, dy = 0, colour = "#cbd5e1", font = "10px system-ui, sans-serif", priority = 100 } = {}) {
    this.labels.push({ text, sx, sy, dx, dy, colour, font, priority });
  }

  drawLabels() {
    const ctx = this.ctx;
    const placed = [];
    const free = (box) => !placed.some((b) => box[0] < b[2] && box[2] > b[0] && box[1] < b[3] && box[3] > b[1]);
    this.labels.sort((a, b) => a.priority - b.priority);
    ctx.save();
    ctx.textBaseline = "middle";
    for (const l of this.labels) {
      ctx.font = l.font;
      const w = ctx.measureText(l.text).width;
      const spots = [
        [l.sx + l.dx, l.sy + l.dy],
        [l.sx - l.dx - w, l.sy + l.dy],
        [l.sx - w / 2, l.sy + Math.abs(l.dy) + 14],
      ];
      for (const [x, y] of spots) {
        const box = [x - 1, y - 7, x + w + 1, y + 7];
        if (!free(box)) continue;
        placed.push(box);
        ctx.fillStyle = "rgba(6, 10, 15, 0.55)";
        ctx.fillRect(box[0], box[1] + 1, box[2] - box[0], box[3] - box[1] - 2);
        ctx.fillStyle = l.colour;
        ctx.fillText(l.text, x, y);
        break;
      }
    }
    ctx.restore();
  }

  draw() {
    const ctx = this.ctx;
    if (!ctx) return;
    this.labels = [];
    ctx.clearRect(0, 0, this.width, this.height);
    this.drawGrid();
    const layout = this.layout || {};
    const state = this.state;
    if (this.layers.coverage) this.drawCoverage(layout, state);
    this.drawAssets(layout);
    this.drawRadars(layout, state);
    this.drawWeapons(layout, state);
    if (state) {
      const now = this.nowMs();
      const threats = new Map(state.threats.map((t) => [t.track_id, t]));
      if (this.layers.truth) this.drawTruth(state.truth);
      this.drawEngagements(state, now);
      if (this.layers.trails) this.drawTrails(state);
      this.drawTracks(state, threats, now);
      this.drawInterceptors(state, now);
    }
    if (this.layers.labels) this.drawLabels();
    this.drawScale();
  }

  drawGrid() {
    const ctx = this.ctx;
    const [ox, oy] = this.toScreen(0, 0);
    const halfDiag = Math.hypot(this.width, this.height) / 2;
    const centreDist = Math.hypot(ox - this.width / 2, oy - this.height / 2);
    const maxR = (centreDist + halfDiag) / this.view.scale;
    const step = niceStep(Math.min(this.width, this.height) / 2 / this.view.scale, 4);
    ctx.save();
    ctx.lineWidth = 1;
    // bearings every 30°
    ctx.strokeStyle = "#16222e";
    for (let b = 0; b < 360; b += 30) {
      const r = (b * Math.PI) / 180;
      ctx.beginPath();
      ctx.moveTo(ox, oy);
      ctx.lineTo(ox + Math.sin(r) * maxR * this.view.scale, oy - Math.cos(r) * maxR * this.view.scale);
      ctx.stroke();
    }
    // range rings
    ctx.font = "10px ui-monospace, 'DejaVu Sans Mono', monospace";
    for (let r = step, i = 1; r <= maxR; r += step, i++) {
      ctx.strokeStyle = i % 2 === 0 ? "#1f3142" : "#172532";
      ctx.beginPath();
      ctx.arc(ox, oy, r * this.view.scale, 0, 2 * Math.PI);
      ctx.stroke();
      ctx.fillStyle = "#3f5368";
      const a = Math.PI / 4;
      ctx.fillText(`${km(r, r < 1000 ? 1 : 0)} km`, ox + Math.sin(a) * r * this.view.scale + 3, oy - Math.cos(a) * r * this.view.scale - 3);
    }
    // bearing labels on a ring that is on screen
    ctx.fillStyle = "#3f5368";
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    const labelR = Math.min(this.width, this.height) / 2 - 14;
    if (centreDist < 40) {
      for (let b = 0; b < 360; b += 30) {
        const r = (b * Math.PI) / 180;
        ctx.fillText(String(b).padStart(3, "0"), ox + Math.sin(r) * labelR, oy - Math.cos(r) * labelR);
      }
    }
    ctx.restore();
  }

  drawCoverage(layout, state) {
    const ctx = this.ctx;
    ctx.save();
    for (const r of layout.radars || []) {
      const [x, y] = this.toScreen(r.x, r.y);
      const R = r.max_range_m * this.view.scale;
      ctx.beginPath();
      if (r.sector_deg) {
        const [from, to] = r.sector_deg;
        const a0 = ((from - 90) * Math.PI) / 180;
        let a1 = ((to - 90) * Math.PI) / 180;
        if (a1 <= a0) a1 += 2 * Math.PI;
        ctx.moveTo(x, y);
        ctx.arc(x, y, R, a0, a1);
        ctx.closePath();
      } else {
        ctx.arc(x, y, R, 0, 2 * Math.PI);
      }
      ctx.fillStyle = "rgba(56, 189, 248, 0.035)";
      ctx.fill();
      ctx.setLineDash([6, 6]);
      ctx.strokeStyle = "rgba(56, 189, 248, 0.28)";
      ctx.stroke();
      ctx.setLineDash([]);
    }
    const weapons = mergeWeapons(layout, state);
    for (const w of weapons) {
      if (!w.max_range_m) continue;
      const [x, y] = this.toScreen(w.x, w.y);
      ctx.beginPath();
      ctx.arc(x, y, w.max_range_m * this.view.scale, 0, 2 * Math.PI);
      ctx.setLineDash([2, 5]);
      ctx.strokeStyle = "rgba(34, 197, 94, 0.22)";
      ctx.stroke();
      ctx.setLineDash([]);
    }
    ctx.restore();
  }

  drawAssets(layout) {
    const ctx = this.ctx;
    ctx.save();
    for (const a of layout.assets || []) {
      const [x, y] = this.toScreen(a.x, a.y);
      ctx.beginPath();
      ctx.arc(x, y, 1000 * this.view.scale, 0, 2 * Math.PI);
      ctx.setLineDash([3, 3]);
      ctx.strokeStyle = "rgba(52, 211, 153, 0.45)";
      ctx.stroke();
      ctx.setLineDash([]);
      ctx.fillStyle = "#0b3b2c";
      ctx.strokeStyle = "#34d399";
      ctx.lineWidth = 1.5;
      ctx.fillRect(x - 6, y - 6, 12, 12);
      ctx.strokeRect(x - 6, y - 6, 12, 12);
      this.label(a.id.toUpperCase(), x, y, { dy: 10, colour: "#6ee7b7", font: "600 11px system-ui, sans-serif", priority: 0 });
    }
    ctx.restore();
  }

  drawRadars(layout, state) {
    const ctx = this.ctx;
    const seen = new Map((state?.radars || []).map((r) => [r.id, r]));
    const radars = new Map((layout.radars || []).map((r) => [r.id, r]));
    for (const r of seen.values()) if (!radars.has(r.id)) radars.set(r.id, r);
    ctx.save();
    for (const r of radars.values()) {
      const [x, y] = this.toScreen(r.x, r.y);
      const live = seen.get(r.id);
      const ok = live && live.age_ms < 5000;
      ctx.fillStyle = ok ? "#38bdf8" : "#475569";
      ctx.beginPath();
      ctx.moveTo(x, y - 7);
      ctx.lineTo(x + 6, y);
      ctx.lineTo(x, y + 7);
      ctx.lineTo(x - 6, y);
      ctx.closePath();
      ctx.fill();
      this.label(r.id, x, y, { colour: ok ? "#7dd3fc" : "#64748b", priority: 2 });
    }
    ctx.restore();
  }

  drawWeapons(layout, state) {
    const ctx = this.ctx;
    ctx.save();
    for (const w of mergeWeapons(layout, state)) {
      const [x, y] = this.toScreen(w.x, w.y);
      const colour = WEAPON_COLOUR[w.state] || "#64748b";
      ctx.fillStyle = colour;
      ctx.strokeStyle = "#020617";
      ctx.beginPath();
      ctx.moveTo(x, y - 8);
      ctx.lineTo(x + 7, y + 6);
      ctx.lineTo(x - 7, y + 6);
      ctx.closePath();
      ctx.fill();
      ctx.stroke();
      const rounds = w.rounds_ready !== undefined ? ` ${w.rounds_ready}/${w.rounds_total}` : "";
      this.label(`${w.id}${rounds}`, x, y, { dy: 7, colour, priority: 1 });
    }
    ctx.restore();
  }

  drawTruth(truth) {
    const ctx = this.ctx;
    ctx.save();
    ctx.strokeStyle = "rgba(148, 163, 184, 0.55)";
    for (const t of truth || []) {
      const [x, y] = this.toScreen(t.x, t.y);
      ctx.beginPath();
      ctx.moveTo(x - 3, y);
      ctx.lineTo(x + 3, y);
      ctx.moveTo(x, y - 3);
      ctx.lineTo(x, y + 3);
      ctx.stroke();
    }
    ctx.restore();
  }

  drawTrails(state) {
    const ctx = this.ctx;
    ctx.save();
    for (const t of state.tracks) {
      const trail = this.trails.get(t.id);
      if (!trail || trail.length < 2) continue;
      const colour = identityStyle(t.identity).colour;
      trail.forEach((p, i) => {
        const [x, y] = this.toScreen(p.x, p.y);
        ctx.globalAlpha = 0.12 + (0.45 * i) / trail.length;
        ctx.fillStyle = colour;
        ctx.fillRect(x - 1, y - 1, 2, 2);
      });
    }
    ctx.restore();
  }

  drawEngagements(state, now) {
    const ctx = this.ctx;
    const tracks = new Map(state.tracks.map((t) => [t.id, t]));
    const weapons = new Map(state.weapons.map((w) => [w.id, w]));
    ctx.save();
    ctx.lineWidth = 1;
    for (const o of state.orders) {
      if (o.status !== "in_flight" && o.status !== "issued" && o.status !== "proposed") continue;
      const t = tracks.get(o.track);
      const w = weapons.get(o.weapon);
      if (!t || !w) continue;
      const [x0, y0] = this.toScreen(w.x, w.y);
      const [x1, y1] = this.toScreen(...this.position(t, now));
      ctx.setLineDash(o.status === "proposed" ? [2, 4] : [6, 4]);
      ctx.strokeStyle = o.status === "proposed" ? "rgba(245, 158, 11, 0.7)" : "rgba(167, 139, 250, 0.55)";
      ctx.beginPath();
      ctx.moveTo(x0, y0);
      ctx.lineTo(x1, y1);
      ctx.stroke();
    }
    ctx.restore();
  }

  drawTracks(state, threats, now) {
    const ctx = this.ctx;
    ctx.save();
    ctx.font = "10.5px ui-monospace, 'DejaVu Sans Mono', monospace";
    this.drawn.clear();
    for (const t of state.tracks) {
      const threat = threats.get(t.id);
      const style = identityStyle(t.identity);
      const colour = t.status === "tentative" ? "#64748b" : style.colour;
      const [wx, wy] = this.position(t, now);
      const [x, y] = this.toScreen(wx, wy);
      if (x < -50 || y < -50 || x > this.width + 50 || y > this.height + 50) continue;
      this.drawn.set(t.id, t.identity ?? null);
      // velocity leader
      const [lx, ly] = this.toScreen(wx + t.vx * LEADER_S, wy + t.vy * LEADER_S);
      ctx.strokeStyle = colour;
      ctx.globalAlpha = 0.8;
      ctx.lineWidth = 1.2;
      ctx.beginPath();
      ctx.moveTo(x, y);
      ctx.lineTo(lx, ly);
      ctx.stroke();
      ctx.globalAlpha = 1;
      // symbol: the identity's frame; dashed when pending, assumed or suspect, dotted when
      // coasting; filled once confirmed; larger for a ranked threat
      symbolPath(ctx, style.shape, x, y, threat ? 7 : 6);
      ctx.lineWidth = 1.6;
      ctx.strokeStyle = colour;
      if (t.status === "coasting") ctx.setLineDash([2, 2]);
      else if (style.dashed) ctx.setLineDash([3, 2]);
      if (t.status === "confirmed") {
        ctx.fillStyle = colour + "55";
        ctx.fill();
      }
      ctx.stroke();
      ctx.setLineDash([]);
      if (t.id === this.selected) {
        ctx.strokeStyle = "#f8fafc";
        ctx.lineWidth = 1;
        ctx.strokeRect(x - 10, y - 10, 20, 20);
      }
      if (t.status !== "tentative") {
        const tag = style.short === "–" ? "" : ` ${style.short}`;
        const text = threat ? `${t.id}${tag} #${threat.rank}` : `${t.id}${tag}`;
        const priority = t.id === this.selected ? 3 : threat ? 10 + threat.rank : 1000 + t.id;
        this.label(text, x, y, { dx: 8, dy: -9, colour: "#cbd5e1", font: "10.5px ui-monospace, 'DejaVu Sans Mono', monospace", priority });
      }
    }
    ctx.restore();
  }

  drawInterceptors(state, now) {
    const ctx = this.ctx;
    const tracks = new Map(state.tracks.map((t) => [t.id, t]));
    const weapons = new Map(state.weapons.map((w) => [w.id, w]));
    ctx.save();
    for (const i of state.interceptors) {
      const t = tracks.get(i.track);
      const w = weapons.get(i.weapon);
      if (!t || !w) continue;
      const [tx, ty] = this.position(t, now);
      const dx = tx - w.x;
      const dy = ty - w.y;
      const dist = Math.hypot(dx, dy) || 1;
      const flown = Math.min(((i.speed_mps || 1000) * Math.max(now - i.launched_ms, 0)) / 1000, dist);
      const px = w.x + (dx / dist) * flown;
      const py = w.y + (dy / dist) * flown;
      const [sx, sy] = this.toScreen(px, py);
      const [bx, by] = this.toScreen(px - (dx / dist) * 600, py - (dy / dist) * 600);
      const gradient = ctx.createLinearGradient(bx, by, sx, sy);
      gradient.addColorStop(0, "rgba(248, 250, 252, 0)");
      gradient.addColorStop(1, "rgba(248, 250, 252, 0.9)");
      ctx.strokeStyle = gradient;
      ctx.lineWidth = 2;
      ctx.beginPath();
      ctx.moveTo(bx, by);
      ctx.lineTo(sx, sy);
      ctx.stroke();
      ctx.fillStyle = "#f8fafc";
      ctx.beginPath();
      ctx.arc(sx, sy, 2.6, 0, 2 * Math.PI);
      ctx.fill();
    }
    ctx.restore();
  }

  drawScale() {
    const ctx = this.ctx;
    const target = 120 / this.view.scale;
    const step = niceStep(target, 1);
    const px = step * this.view.scale;
    const x = 14;
    const y = 18;
    ctx.save();
    ctx.strokeStyle = "#7b8da3";
    ctx.fillStyle = "#9fb0c4";
    ctx.lineWidth = 1;
    ctx.beginPath();
    ctx.moveTo(x, y);
    ctx.lineTo(x, y + 5);
    ctx.lineTo(x + px, y + 5);
    ctx.lineTo(x + px, y);
    ctx.stroke();
    ctx.font = "10px ui-monospace, 'DejaVu Sans Mono', monospace";
    ctx.textBaseline = "bottom";
    ctx.fillText(step >= 1000 ? `${step / 1000} km` : `${step} m`, x + px + 6, y + 8);
    // north arrow
    const nx = this.width - 22;
    const ny = 22;
    ctx.beginPath();
    ctx.moveTo(nx, ny - 10);
    ctx.lineTo(nx + 5, ny + 4);
    ctx.lineTo(nx, ny);
    ctx.lineTo(nx - 5, ny + 4);
    ctx.closePath();
    ctx.fill();
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    ctx.fillText("N", nx, ny + 6);
    ctx.restore();
  }
}

/** The path of an identity frame of half-size `r` at (x, y). */
function symbolPath(ctx, shape, x, y, r) {
  ctx.beginPath();
  if (shape === "diamond") {
    ctx.moveTo(x, y - r);
    ctx.lineTo(x + r, y);
    ctx.lineTo(x, y + r);
    ctx.lineTo(x - r, y);
    ctx.closePath();
  } else if (shape === "square") {
    ctx.rect(x - r * 0.8, y - r * 0.8, r * 1.6, r * 1.6);
  } else if (shape === "quatrefoil") {
    const q = r / 2;
    ctx.arc(x, y - q, q, Math.PI, 0);
    ctx.arc(x + q, y, q, -Math.PI / 2, Math.PI / 2);
    ctx.arc(x, y + q, q, 0, Math.PI);
    ctx.arc(x - q, y, q, Math.PI / 2, (3 * Math.PI) / 2);
    ctx.closePath();
  } else {
    ctx.arc(x, y, r - 1, 0, 2 * Math.PI);
  }
}

/** Weapons from the layout (specs) merged with their live WeaponStatus. */
function mergeWeapons(layout, state) {
  const out = new Map();
  for (const w of layout.weapons || []) out.set(w.id, { ...w, state: "offline" });
  for (const w of state?.weapons || []) out.set(w.id, { ...(out.get(w.id) || {}), ...w });
  return [...out.values()];
}
