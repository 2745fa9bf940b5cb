/**
 * A subscription: connects, delivers typed events, and on any end reconnects with backoff,
 * a fresh token from `getToken`, and `last_id` set to the last id delivered, so the app sees
 * every message once and in order, or a `gap` event for what the server no longer holds.
 */
import { backoffDelay } from "./backoff.js";
import { idAfter, type Frame } from "./envelope.js";
import { connectEventSource, connectWebSocket, type Connection, type Sink } from "./transports.js";
import type {
  C1mEventMap,
  ConnectionState,
  EventSourceConstructor,
  SubscribeOptions,
  Transport,
  WebSocketConstructor,
} from "./types.js";
import { checkChannels, subscribeUrl } from "./url.js";

/** Consecutive attempts ending before an open after which a subscription gives up. */
export const DEFAULT_MAX_FAILURES = 10;

type Handler<K extends keyof C1mEventMap> = (event: C1mEventMap[K]) => void;

export class Subscription {
  readonly channels: readonly string[];
  readonly transport: Transport;
  #options: SubscribeOptions;
  #WebSocket: WebSocketConstructor | undefined;
  #EventSource: EventSourceConstructor | undefined;
  // Keyed by event name; `on` and `#emit` keep each set's handler type matched to its key.
  #handlers = new Map<keyof C1mEventMap, Set<(event: never) => void>>();
  #lastId: string | undefined;
  #state: ConnectionState = "connecting";
  /** The `state` event for the initial `connecting` is still to be emitted. */
  #stateAnnounced = false;
  /** A connection has opened at least once (a later loss is `reconnecting`, not `connecting`). */
  #everOpened = false;
  /** Consecutive ended attempts (the backoff step; reset when a connection opens). */
  #failures = 0;
  /** Consecutive attempts that ended before opening (what `maxFailures` bounds). */
  #unopened = 0;
  /** Bumped on every attempt: callbacks of an older connection are ignored. */
  #generation = 0;
  #connection: Connection | undefined;
  #retryTimer: ReturnType<typeof setTimeout> | undefined;
  /** Messages not delivered because their id was not after the last one (a repeat). */
  repeatsDropped = 0;

  constructor(options: SubscribeOptions) {
    this.channels = checkChannels(options.channels);
    if (options.lastId !== undefined && !/^\d+$/.test(options.lastId)) {
      throw new TypeError(`c1m: lastId must be decimal digits, got ${JSON.stringify(options.lastId)}`);
    }
    const max = options.maxFailures;
    if (max !== undefined && !(max >= 1)) {
      throw new TypeError(`c1m: maxFailures must be at least 1 (or Infinity), got ${max}`);
    }
    new URL(options.url); // throws a TypeError now rather than on every attempt
    this.#options = options;
    this.#lastId = options.lastId;
    const g = globalThis as { WebSocket?: WebSocketConstructor; EventSource?: EventSourceConstructor };
    this.#WebSocket = options.WebSocket ?? g.WebSocket;
    this.#EventSource = options.EventSource ?? g.EventSource;
    this.transport = options.transport ?? (this.#WebSocket ? "websocket" : "sse");
    if (this.transport === "websocket" && !this.#WebSocket) {
      throw new TypeError(
        "c1m: no WebSocket implementation: pass options.WebSocket, or use Node 22+ " +
          "(Node 20 has a global WebSocket only with --experimental-websocket)",
      );
    }
    if (this.transport === "sse" && !this.#EventSource) {
      throw new TypeError(
        "c1m: no EventSource implementation: pass options.EventSource (Node has none by " +
          "default; Node 22.3+ with --experimental-eventsource)",
      );
    }
    // After the caller had the chance to attach handlers.
    queueMicrotask(() => void this.#connect());
  }

  /** The id of the last message delivered (where a reconnect resumes). */
  get lastId(): string | undefined {
    return this.#lastId;
  }

  get state(): ConnectionState {
    return this.#state;
  }

  /** Adds a handler; returns the function that removes it. */
  on<K extends keyof C1mEventMap>(type: K, handler: Handler<K>): () => void {
    let set = this.#handlers.get(type);
    if (!set) this.#handlers.set(type, (set = new Set()));
    const entry = handler as (event: never) => void;
    set.add(entry);
    return () => void set.delete(entry);
  }

  /** Ends the subscription for good: no more events, no reconnect. */
  close(): void {
    if (this.#state === "closed") return;
    this.#generation++;
    clearTimeout(this.#retryTimer);
    this.#connection?.close();
    this.#connection = undefined;
    this.#setState("closed");
  }

  #emit<K extends keyof C1mEventMap>(type: K, event: C1mEventMap[K]): void {
    const set = this.#handlers.get(type) as Set<Handler<K>> | undefined;
    for (const handler of set ?? []) {
      try {
        handler(event);
      } catch (e) {
        // An app bug must not stop delivery to the other handlers; it is still reported:
        // reportError (browsers) shows it as an uncaught error without unwinding us.
        const report = (globalThis as { reportError?: (e: unknown) => void }).reportError;
        if (report) report(e);
        else
          setTimeout(() => {
            throw e;
          });
      }
    }
  }

  #setState(state: ConnectionState): void {
    if (this.#state !== state || !this.#stateAnnounced) {
      this.#stateAnnounced = true;
      this.#state = state;
      this.#emit("state", { state });
    }
  }

  async #connect(): Promise<void> {
    if (this.#state === "closed" || this.#state === "failed") return;
    this.#setState(this.#everOpened ? "reconnecting" : "connecting");
    const generation = ++this.#generation;
    let token: string | null | undefined;
    try {
      token = await this.#options.getToken?.();
    } catch (e) {
      if (generation !== this.#generation) return;
      return this.#retry(`getToken failed: ${e instanceof Error ? e.message : String(e)}`, false, false);
    }
    if (generation !== this.#generation) return; // closed while the token was fetched
    const lastId = this.#lastId;
    const url = subscribeUrl(this.#options.url, [...this.channels], this.transport, lastId, token);
    const current = () => generation === this.#generation;
    let opened = false;
    const sink: Sink = {
      open: () => {
        if (!current()) return;
        opened = true;
        this.#everOpened = true;
        this.#failures = 0;
        this.#unopened = 0;
        this.#setState("open");
        this.#emit("open", { transport: this.transport, lastId });
      },
      frame: (frame) => {
        if (current()) this.#deliver(frame);
      },
      shutdown: () => {
        if (current()) this.#emit("shutdown", { transport: this.transport });
      },
      expired: () => {
        if (current()) this.#emit("expired", { transport: this.transport });
      },
      end: (reason, refused = false) => {
        if (!current()) return;
        this.#connection = undefined;
        if (!opened && this.transport === "websocket" && /^close 1006\b/.test(reason)) {
          // What a browser reports for a refused upgrade (401, 403, Origin) and for an
          // unreachable server alike.
          reason = "close 1006 before open (refused or unreachable)";
        }
        this.#retry(reason, opened, refused);
      },
      problem: (reason) => {
        if (current()) this.#emit("error", { reason });
      },
    };
    this.#connection =
      this.transport === "websocket"
        ? connectWebSocket(this.#WebSocket!, url, sink)
        : connectEventSource(this.#EventSource!, url, [...this.channels], sink);
  }

  #deliver(frame: Frame): void {
    if (frame.kind === "gap") {
      this.#emit("gap", frame.gap);
      return;
    }
    const message = frame.message;
    if (!idAfter(message.id, this.#lastId)) {
      this.repeatsDropped++;
      return;
    }
    this.#lastId = message.id;
    this.#emit("message", message);
  }

  /** Schedules the next attempt, or gives up after `maxFailures` attempts in a row that ended
   * before opening. `opened`: the attempt that ended had opened (it does not count). */
  #retry(reason: string, opened: boolean, refused: boolean): void {
    if (this.#state === "closed") return;
    this.#failures++;
    if (!opened) this.#unopened++;
    const maxFailures = this.#options.maxFailures ?? DEFAULT_MAX_FAILURES;
    if (!opened && this.#unopened >= maxFailures) {
      this.#generation++;
      this.#setState("failed");
      this.#emit("failed", { attempts: this.#unopened, reason, refused });
      return;
    }
    const delayMs = backoffDelay(this.#failures, this.#options.backoff, this.#options.random);
    this.#setState(this.#everOpened ? "reconnecting" : "connecting");
    this.#emit("reconnect", { attempt: this.#failures, delayMs, reason });
    this.#retryTimer = setTimeout(() => void this.#connect(), delayMs);
  }
}

/** Subscribes to `options.channels` on the c1m server at `options.url`. */
export function subscribe(options: SubscribeOptions): Subscription {
  return new Subscription(options);
}
