// The console's link to its server: a websocket feed that reconnects by itself, and the
// JSON API for control actions.

const BACKOFF_MS = [250, 500, 1000, 2000, 3000, 5000];

/** The live feed: hello (user, role, layout), then state snapshots (≤ 10 per second).
 * A closed socket is reopened with backoff; a 4401 close (no session) goes to the login. */
export class Feed {
  constructor({ onHello, onState, onLink }) {
    this.onHello = onHello;
    this.onState = onState;
    this.onLink = onLink;
    this.attempt = 0;
    this.socket = null;
    this.lastMessage = 0;
    this.pingTimer = setInterval(() => this.ping(), 15000);
  }

  connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(`${scheme}://${location.host}/ws`);
    this.socket = socket;
    this.onLink("connecting");
    socket.addEventListener("open", () => {
      this.attempt = 0;
    });
    socket.addEventListener("message", (event) => {
      let msg;
      try {
        msg = JSON.parse(event.data);
      } catch {
        this.badMessages = (this.badMessages || 0) + 1;
        return; // not a message: the link goes stale rather than stay "live" on garbage
      }
      this.lastMessage = performance.now();
      if (msg.type === "hello") {
        this.onLink("live");
        this.onHello(msg);
      } else if (msg.type === "state") {
        this.onLink("live");
        this.onState(msg);
      }
    });
    socket.addEventListener("close", (event) => {
      if (this.socket !== socket) return;
      if (event.code === 4401) {
        location.replace("/login");
        return;
      }
      this.onLink("reconnecting");
      const delay = BACKOFF_MS[Math.min(this.attempt, BACKOFF_MS.length - 1)];
      this.attempt += 1;
      setTimeout(() => this.connect(), delay);
    });
  }

  ping() {
    if (this.socket && this.socket.readyState === WebSocket.OPEN) this.socket.send("ping");
  }

  /** Milliseconds since the last message (Infinity before the first). */
  silenceMs() {
    return this.lastMessage ? performance.now() - this.lastMessage : Infinity;
  }
}

/** POST a JSON body; {ok, status, body}. */
export async function post(path, body) {
  try {
    const response = await fetch(path, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body ?? {}),
      credentials: "same-origin",
    });
    const data = await response.json().catch(() => ({}));
    return { ok: response.ok, status: response.status, body: data };
  } catch (err) {
    return { ok: false, status: 0, body: { detail: "the console does not answer" } };
  }
}

export async function getJson(path) {
  try {
    const response = await fetch(path, { credentials: "same-origin" });
    if (!response.ok) return null;
    return await response.json();
  } catch {
    return null;
  }
}
