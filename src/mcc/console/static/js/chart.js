// A small time-series chart on canvas: the last `windowS` seconds, auto-scaled y axis.

import { fitCanvas, niceStep } from "./format.js";

export class LineChart {
  /** series: [{key, label, colour, kind: "line" | "dots" | "step"}] */
  constructor(canvas, { title, unit, series, windowS = 120 }) {
    this.canvas = canvas;
    this.ctx = canvas.getContext("2d");
    this.title = title;
    this.unit = unit;
    this.series = series;
    this.windowS = windowS;
    this.data = {};
    this.nowMs = Date.now();
    this.resize();
    new ResizeObserver(() => this.resize()).observe(canvas.parentElement);
  }

  resize() {
    fitCanvas(this);
    this.draw();
  }

  set(data, nowMs) {
    this.data = data;
    this.nowMs = nowMs;
    this.draw();
  }

  draw() {
    const ctx = this.ctx;
    const W = this.width;
    const H = this.height;
    const pad = { l: 40, r: 10, t: 32, b: 16 };
    ctx.clearRect(0, 0, W, H);
    const t0 = this.nowMs - this.windowS * 1000;
    let yMax = 0;
    for (const s of this.series) {
      for (const [t, v] of this.data[s.key] || []) if (t >= t0) yMax = Math.max(yMax, v);
    }
    const step = niceStep(Math.max(yMax, 1e-9) * 1.15, 3);
    yMax = Math.max(step * Math.ceil((yMax * 1.15) / step), step);
    const x = (t) => pad.l + ((t - t0) / (this.windowS * 1000)) * (W - pad.l - pad.r);
    const y = (v) => H - pad.b - (v / yMax) * (H - pad.t - pad.b);

    ctx.font = "10px ui-monospace, 'DejaVu Sans Mono', monospace";
    ctx.textBaseline = "middle";
    ctx.strokeStyle = "#172330";
    ctx.fillStyle = "#55667a";
    ctx.lineWidth = 1;
    ctx.textAlign = "right";
    for (let v = 0; v <= yMax + 1e-9; v += step) {
      ctx.beginPath();
      ctx.moveTo(pad.l, y(v));
      ctx.lineTo(W - pad.r, y(v));
      ctx.stroke();
      ctx.fillText(formatTick(v), pad.l - 5, y(v));
    }
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (let s = 0; s <= this.windowS; s += 30) {
      const xx = x(this.nowMs - s * 1000);
      ctx.fillText(s === 0 ? "now" : `-${s}s`, xx, H - pad.b + 3);
    }
    // title, then the legend on the same row when it fits, else on the next
    ctx.textAlign = "left";
    ctx.textBaseline = "top";
    ctx.font = "600 10.5px system-ui, sans-serif";
    ctx.fillStyle = "#9fb0c4";
    const title = `${this.title.toUpperCase()} (${this.unit})`;
    ctx.fillText(title, 8, 6);
    const titleEnd = 8 + ctx.measureText(title).width + 16;
    ctx.font = "10px system-ui, sans-serif";
    const items = this.series.map((s) => {
      const points = (this.data[s.key] || []).filter(([t]) => t >= t0);
      const last = points.length ? points[points.length - 1][1] : null;
      const text = `${s.label} ${last === null ? "–" : formatTick(last)}`;
      return { text, colour: s.colour, width: ctx.measureText(text).width };
    });
    const legendWidth = items.reduce((sum, i) => sum + i.width + 14, 0);
    const legendY = W - pad.r - legendWidth < titleEnd ? 19 : 7;
    let lx = W - pad.r;
    ctx.textAlign = "right";
    for (const item of [...items].reverse()) {
      ctx.fillStyle = item.colour;
      ctx.fillText(item.text, lx, legendY);
      lx -= item.width + 14;
    }
    ctx.save();
    ctx.beginPath();
    ctx.rect(pad.l, pad.t - 4, W - pad.l - pad.r, H - pad.t - pad.b + 4);
    ctx.clip();
    for (const s of this.series) {
      const points = (this.data[s.key] || []).filter(([t]) => t >= t0 - 5000);
      if (!points.length) continue;
      ctx.strokeStyle = s.colour;
      ctx.fillStyle = s.colour;
      ctx.lineWidth = 1.5;
      if (s.kind === "dots") {
        for (const [t, v] of points) {
          ctx.beginPath();
          ctx.arc(x(t), y(v), 2.2, 0, 2 * Math.PI);
          ctx.fill();
        }
        continue;
      }
      ctx.beginPath();
      points.forEach(([t, v], i) => {
        if (i === 0) ctx.moveTo(x(t), y(v));
        else if (s.kind === "step") {
          ctx.lineTo(x(t), y(points[i - 1][1]));
          ctx.lineTo(x(t), y(v));
        } else ctx.lineTo(x(t), y(v));
      });
      if (s.kind === "step") ctx.lineTo(x(this.nowMs), y(points[points.length - 1][1]));
      ctx.stroke();
    }
    ctx.restore();
  }
}

function formatTick(v) {
  if (v >= 100) return v.toFixed(0);
  if (v >= 10) return v.toFixed(1).replace(/\.0$/, "");
  return v.toFixed(2).replace(/0$/, "").replace(/\.0$/, "");
}
