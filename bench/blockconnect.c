/* blockconnect: the floor for connection-open rate. PROCS processes each open their share of
 * N connections with plain blocking connect() (one at a time, no event loop), bound to source
 * addresses 127.0.X.Y from a range with IP_BIND_ADDRESS_NO_PORT like c1m bench, and hold them.
 * With PATH (the subscribe floor), each connection then sends the SSE request c1m bench sends
 * (GET PATH, Accept: text/event-stream) and reads until the end of the response head, one
 * request and one response more per connection, like a subscribe: pair with `holdlisten ... sse`.
 * Prints connections opened, failures, and the wall time until the last process finished.
 * Usage: blockconnect DST_IP PORT N PROCS SRC_FIRST SRC_COUNT [PATH]   (SRC_FIRST e.g. 127.0.1.1)
 * Env HOLD=SECS: hold the connections that long after the last is open (or until SIGTERM). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void on_term(int sig) { (void)sig; /* only wakes the HOLD wait */ }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Sends the subscribe request and reads up to the blank line ending the response head
 * (10 s receive timeout, as bench's connect+subscribe bound). 0 on success. */
static int subscribe(int s, const char *req, size_t req_len) {
    struct timeval tv = {.tv_sec = 10};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (write(s, req, req_len) != (ssize_t)req_len) return -1;
    char buf[1024];
    size_t have = 0;
    for (;;) {
        ssize_t n = read(s, buf + have, sizeof buf - 1 - have);
        if (n <= 0) return -1;
        have += (size_t)n;
        buf[have] = 0;
        if (strstr(buf, "\r\n\r\n")) return 0;
        if (have == sizeof buf - 1) return -1;
    }
}

int main(int argc, char **argv) {
    if (argc != 7 && argc != 8) {
        fprintf(stderr, "usage: blockconnect DST_IP PORT N PROCS SRC_FIRST SRC_COUNT [PATH]\n");
        return 2;
    }
    char req[512];
    int req_len = 0;
    if (argc == 8)
        req_len = snprintf(req, sizeof req,
                           "GET %s HTTP/1.1\r\nHost: %s:%s\r\nAccept: text/event-stream\r\n"
                           "Cache-Control: no-cache\r\n\r\n",
                           argv[7], argv[1], argv[2]);
    long n = atol(argv[3]);
    int procs = atoi(argv[4]), nsrc = atoi(argv[6]);
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    inet_pton(AF_INET, argv[1], &dst.sin_addr);
    struct in_addr src0;
    inet_pton(AF_INET, argv[5], &src0);
    int fds[2];
    if (pipe(fds)) return 2;
    if (procs < 1 || procs > 1024) return 2;
    pid_t pids[1024];
    double t0 = now();
    for (int p = 0; p < procs; p++) {
        if ((pids[p] = fork()) == 0) {
            struct rlimit rl;
            getrlimit(RLIMIT_NOFILE, &rl);
            rl.rlim_cur = rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
            long share = n / procs + (p < n % procs), ok = 0, fail = 0;
            for (long i = 0; i < share; i++) {
                long g = (long)p + i * procs;
                int s = socket(AF_INET, SOCK_STREAM, 0);
                if (s < 0) { fail++; continue; }
                int one = 1;
                setsockopt(s, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
                struct sockaddr_in src = {.sin_family = AF_INET};
                src.sin_addr.s_addr = htonl(ntohl(src0.s_addr) + (uint32_t)(g % nsrc));
                if (bind(s, (struct sockaddr *)&src, sizeof src) ||
                    connect(s, (struct sockaddr *)&dst, sizeof dst) ||
                    (req_len > 0 && subscribe(s, req, (size_t)req_len))) {
                    fail++;
                    close(s);
                    continue;
                }
                ok++;
            }
            char line[64];
            int len = snprintf(line, sizeof line, "%ld %ld\n", ok, fail);
            if (write(fds[1], line, len) < 0) _exit(1);
            pause(); /* hold until the parent ends us */
            _exit(0);
        }
    }
    close(fds[1]);
    FILE *in = fdopen(fds[0], "r");
    long ok = 0, fail = 0, a, b;
    for (int p = 0; p < procs && fscanf(in, "%ld %ld", &a, &b) == 2; p++) {
        ok += a;
        fail += b;
    }
    double dt = now() - t0;
    printf("opened %ld failed %ld seconds %.3f rate %.0f\n", ok, fail, dt, ok / dt);
    fflush(stdout);
    /* HOLD=SECS: keep the connections open that long (a SIGTERM ends the wait early). */
    const char *hold = getenv("HOLD");
    if (hold) {
        signal(SIGTERM, on_term);
        sleep((unsigned)atoi(hold));
    }
    for (int p = 0; p < procs; p++) kill(pids[p], SIGTERM);
    while (wait(NULL) > 0) {}
    return 0;
}
