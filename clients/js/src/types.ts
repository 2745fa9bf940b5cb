/**
 * The typed surface of the client: what a subscription delivers (messages, gaps, state
 * changes) and the options that shape it. Wire formats: docs/PROTOCOL.md in the c1m repository.
 */

/** One published message. `id` is the server's decimal id (see "Message ids"). */
export interface C1mMessage {
  channel: string;
  /** Decimal u64 id: ids grow within every channel; resume means "after this id". */
  id: string;
  /** The payload: text, or bytes when the server sent it base64-encoded (not UTF-8). */
  data: string | Uint8Array;
}

/** The server no longer held messages with ids in (after, through] on `channel`: they are lost
 * to this subscriber (evicted from history, or the server restarted). */
export interface C1mGap {
  channel: string;
  after: string;
  through: string;
}

export type Transport = "sse" | "websocket";

/** `connecting` until the first connection opens (also while its first attempts are retried),
 * `open`, `reconnecting` after an open connection ended (until one opens again), `failed`
 * when it gave up (see `maxFailures`), `closed` after `close()`. */
export type ConnectionState = "connecting" | "open" | "reconnecting" | "failed" | "closed";

/** A connection ended and another one is scheduled. */
export interface C1mReconnect {
  /** Consecutive failed attempts so far (1 after the first failure). */
  attempt: number;
  delayMs: number;
  /** Why the previous connection ended, e.g. "close 4008 slow consumer", "shutdown". */
  reason: string;
}

/** The subscription stopped trying: `attempts` consecutive attempts ended before a connection
 * opened (see `maxFailures`). Typically the server refuses it: a 401/403 (bad or missing
 * token), an Origin not on its CORS list, or a wrong URL; or it was unreachable all along. */
export interface C1mFailed {
  attempts: number;
  /** Why the last attempt ended, e.g. "refused (HTTP error status or CORS)". */
  reason: string;
  /** The last attempt was refused by the server or the browser's CORS check (known for SSE,
   * whose EventSource reports a refusal apart from a network error; a WebSocket refused at
   * the upgrade looks like an unreachable server, close 1006, so this is false there). */
  refused: boolean;
}

export interface C1mOpen {
  transport: Transport;
  /** The resume position sent on this connection, if any. */
  lastId: string | undefined;
}

/** Every event a subscription emits, by name. */
export interface C1mEventMap {
  message: C1mMessage;
  gap: C1mGap;
  open: C1mOpen;
  reconnect: C1mReconnect;
  /** The server is draining (SSE `event: shutdown`, WebSocket close 1001): a reconnect follows. */
  shutdown: { transport: Transport };
  /** Something went wrong that the app may want to log; the subscription keeps trying. */
  error: { reason: string };
  /** The server ended the stream because its token expired (SSE `event: expired`, WebSocket
   * close 4001). A reconnect follows (after the first backoff step) with a fresh token from
   * `getToken` and `last_id`, so nothing is missed. */
  expired: { transport: Transport };
  /** The subscription gave up (state `failed`); no more attempts. */
  failed: C1mFailed;
  state: { state: ConnectionState };
}

export interface BackoffOptions {
  /** First retry delay ceiling in ms (default 500). */
  initialMs?: number;
  /** Largest delay ceiling in ms (default 30000). */
  maxMs?: number;
  /** Growth per failed attempt (default 2). */
  factor?: number;
}

/** The parts of the DOM WebSocket the client uses (so Node or a test can pass its own). */
export interface WebSocketLike {
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  close(code?: number, reason?: string): void;
}
export type WebSocketConstructor = new (url: string, protocols?: string | string[]) => WebSocketLike;

/** The parts of the DOM EventSource the client uses. */
export interface EventSourceLike {
  /** 0 connecting, 1 open, 2 closed: an error while 2 means the browser refused the stream
   * (an HTTP error status, a wrong Content-Type or a failed CORS check), not a network drop. */
  readonly readyState?: number;
  onopen: ((ev: unknown) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  addEventListener(type: string, listener: (ev: { data: string; lastEventId: string }) => void): void;
  close(): void;
}
export type EventSourceConstructor = new (url: string) => EventSourceLike;

export interface SubscribeOptions {
  /** Base URL of c1m serve, e.g. "https://push.example.com" (ws:// / wss:// is derived). */
  url: string;
  /** One channel or several (at most the server's --max-channels-per-sub). */
  channels: string | string[];
  /** Default "websocket" when a WebSocket implementation is available, else "sse". */
  transport?: Transport;
  /** Resume position: only messages after this id (and gap notices) are delivered. */
  lastId?: string;
  /** Called before every connection attempt (the first and each reconnect); its token, when
   * not null/undefined, is sent as `?token=` so a short-lived token is refreshed each time. */
  getToken?: () => string | null | undefined | Promise<string | null | undefined>;
  backoff?: BackoffOptions;
  /** Give up (state `failed`, a `failed` event) after this many consecutive attempts that
   * ended before a connection opened (default 10: with the default backoff about 1–2.5
   * minutes of retrying). A refused subscription (401, CORS) would otherwise retry forever.
   * `Infinity` never gives up. */
  maxFailures?: number;
  /** For Node or tests: the implementations to use instead of the globals. */
  WebSocket?: WebSocketConstructor;
  EventSource?: EventSourceConstructor;
  /** For tests: the random source of the backoff jitter (default Math.random). */
  random?: () => number;
}
