/**
 * Decoding what the server sends into typed events: the WebSocket JSON envelope
 * (`{"channel","id","data"|"data_base64"}` or `{"type":"gap",…}`) and SSE gap data.
 * Ids arrive as JSON numbers; they stay below 2^53 (microseconds since 1970) until the year
 * 2255, so converting them to decimal strings loses nothing.
 */
import type { C1mGap, C1mMessage } from "./types.js";

export type Frame = { kind: "message"; message: C1mMessage } | { kind: "gap"; gap: C1mGap };

function idString(v: unknown, what: string): string {
  if (typeof v === "number" && Number.isSafeInteger(v) && v >= 0) return String(v);
  if (typeof v === "string" && /^\d+$/.test(v)) return v;
  throw new Error(`c1m: ${what} is not an id: ${JSON.stringify(v)}`);
}

export function decodeBase64(b64: string): Uint8Array {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

export function parseGap(value: unknown): C1mGap {
  const g = value as Record<string, unknown>;
  if (typeof g !== "object" || g === null || typeof g.channel !== "string") {
    throw new Error(`c1m: bad gap notice: ${JSON.stringify(value)}`);
  }
  return { channel: g.channel, after: idString(g.after, "gap.after"), through: idString(g.through, "gap.through") };
}

/** One WebSocket text frame in the JSON envelope. Throws on anything else. */
export function parseWsFrame(text: string): Frame {
  const v = JSON.parse(text) as Record<string, unknown>;
  if (typeof v !== "object" || v === null) throw new Error("c1m: frame is not a JSON object");
  if (v.type === "gap") return { kind: "gap", gap: parseGap(v) };
  if (typeof v.channel !== "string") throw new Error("c1m: frame without a channel");
  const id = idString(v.id, "message id");
  let data: string | Uint8Array;
  if (typeof v.data === "string") data = v.data;
  else if (typeof v.data_base64 === "string") data = decodeBase64(v.data_base64);
  else throw new Error("c1m: frame without data");
  return { kind: "message", message: { channel: v.channel, id, data } };
}

/** `a > b` for decimal id strings (BigInt: exact at any size). */
export function idAfter(a: string, b: string | undefined): boolean {
  return b === undefined || BigInt(a) > BigInt(b);
}
