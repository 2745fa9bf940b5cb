/**
 * @c1m/client: subscribe to a c1m push gateway over SSE or WebSocket, with automatic
 * reconnect (exponential backoff with jitter), exact resume from the last id, gap notices,
 * and a token hook called before every connection. No runtime dependencies.
 */
export { subscribe, Subscription, DEFAULT_MAX_FAILURES } from "./subscription.js";
export { backoffDelay, DEFAULT_BACKOFF } from "./backoff.js";
export { subscribeUrl } from "./url.js";
export { parseWsFrame } from "./envelope.js";
export type * from "./types.js";
