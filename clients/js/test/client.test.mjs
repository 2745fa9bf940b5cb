// Unit tests of the client against fake transports (node --test). The end-to-end test against
// a real server in a real browser is crates/c1m/tests/serve_js_client.rs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { backoffDelay, parseWsFrame, subscribe, subscribeUrl } from "../dist/index.js";
import { FakeEventSource, FakeWebSocket, tick, until } from "./fakes.mjs";

const fast = { initialMs: 1, maxMs: 4, factor: 2 };

function collect(sub) {
  const seen = [];
  for (const type of ["message", "gap", "open", "reconnect", "shutdown", "error", "expired", "failed", "state"]) {
    sub.on(type, (e) => seen.push([type, e]));
  }
  return seen;
}

test("backoff grows exponentially, is capped, and jitters within [ceiling/2, ceiling]", () => {
  const opts = { initialMs: 100, maxMs: 1000, factor: 2 };
  assert.equal(backoffDelay(1, opts, () => 0), 50);
  assert.equal(backoffDelay(1, opts, () => 1), 100);
  assert.equal(backoffDelay(3, opts, () => 0.5), 300); // ceiling 400
  assert.equal(backoffDelay(10, opts, () => 1), 1000);
  assert.equal(backoffDelay(10, opts, () => 0), 500);
  for (let i = 0; i < 200; i++) {
    const d = backoffDelay(4, opts); // ceiling 800, Math.random
    assert.ok(d >= 400 && d <= 800, String(d));
  }
  // Defaults: 500 ms first ceiling, 30 s cap.
  assert.equal(backoffDelay(1, {}, () => 1), 500);
  assert.equal(backoffDelay(50, {}, () => 1), 30000);
});

test("subscribe URLs carry channels, last_id and token; websocket gets ws(s)://", () => {
  assert.equal(
    subscribeUrl("http://h:8080", ["a", "b"], "websocket", "17", "t k"),
    "ws://h:8080/sub/a,b?last_id=17&token=t+k",
  );
  assert.equal(subscribeUrl("https://h/base/", ["a"], "websocket", undefined, null), "wss://h/base/sub/a");
  assert.equal(subscribeUrl("https://h", ["a"], "sse", "5", undefined), "https://h/sub/a?last_id=5");
  assert.throws(() => subscribe({ url: "http://h", channels: "bad channel", WebSocket: FakeWebSocket }), /bad channel/);
  assert.throws(() => subscribe({ url: "http://h", channels: [], WebSocket: FakeWebSocket }), /at least one/);
});

test("websocket envelope: text, base64 bytes, gaps; garbage is refused", () => {
  const m = parseWsFrame('{"channel":"n","id":1732250000000123,"data":"hi"}');
  assert.deepEqual(m, { kind: "message", message: { channel: "n", id: "1732250000000123", data: "hi" } });
  const b = parseWsFrame('{"channel":"n","id":2,"data_base64":"/wA="}');
  assert.deepEqual([...b.message.data], [255, 0]);
  const g = parseWsFrame('{"type":"gap","channel":"n","after":1,"through":9}');
  assert.deepEqual(g, { kind: "gap", gap: { channel: "n", after: "1", through: "9" } });
  assert.throws(() => parseWsFrame('{"channel":"n","id":-1,"data":"x"}'));
  assert.throws(() => parseWsFrame("not json"));
});

test("websocket: reconnects with backoff, resumes from the last id, fresh token each time", async () => {
  FakeWebSocket.instances = [];
  let tokens = 0;
  const sub = subscribe({
    url: "http://127.0.0.1:8080",
    channels: "news",
    WebSocket: FakeWebSocket,
    backoff: fast,
    getToken: async () => `tok${++tokens}`,
  });
  const seen = collect(sub);
  await until(() => FakeWebSocket.instances.length === 1, "first connection");
  const first = FakeWebSocket.instances[0];
  assert.equal(first.url, "ws://127.0.0.1:8080/sub/news?token=tok1");
  first.open();
  first.send({ channel: "news", id: 10, data: "a" });
  first.send({ channel: "news", id: 11, data: "b" });
  first.serverClose(4008, "slow consumer");
  await until(() => FakeWebSocket.instances.length === 2, "reconnect");
  const second = FakeWebSocket.instances[1];
  assert.equal(second.url, "ws://127.0.0.1:8080/sub/news?last_id=11&token=tok2");
  second.open();
  // A repeat (id not after the last) is dropped; the gap is surfaced, then new messages.
  second.send({ channel: "news", id: 11, data: "b" });
  second.send({ type: "gap", channel: "news", after: 11, through: 20 });
  second.send({ channel: "news", id: 21, data: "c" });
  const messages = seen.filter(([t]) => t === "message").map(([, m]) => m.data);
  assert.deepEqual(messages, ["a", "b", "c"]);
  assert.equal(sub.repeatsDropped, 1);
  assert.deepEqual(seen.find(([t]) => t === "gap")[1], { channel: "news", after: "11", through: "20" });
  const reconnect = seen.find(([t]) => t === "reconnect")[1];
  assert.equal(reconnect.attempt, 1);
  assert.match(reconnect.reason, /4008 slow consumer/);
  assert.equal(sub.lastId, "21");
  sub.close();
  assert.ok(second.closedByClient);
  assert.equal(sub.state, "closed");
});

test("websocket close 1001 is a shutdown notice and still reconnects", async () => {
  FakeWebSocket.instances = [];
  const sub = subscribe({ url: "http://h", channels: ["a", "b"], WebSocket: FakeWebSocket, backoff: fast });
  const seen = collect(sub);
  await until(() => FakeWebSocket.instances.length === 1, "connection");
  FakeWebSocket.instances[0].open();
  FakeWebSocket.instances[0].serverClose(1001);
  await until(() => FakeWebSocket.instances.length === 2, "reconnect");
  assert.ok(seen.some(([t]) => t === "shutdown"));
  assert.equal(FakeWebSocket.instances[1].url, "ws://h/sub/a,b");
  sub.close();
});

test("failed attempts back off more and more; an open connection resets the count", async () => {
  FakeWebSocket.instances = [];
  const sub = subscribe({ url: "http://h", channels: "c", WebSocket: FakeWebSocket, backoff: { initialMs: 1, maxMs: 1000, factor: 2 }, random: () => 1 });
  const delays = [];
  sub.on("reconnect", (r) => delays.push(r.delayMs));
  for (let i = 1; i <= 4; i++) {
    await until(() => FakeWebSocket.instances.length === i, `attempt ${i}`);
    FakeWebSocket.instances[i - 1].serverClose(1006);
  }
  await until(() => FakeWebSocket.instances.length === 5, "attempt 5");
  FakeWebSocket.instances[4].open();
  FakeWebSocket.instances[4].serverClose(1006);
  await until(() => delays.length === 5, "fifth reconnect");
  assert.deepEqual(delays, [1, 2, 4, 8, 1]);
  sub.close();
});

test("a token hook that throws is reported and retried", async () => {
  FakeWebSocket.instances = [];
  let calls = 0;
  const sub = subscribe({
    url: "http://h",
    channels: "c",
    WebSocket: FakeWebSocket,
    backoff: fast,
    getToken: () => {
      if (++calls === 1) throw new Error("auth server down");
      return "good";
    },
  });
  const seen = collect(sub);
  await until(() => FakeWebSocket.instances.length === 1, "connection after retry");
  assert.equal(FakeWebSocket.instances[0].url, "ws://h/sub/c?token=good");
  assert.match(seen.find(([t]) => t === "reconnect")[1].reason, /auth server down/);
  sub.close();
});

test("sse: messages by id, gap and shutdown events, own reconnect with last_id", async () => {
  FakeEventSource.instances = [];
  const sub = subscribe({ url: "http://h:1", channels: ["x", "y"], transport: "sse", EventSource: FakeEventSource, backoff: fast, lastId: "5" });
  const seen = collect(sub);
  await until(() => FakeEventSource.instances.length === 1, "connection");
  const es = FakeEventSource.instances[0];
  assert.equal(es.url, "http://h:1/sub/x,y?last_id=5");
  es.open();
  es.dispatch("gap", '{"channel":"x","after":5,"through":7}');
  es.dispatch("x", "one", "8");
  es.dispatch("y", "two", "9");
  es.dispatch("shutdown", "");
  es.fail();
  assert.ok(es.closed, "the browser's own reconnect is stopped");
  await until(() => FakeEventSource.instances.length === 2, "reconnect");
  assert.equal(FakeEventSource.instances[1].url, "http://h:1/sub/x,y?last_id=9");
  const messages = seen.filter(([t]) => t === "message").map(([, m]) => [m.channel, m.id, m.data]);
  assert.deepEqual(messages, [["x", "8", "one"], ["y", "9", "two"]]);
  assert.ok(seen.some(([t]) => t === "shutdown"));
  assert.deepEqual(seen.find(([t]) => t === "gap")[1], { channel: "x", after: "5", through: "7" });
  sub.close();
  await tick(10);
  assert.equal(FakeEventSource.instances.length, 2, "no reconnect after close");
});

test("a handler that throws does not stop delivery to the others", async () => {
  FakeWebSocket.instances = [];
  const sub = subscribe({ url: "http://h", channels: "c", WebSocket: FakeWebSocket, backoff: fast });
  const got = [];
  const errors = [];
  const saved = globalThis.reportError;
  globalThis.reportError = (e) => errors.push(e.message);
  sub.on("message", () => {
    throw new Error("app bug");
  });
  sub.on("message", (m) => got.push(m.data));
  await until(() => FakeWebSocket.instances.length === 1, "connection");
  FakeWebSocket.instances[0].open();
  FakeWebSocket.instances[0].send({ channel: "c", id: 1, data: "x" });
  FakeWebSocket.instances[0].send({ channel: "c", id: 2, data: "y" });
  await tick(5);
  globalThis.reportError = saved;
  assert.deepEqual(got, ["x", "y"]);
  assert.deepEqual(errors, ["app bug", "app bug"]);
  sub.close();
});

test("state: connecting is emitted first, reconnecting only after an open connection ended", async () => {
  FakeWebSocket.instances = [];
  const sub = subscribe({ url: "http://h", channels: "c", WebSocket: FakeWebSocket, backoff: fast });
  const states = [];
  sub.on("state", (e) => states.push(e.state));
  await until(() => FakeWebSocket.instances.length === 1, "first attempt");
  FakeWebSocket.instances[0].serverClose(1006); // the first attempt fails: still connecting
  await until(() => FakeWebSocket.instances.length === 2, "second attempt");
  FakeWebSocket.instances[1].open();
  FakeWebSocket.instances[1].serverClose(1006);
  await until(() => FakeWebSocket.instances.length === 3, "third attempt");
  FakeWebSocket.instances[2].open();
  sub.close();
  assert.deepEqual(states, ["connecting", "open", "reconnecting", "open", "closed"]);
});

test("sse refused (401 or CORS) gives up after maxFailures with backoff: failed, refused", async () => {
  FakeEventSource.instances = [];
  const sub = subscribe({
    url: "http://h",
    channels: "c",
    transport: "sse",
    EventSource: FakeEventSource,
    backoff: { initialMs: 1, maxMs: 1000, factor: 2 },
    random: () => 1,
    maxFailures: 4,
  });
  const seen = collect(sub);
  for (let i = 1; i <= 4; i++) {
    await until(() => FakeEventSource.instances.length === i, `attempt ${i}`);
    FakeEventSource.instances[i - 1].refuse();
  }
  await until(() => seen.some(([t]) => t === "failed"), "failed event");
  await tick(30);
  assert.equal(FakeEventSource.instances.length, 4, "no attempt after giving up");
  assert.equal(sub.state, "failed");
  const delays = seen.filter(([t]) => t === "reconnect").map(([, r]) => r.delayMs);
  assert.deepEqual(delays, [1, 2, 4]);
  const failed = seen.find(([t]) => t === "failed")[1];
  assert.deepEqual(failed, { attempts: 4, reason: "refused (HTTP error status or CORS)", refused: true });
  assert.deepEqual(
    seen.filter(([t]) => t === "state").map(([, s]) => s.state),
    ["connecting", "failed"],
  );
  sub.close();
  assert.equal(sub.state, "closed");
});

test("websocket refused at the upgrade (1006 before open) gives up; an open in between resets", async () => {
  FakeWebSocket.instances = [];
  const sub = subscribe({ url: "http://h", channels: "c", WebSocket: FakeWebSocket, backoff: fast, maxFailures: 3 });
  const seen = collect(sub);
  // Two failures, then an open connection that drops: the count starts over.
  for (let i = 1; i <= 2; i++) {
    await until(() => FakeWebSocket.instances.length === i, `attempt ${i}`);
    FakeWebSocket.instances[i - 1].serverClose(1006);
  }
  await until(() => FakeWebSocket.instances.length === 3, "attempt 3");
  FakeWebSocket.instances[2].open();
  FakeWebSocket.instances[2].serverClose(1006);
  for (let i = 4; i <= 6; i++) {
    await until(() => FakeWebSocket.instances.length === i, `attempt ${i}`);
    FakeWebSocket.instances[i - 1].serverClose(1006);
  }
  await until(() => sub.state === "failed", "failed");
  await tick(20);
  assert.equal(FakeWebSocket.instances.length, 6);
  const failed = seen.find(([t]) => t === "failed")[1];
  assert.equal(failed.attempts, 3);
  assert.equal(failed.refused, false);
  assert.match(failed.reason, /before open \(refused or unreachable\)/);
  sub.close();
});

test("sse event: expired is reported as expiry and resumes with a fresh token", async () => {
  FakeEventSource.instances = [];
  let tokens = 0;
  const sub = subscribe({
    url: "http://h",
    channels: "c",
    transport: "sse",
    EventSource: FakeEventSource,
    backoff: fast,
    getToken: () => `t${++tokens}`,
  });
  const seen = collect(sub);
  await until(() => FakeEventSource.instances.length === 1, "connection");
  const es = FakeEventSource.instances[0];
  es.open();
  es.dispatch("message", "m", "7");
  es.dispatch("expired", "token expired");
  es.fail(); // the server then closes the stream
  await until(() => FakeEventSource.instances.length === 2, "reconnect");
  assert.equal(FakeEventSource.instances[1].url, "http://h/sub/c?last_id=7&token=t2");
  assert.deepEqual(seen.find(([t]) => t === "expired")[1], { transport: "sse" });
  const reconnects = seen.filter(([t]) => t === "reconnect").map(([, r]) => r.reason);
  assert.deepEqual(reconnects, ["token expired"]);
  sub.close();
});

test("websocket close 4001 is reported as expiry", async () => {
  FakeWebSocket.instances = [];
  const sub = subscribe({ url: "http://h", channels: "c", WebSocket: FakeWebSocket, backoff: fast });
  const seen = collect(sub);
  await until(() => FakeWebSocket.instances.length === 1, "connection");
  FakeWebSocket.instances[0].open();
  FakeWebSocket.instances[0].serverClose(4001, "token expired; reconnect with a new token and last_id");
  await until(() => FakeWebSocket.instances.length === 2, "reconnect");
  assert.deepEqual(seen.find(([t]) => t === "expired")[1], { transport: "websocket" });
  assert.equal(seen.find(([t]) => t === "reconnect")[1].reason, "token expired");
  assert.ok(!seen.some(([t]) => t === "failed"));
  sub.close();
});

test("without a WebSocket implementation the error names the Node versions", () => {
  const saved = globalThis.WebSocket;
  try {
    delete globalThis.WebSocket;
    assert.throws(
      () => subscribe({ url: "http://h", channels: "c", transport: "websocket" }),
      /Node 22\+.*--experimental-websocket/,
    );
    assert.throws(() => subscribe({ url: "http://h", channels: "c", maxFailures: 0, WebSocket: FakeWebSocket }), /maxFailures/);
  } finally {
    if (saved !== undefined) globalThis.WebSocket = saved;
  }
});

test("websocket error without a close event (Node 20 on a refused connect) still ends the attempt", async () => {
  FakeWebSocket.instances = [];
  const sub = subscribe({ url: "http://h", channels: "c", WebSocket: FakeWebSocket, backoff: fast, maxFailures: 2 });
  const seen = collect(sub);
  await until(() => FakeWebSocket.instances.length === 1, "connection");
  FakeWebSocket.instances[0].errorOnly();
  await until(() => FakeWebSocket.instances.length === 2, "retry after the error alone");
  FakeWebSocket.instances[1].errorOnly();
  await until(() => sub.state === "failed", "gave up");
  assert.match(seen.find(([t]) => t === "failed")[1].reason, /before open/);
  sub.close();
});
