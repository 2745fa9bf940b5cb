/**
 * Reconnect delays: exponential growth with "equal jitter" (half the ceiling fixed, half
 * random), so a server restart that drops thousands of clients does not get them all back in
 * the same instant, and no client ever retries with a near-zero delay in a tight loop.
 */
import type { BackoffOptions } from "./types.js";

export const DEFAULT_BACKOFF: Required<BackoffOptions> = {
  initialMs: 500,
  maxMs: 30_000,
  factor: 2,
};

/** Delay before retry number `attempt` (1 = first retry): in [ceiling/2, ceiling], where the
 * ceiling is initialMs × factor^(attempt-1), capped at maxMs. */
export function backoffDelay(
  attempt: number,
  options: BackoffOptions = {},
  random: () => number = Math.random,
): number {
  const { initialMs, maxMs, factor } = { ...DEFAULT_BACKOFF, ...options };
  const exponent = Math.max(0, attempt - 1);
  const ceiling = Math.min(maxMs, initialMs * Math.pow(factor, exponent));
  const r = Math.min(1, Math.max(0, random()));
  return Math.round(ceiling / 2 + (ceiling / 2) * r);
}
