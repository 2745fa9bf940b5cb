#!/usr/bin/env python3
"""tls-hold.py: a small dedicated TLS client for bench/tls-memory.sh and tls-handshakes.sh.

`c1m bench` speaks no TLS yet, so this opens and holds the connections with Python's ssl
(OpenSSL) and a selector loop, spread over several processes (RLIMIT_NOFILE is per process) and several
loopback source addresses (one address has ~28K ephemeral ports per destination).

  hold:       tls-hold.py hold HOST PORT N --ca CA.pem [--procs P] [--path /sub/mem]
              [--proto sse|tcp|plain-sse] [--concurrency C] [--ready FILE]
              Opens N subscriptions (SSE over TLS, the TCP line protocol over TLS, or SSE
              without TLS for the baseline), writes "ready OPEN FAILED" to --ready when done,
              then holds them, reading and discarding what arrives (heartbeats), until SIGTERM.
  handshakes: tls-hold.py handshakes HOST PORT SECONDS --ca CA.pem [--procs P]
              Full handshakes (no session resumption) back to back, each connection closed
              after its handshake; prints the count.
Every wait is bounded.
"""
import argparse, multiprocessing as mp, os, signal, ssl, sys, time


def context(ca):
    ctx = ssl.create_default_context(cafile=ca)
    ctx.check_hostname = False  # the test certificate names 127.0.0.1; the CA is still verified
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


class Sub:
    """One subscription driven by a selector: connect, handshake, request, answer, hold."""
    __slots__ = ("sock", "state", "got")


def hold_proc(args, index, n, q):
    """Opens n subscriptions with non-blocking sockets and one selector (asyncio's SSL
    transport keeps a 256 KiB buffer per connection: far too much for 100K)."""
    import selectors, socket
    ctx = context(args.ca)
    src = f"127.0.{1 + index // 200}.{10 + index % 200}"
    sel = selectors.DefaultSelector()
    if args.proto == "tcp":
        request = f"SUB {args.path.rsplit('/', 1)[-1]}\n".encode()
    else:
        request = f"GET {args.path} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n".encode()
    tls = args.proto != "plain-sse"
    started, held, failed, errors, pending = 0, 0, 0, {}, 0
    deadline = time.monotonic() + args.max_hold

    def fail(sub, why):
        nonlocal failed, pending
        failed += 1
        pending -= 1
        errors[why] = errors.get(why, 0) + 1
        try:
            sel.unregister(sub.sock)
        except Exception:
            pass
        sub.sock.close()

    def start():
        nonlocal started, pending
        started += 1
        pending += 1
        raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        raw.setblocking(False)
        raw.bind((src, 0))
        sub = Sub()
        sub.got = b""
        try:
            raw.connect((args.host, args.port))
        except BlockingIOError:
            pass
        except OSError as e:
            sub.sock = raw
            return fail(sub, type(e).__name__)
        sub.sock = ctx.wrap_socket(raw, do_handshake_on_connect=False) if tls else raw
        sub.state = "hs" if tls else "send"
        sel.register(sub.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, sub)

    def step(sub):
        nonlocal held, pending
        try:
            if sub.state == "hs":
                sub.sock.do_handshake()
                sub.state = "send"
            if sub.state == "send":
                sub.sock.send(request)  # small: goes out whole
                sub.state = "answer"
                sel.modify(sub.sock, selectors.EVENT_READ, sub)
            if sub.state == "answer":
                while True:
                    data = sub.sock.recv(4096)
                    if not data:
                        return fail(sub, "closed")
                    sub.got += data
                    if b"\n" in sub.got:
                        break
                line = sub.got.split(b"\n", 1)[0]
                if not (line.startswith(b"OK") or b" 200 " in line):
                    return fail(sub, f"answer {line[:40]!r}")
                sub.state, sub.got = "held", b""
                held += 1
                pending -= 1
            if sub.state == "held":
                while True:  # heartbeats: read and drop
                    if not sub.sock.recv(4096):
                        return fail(sub, "closed while held")
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
            return
        except OSError as e:
            return fail(sub, type(e).__name__)

    reported = False
    while time.monotonic() < deadline:
        while started < n and pending < args.concurrency:
            start()
        for key, _ in sel.select(timeout=0.5):
            step(key.data)
        if not reported and started == n and pending == 0:
            q.put((held, failed, errors))
            reported = True
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))


def run_hold(args, index, n, q):
    hold_proc(args, index, n, q)


def run_handshakes(args, index, q):
    ctx = context(args.ca)
    src = f"127.0.{1 + index // 200}.{10 + index % 200}"
    import socket
    end, count, failed = time.monotonic() + args.seconds, 0, 0
    while time.monotonic() < end:
        try:
            with socket.create_connection((args.host, args.port), timeout=10,
                                          source_address=(src, 0)) as s:
                with ctx.wrap_socket(s) as t:
                    t.do_handshake()
                    count += 1
        except OSError:
            failed += 1
    q.put((count, failed))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["hold", "handshakes"])
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("amount", type=float, help="hold: connections; handshakes: seconds")
    p.add_argument("--ca", required=True)
    p.add_argument("--procs", type=int, default=os.cpu_count())
    p.add_argument("--proto", default="sse", choices=["sse", "tcp", "plain-sse"])
    p.add_argument("--path", default="/sub/mem")
    p.add_argument("--concurrency", type=int, default=100)
    p.add_argument("--ready", default=None)
    p.add_argument("--max-hold", type=float, default=600)
    args = p.parse_args()
    q = mp.Queue()
    if args.mode == "handshakes":
        args.seconds = args.amount
        ps = [mp.Process(target=run_handshakes, args=(args, i, q)) for i in range(args.procs)]
        for x in ps:
            x.start()
        res = [q.get(timeout=args.seconds + 60) for _ in ps]
        for x in ps:
            x.join(10)
        print(f"handshakes {sum(r[0] for r in res)} failed {sum(r[1] for r in res)}")
        return
    n = int(args.amount)
    per = [n // args.procs + (1 if i < n % args.procs else 0) for i in range(args.procs)]
    ps = [mp.Process(target=run_hold, args=(args, i, per[i], q)) for i in range(args.procs)]
    for x in ps:
        x.start()

    def stop(*_):
        for x in ps:
            if x.pid:
                os.kill(x.pid, signal.SIGTERM)
    signal.signal(signal.SIGTERM, stop)
    res = [q.get(timeout=args.max_hold) for _ in ps]
    opened, failed = sum(r[0] for r in res), sum(r[1] for r in res)
    errors = {}
    for r in res:
        for k, v in r[2].items():
            errors[k] = errors.get(k, 0) + v
    msg = f"ready {opened} {failed} {errors}"
    print(msg, flush=True)
    if args.ready:
        with open(args.ready, "w") as f:
            f.write(msg + "\n")
    for x in ps:
        x.join(args.max_hold + 30)


if __name__ == "__main__":
    main()
