#!/usr/bin/env python3
"""A backend for the proxy benchmark (bench/hooks.sh): answers every POST with
{"result":{}} (allow), after SLOW seconds on paths starting with /slow. HTTP/1.1 keep-alive,
one thread per connection (stdlib only). Loopback only; it stops itself after --lifetime
seconds (bounded), and prints its port on stdout when it listens.

    python3 bench/proxy_backend.py [--port 0] [--slow 120] [--lifetime 900]
"""
import argparse
import http.server
import sys
import threading
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--slow", type=float, default=120.0)
    ap.add_argument("--lifetime", type=float, default=900.0)
    args = ap.parse_args()
    answer = b'{"result":{}}'

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in separate writes: without TCP_NODELAY the body waits for
        # the client's delayed ACK (40 ms per call).
        disable_nagle_algorithm = True

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(n)
            if self.path.startswith("/slow"):
                time.sleep(args.slow)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *a):
            pass

    http.server.ThreadingHTTPServer.daemon_threads = True
    http.server.ThreadingHTTPServer.request_queue_size = 1024
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(server.server_address[1], flush=True)
    threading.Timer(args.lifetime, server.shutdown).start()
    server.serve_forever()
    sys.exit(0)


if __name__ == "__main__":
    main()
