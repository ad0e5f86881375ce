// DOM and number helpers shared by the console's modules. Text goes in as text nodes only:
// nothing from the bus is ever parsed as HTML.

/** Build an element: el("td", {class: "num"}, "12"). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "style") Object.assign(node.style, value);
    else if (key.startsWith("on") && typeof value === "function") {
      node.addEventListener(key.slice(2), value);
    } else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Replace a tbody's rows, keeping the rows whose signature did not change (so a button
 * being clicked is not swapped for a copy under the pointer). */
export function syncRows(tbody, items, key, signature, build) {
  const previous = tbody._rows || new Map();
  const next = new Map();
  const rows = [];
  for (const item of items) {
    const k = key(item);
    const sig = signature(item);
    let row = previous.get(k);
    if (!row || row._sig !== sig) {
      row = build(item);
      row._sig = sig;
      row.dataset.key = String(k);
    }
    next.set(k, row);
    rows.push(row);
  }
  const current = tbody.children;
  let same = current.length === rows.length;
  for (let i = 0; same && i < rows.length; i++) same = current[i] === rows[i];
  if (!same) tbody.replaceChildren(...rows);
  tbody._rows = next;
}

export function num(value, digits = 0) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  return Number(value).toFixed(digits);
}

export function km(metres, digits = 1) {
  if (metres === null || metres === undefined) return "–";
  return (metres / 1000).toFixed(digits);
}

export function bytes(n) {
  if (n === null || n === undefined) return "–";
  if (n >= 1 << 30) return `${(n / (1 << 30)).toFixed(1)} G`;
  if (n >= 1 << 20) return `${(n / (1 << 20)).toFixed(0)} M`;
  return `${(n / 1024).toFixed(0)} k`;
}

export function clock(ms) {
  if (!ms) return "–";
  return new Date(ms).toISOString().slice(11, 19);
}

export function age(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.round(ms / 60000)} min`;
}

const KIND = {
  running: "ok", ready: "ok", kill: "ok", confirmed: "ok",
  starting: "info", issued: "info", in_flight: "violet", engaging: "violet", reloading: "info",
  pending: "warn", degraded: "warn", proposed: "warn", stopping: "muted", coasting: "warn",
  failed: "bad", fault: "bad", miss: "bad", aborted: "muted", stopped: "muted",
  offline: "muted", tentative: "muted", silent: "bad",
};

const CLASS_SHORT = {
  unknown: "UNK", aircraft: "ACFT", cruise_missile: "CM", helicopter: "HELO",
  ballistic: "BM", uav: "UAV", decoy: "DCY",
};

/** A target class as operators abbreviate it (CM = cruise missile …). */
export function classShort(cls) {
  return CLASS_SHORT[cls] || String(cls || "?").toUpperCase();
}

export function pill(text) {
  const label = String(text || "–").replace("_", " ");
  return el("span", { class: `pill ${KIND[text] || "muted"}` }, label);
}

/** Threat colour by score (the same on the map, the tables and the legend). */
export function threatColour(score) {
  if (score === null || score === undefined) return "#22d3ee";
  if (score >= 0.6) return "#ef4444";
  if (score >= 0.3) return "#f59e0b";
  return "#eab308";
}

/** A track's standard identity (STANAG 1241) as APP-6 / MIL-STD-2525 draw it: frame colour
 * (friend blue, hostile red, unknown yellow, neutral green), frame shape (circle, diamond,
 * quatrefoil, square), dashed for the pending / assumed / suspect ones, and its short name.
 * `null` (a tracker that does not identify) draws as pending; a value the console does not
 * know ("?") in grey. */
const IDENTITY = {
  friend: { colour: "#60a5fa", shape: "circle", dashed: false, short: "FRD" },
  assumed_friend: { colour: "#60a5fa", shape: "circle", dashed: true, short: "AFR" },
  neutral: { colour: "#4ade80", shape: "square", dashed: false, short: "NEU" },
  hostile: { colour: "#ef4444", shape: "diamond", dashed: false, short: "HOS" },
  suspect: { colour: "#ef4444", shape: "diamond", dashed: true, short: "SUS" },
  unknown: { colour: "#facc15", shape: "quatrefoil", dashed: false, short: "UNK" },
  pending: { colour: "#facc15", shape: "quatrefoil", dashed: true, short: "PND" },
};
const NO_IDENTITY = { ...IDENTITY.pending, short: "–" };
const BAD_IDENTITY = { colour: "#94a3b8", shape: "quatrefoil", dashed: true, short: "?" };

export function identityStyle(identity) {
  if (identity === null || identity === undefined) return NO_IDENTITY;
  return Object.hasOwn(IDENTITY, identity) ? IDENTITY[identity] : BAD_IDENTITY;
}

/** An identity as the tables show it: short name, class for its colour, full name on hover. */
export function identityCell(identity) {
  const style = identityStyle(identity);
  const known = Object.hasOwn(IDENTITY, identity ?? "");
  const kind = known ? identity.replace("assumed_", "").replace("suspect", "hostile").replace("pending", "unknown") : "bad";
  const title = known ? identity.replace("_", " ") : identity === null || identity === undefined ? "not identified" : "a value the console does not know";
  return el("span", { class: `ident ${kind}`, title, dataset: { identity: identity ?? "" } }, style.short);
}

export function niceStep(range, target = 5) {
  const raw = range / target;
  const power = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 2.5, 5, 10]) if (raw <= m * power) return m * power;
  return 10 * power;
}

/** Size `view.canvas` to its parent at the screen's pixel ratio; sets `view.width`/`height`
 * (CSS pixels) and scales `view.ctx` so drawing stays in CSS pixels. */
export function fitCanvas(view) {
  const rect = view.canvas.parentElement.getBoundingClientRect();
  const dpr = window.devicePixelRatio || 1;
  view.width = Math.max(rect.width, 10);
  view.height = Math.max(rect.height, 10);
  view.canvas.width = Math.round(view.width * dpr);
  view.canvas.height = Math.round(view.height * dpr);
  view.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
}
