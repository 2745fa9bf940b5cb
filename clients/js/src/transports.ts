/**
 * One connection attempt over SSE (EventSource) or WebSocket, reporting to a `Sink`. The
 * browsers' own EventSource reconnect is switched off (the source is closed on its first
 * error): the subscription reconnects itself, with backoff, a fresh token and `last_id`.
 */
import { parseGap, parseWsFrame, type Frame } from "./envelope.js";
import type { EventSourceConstructor, WebSocketConstructor } from "./types.js";

export interface Sink {
  open(): void;
  frame(frame: Frame): void;
  /** The server announced it is draining; the connection ends next. */
  shutdown(): void;
  /** The connection is over (called once). */
  end(reason: string): void;
  /** Something the app may want to log; the connection goes on. */
  problem(reason: string): void;
}

export interface Connection {
  close(): void;
}

/** Close code the server sends on shutdown (and browsers on navigation). */
const GOING_AWAY = 1001;

export function connectWebSocket(Ctor: WebSocketConstructor, url: string, sink: Sink): Connection {
  let ended = false;
  const end = (reason: string) => {
    if (!ended) {
      ended = true;
      sink.end(reason);
    }
  };
  const ws = new Ctor(url);
  ws.onopen = () => sink.open();
  ws.onmessage = (ev) => {
    if (ended) return;
    if (typeof ev.data !== "string") {
      sink.problem("c1m: unexpected binary frame (the JSON envelope is text)");
      return;
    }
    try {
      sink.frame(parseWsFrame(ev.data));
    } catch (e) {
      sink.problem(String(e instanceof Error ? e.message : e));
    }
  };
  ws.onclose = (ev) => {
    if (ev.code === GOING_AWAY) sink.shutdown();
    end(`close ${ev.code}${ev.reason ? " " + ev.reason : ""}`);
  };
  // An error is always followed by close, which carries the code.
  ws.onerror = () => {};
  return {
    close() {
      ended = true;
      ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
      ws.close(1000, "client closed");
    },
  };
}

export function connectEventSource(
  Ctor: EventSourceConstructor,
  url: string,
  channels: string[],
  sink: Sink,
): Connection {
  let ended = false;
  const es = new Ctor(url);
  const stop = (reason: string) => {
    if (ended) return;
    ended = true;
    es.onopen = es.onerror = null;
    es.close();
    sink.end(reason);
  };
  es.onopen = () => {
    if (!ended) sink.open();
  };
  // EventSource cannot tell a refused request (4xx/5xx) from a dropped stream: both are an
  // error event; the server's reason is in its counters, and a retry follows either way.
  es.onerror = () => stop("stream ended");
  const onData = (channel: string) => (ev: { data: string; lastEventId: string }) => {
    if (ended) return;
    if (!/^\d+$/.test(ev.lastEventId)) {
      sink.problem(`c1m: SSE message without an id on ${channel}`);
      return;
    }
    sink.frame({ kind: "message", message: { channel, id: ev.lastEventId, data: ev.data } });
  };
  // One channel: plain `message` events; several: each carries `event: {channel}`.
  if (channels.length === 1) es.addEventListener("message", onData(channels[0]));
  else for (const c of channels) es.addEventListener(c, onData(c));
  es.addEventListener("gap", (ev) => {
    if (ended) return;
    try {
      sink.frame({ kind: "gap", gap: parseGap(JSON.parse(ev.data)) });
    } catch (e) {
      sink.problem(String(e instanceof Error ? e.message : e));
    }
  });
  es.addEventListener("shutdown", () => {
    if (!ended) sink.shutdown();
  });
  return {
    close() {
      ended = true;
      es.onopen = es.onerror = null;
      es.close();
    },
  };
}
