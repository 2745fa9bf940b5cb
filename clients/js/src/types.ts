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

export type ConnectionState = "connecting" | "open" | "reconnecting" | "closed";

/** A connection ended and another one is scheduled. */
export interface C1mReconnect {
  /** Consecutive failed attempts so far (1 after the first failure). */
  attempt: number;
  delayMs: number;
  /** Why the previous connection ended, e.g. "close 4008 slow consumer", "shutdown". */
  reason: string;
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
  /** For Node or tests: the implementations to use instead of the globals. */
  WebSocket?: WebSocketConstructor;
  EventSource?: EventSourceConstructor;
  /** For tests: the random source of the backoff jitter (default Math.random). */
  random?: () => number;
}
