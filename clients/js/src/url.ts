/** The subscribe URL of one connection attempt: `/sub/{ch}[,{ch}…]` with the resume position
 * and the token as query parameters (docs/PROTOCOL.md, "Subscribe"). */
import type { Transport } from "./types.js";

const CHANNEL = /^[A-Za-z0-9_.:-]{1,64}$/;

/** Channel names the server accepts; anything else would be answered 400 on every attempt,
 * so it is refused up front. */
export function checkChannels(channels: string | string[]): string[] {
  const list = typeof channels === "string" ? [channels] : [...channels];
  if (list.length === 0) throw new TypeError("c1m: at least one channel is needed");
  for (const c of list) {
    if (!CHANNEL.test(c)) {
      throw new TypeError(`c1m: bad channel name ${JSON.stringify(c)} (1-64 of [A-Za-z0-9_.:-])`);
    }
  }
  return list;
}

export function subscribeUrl(
  base: string,
  channels: string[],
  transport: Transport,
  lastId: string | undefined,
  token: string | null | undefined,
): string {
  const url = new URL(base);
  if (transport === "websocket") {
    if (url.protocol === "http:") url.protocol = "ws:";
    else if (url.protocol === "https:") url.protocol = "wss:";
  }
  const prefix = url.pathname.replace(/\/+$/, "");
  url.pathname = `${prefix}/sub/${channels.join(",")}`;
  url.search = "";
  // A fresh EventSource sends no Last-Event-ID header, so the position goes in the query for
  // both transports (the server reads either).
  if (lastId !== undefined) url.searchParams.set("last_id", lastId);
  if (token !== null && token !== undefined) url.searchParams.set("token", token);
  return url.toString();
}
