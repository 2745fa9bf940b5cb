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
  #failures = 0;
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
    new URL(options.url); // throws a TypeError now rather than on every attempt
    this.#options = options;
    this.#lastId = options.lastId;
    const g = globalThis as { WebSocket?: WebSocketConstructor; EventSource?: EventSourceConstructor };
    this.#WebSocket = options.WebSocket ?? g.WebSocket;
    this.#EventSource = options.EventSource ?? g.EventSource;
    this.transport = options.transport ?? (this.#WebSocket ? "websocket" : "sse");
    if (this.transport === "websocket" && !this.#WebSocket) {
      throw new TypeError("c1m: no WebSocket implementation (pass options.WebSocket)");
    }
    if (this.transport === "sse" && !this.#EventSource) {
      throw new TypeError("c1m: no EventSource implementation (pass options.EventSource)");
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
    if (this.#state !== state) {
      this.#state = state;
      this.#emit("state", { state });
    }
  }

  async #connect(): Promise<void> {
    if (this.#state === "closed") return;
    const generation = ++this.#generation;
    let token: string | null | undefined;
    try {
      token = await this.#options.getToken?.();
    } catch (e) {
      if (generation !== this.#generation) return;
      return this.#retry(`getToken failed: ${e instanceof Error ? e.message : String(e)}`);
    }
    if (generation !== this.#generation) return; // closed while the token was fetched
    const lastId = this.#lastId;
    const url = subscribeUrl(this.#options.url, [...this.channels], this.transport, lastId, token);
    const current = () => generation === this.#generation;
    const sink: Sink = {
      open: () => {
        if (!current()) return;
        this.#failures = 0;
        this.#setState("open");
        this.#emit("open", { transport: this.transport, lastId });
      },
      frame: (frame) => {
        if (current()) this.#deliver(frame);
      },
      shutdown: () => {
        if (current()) this.#emit("shutdown", { transport: this.transport });
      },
      end: (reason) => {
        if (!current()) return;
        this.#connection = undefined;
        this.#retry(reason);
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

  #retry(reason: string): void {
    if (this.#state === "closed") return;
    this.#failures++;
    const delayMs = backoffDelay(this.#failures, this.#options.backoff, this.#options.random);
    this.#setState("reconnecting");
    this.#emit("reconnect", { attempt: this.#failures, delayMs, reason });
    this.#retryTimer = setTimeout(() => void this.#connect(), delayMs);
  }
}

/** Subscribes to `options.channels` on the c1m server at `options.url`. */
export function subscribe(options: SubscribeOptions): Subscription {
  return new Subscription(options);
}
