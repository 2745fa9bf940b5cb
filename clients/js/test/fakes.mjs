// Test doubles for the DOM WebSocket and EventSource: each records its instances so a test can
// drive them (open, deliver frames, close) and see the URLs the client asked for.

export class FakeWebSocket {
  static instances = [];
  constructor(url) {
    this.url = url;
    this.closedByClient = false;
    this.onopen = this.onmessage = this.onclose = this.onerror = null;
    FakeWebSocket.instances.push(this);
  }
  open() {
    this.onopen?.({});
  }
  send(obj) {
    this.onmessage?.({ data: typeof obj === "string" ? obj : JSON.stringify(obj) });
  }
  /** An error event with no close event after it (Node 20's WebSocket on a refused connect). */
  errorOnly() {
    this.onerror?.({});
  }
  serverClose(code, reason = "") {
    this.onclose?.({ code, reason });
  }
  close() {
    this.closedByClient = true;
  }
}

export class FakeEventSource {
  static instances = [];
  constructor(url) {
    this.url = url;
    this.closed = false;
    this.readyState = 0;
    this.listeners = new Map();
    this.onopen = this.onerror = null;
    FakeEventSource.instances.push(this);
  }
  addEventListener(type, fn) {
    if (!this.listeners.has(type)) this.listeners.set(type, []);
    this.listeners.get(type).push(fn);
  }
  open() {
    this.readyState = 1;
    this.onopen?.({});
  }
  dispatch(type, data, lastEventId = "") {
    for (const fn of this.listeners.get(type) ?? []) fn({ data, lastEventId });
  }
  /** A dropped stream or an unreachable server: the browser would retry (CONNECTING). */
  fail() {
    this.readyState = 0;
    this.onerror?.({});
  }
  /** A refused stream (HTTP 401, CORS): the browser gives up on it (CLOSED). */
  refuse() {
    this.readyState = 2;
    this.onerror?.({});
  }
  close() {
    this.closed = true;
  }
}

/** Resolves after pending microtasks and `ms` of timers. */
export const tick = (ms = 0) => new Promise((r) => setTimeout(r, ms));

/** Polls `pred` every 2 ms for at most 2 s. */
export async function until(pred, what) {
  const deadline = Date.now() + 2000;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await tick(2);
  }
}
