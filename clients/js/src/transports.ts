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
  /** The server ended the stream because the token expired; the connection ends next. */
  expired(): void;
  /** The connection is over (called once). `refused`: the server or the browser's CORS check
   * refused it (known only for SSE). */
  end(reason: string, refused?: boolean): void;
  /** Something the app may want to log; the connection goes on. */
  problem(reason: string): void;
}

export interface Connection {
  close(): void;
}

/** Close code the server sends on shutdown (and browsers on navigation). */
const GOING_AWAY = 1001;
/** Close code the server sends when the stream's token expired. */
const TOKEN_EXPIRED = 4001;
/** How long an error event may wait for its close event before the attempt counts as ended. */
const ERROR_WITHOUT_CLOSE_MS = 1000;
/** EventSource.readyState after the browser gave up on the stream for good. */
const ES_CLOSED = 2;

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
    clearTimeout(errorTimer);
    if (ev.code === GOING_AWAY) sink.shutdown();
    if (ev.code === TOKEN_EXPIRED) {
      sink.expired();
      return end("token expired");
    }
    end(`close ${ev.code}${ev.reason ? " " + ev.reason : ""}`);
  };
  // In browsers an error is always followed by close, which carries the code; Node 20's
  // WebSocket (undici) fires only error when the connection cannot be made, which would leave
  // the subscription waiting for good. So an error not followed by close soon ends it too.
  let errorTimer: ReturnType<typeof setTimeout> | undefined;
  ws.onerror = () => {
    if (ended || errorTimer !== undefined) return;
    errorTimer = setTimeout(() => {
      if (ended) return;
      ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
      try {
        ws.close();
      } catch {
        // Already failed; nothing to close.
      }
      end("close 1006 (error without a close event)");
    }, ERROR_WITHOUT_CLOSE_MS);
  };
  return {
    close() {
      ended = true;
      clearTimeout(errorTimer);
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
  const stop = (reason: string, refused = false) => {
    if (ended) return;
    ended = true;
    es.onopen = es.onerror = null;
    es.close();
    sink.end(reason, refused);
  };
  es.onopen = () => {
    if (!ended) sink.open();
  };
  // A refused request (4xx/5xx, a wrong Content-Type, a failed CORS check) leaves the source
  // CLOSED: the browser will not retry it. A dropped stream or an unreachable server leaves it
  // CONNECTING (the browser would retry). The status itself is not readable; the server's
  // reason is in its counters.
  es.onerror = () =>
    es.readyState === ES_CLOSED
      ? stop("refused (HTTP error status or CORS)", true)
      : stop("stream ended");
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
  es.addEventListener("expired", () => {
    if (ended) return;
    sink.expired();
    stop("token expired");
  });
  return {
    close() {
      ended = true;
      es.onopen = es.onerror = null;
      es.close();
    },
  };
}
