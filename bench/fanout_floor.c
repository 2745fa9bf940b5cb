/* fanout_floor: the floor for SSE fan-out. A trivial multi-process server that speaks just
 * enough HTTP for `c1m bench --proto sse` to subscribe and publish, and nothing else:
 *
 *   GET /sub/...   -> the same response head as c1m serve's SSE (docs/PROTOCOL.md), then the
 *                     socket is held; bytes read from it are discarded.
 *   POST /pub/CH   -> id = next value of a shared counter (starts at the Unix time in µs, like
 *                     c1m serve's); the event "id: ID\ndata: LINE\n" ... "\n" (one data line
 *                     per payload line, as c1m serve encodes it) goes down a pipe to every
 *                     process, and each process write()s it to every subscriber it holds, one
 *                     write() per socket. Answers 200 {"channel":"CH","id":ID} (keep-alive).
 *   anything else  -> 404 and close.
 *
 * PROCS processes share the port with SO_REUSEPORT (RLIMIT_NOFILE is per process); each is
 * one epoll loop. No history, no per-channel routing (every subscriber gets every message):
 * this is the least work that delivers the same bytes. On SIGTERM each process prints to
 * stderr its subscribers, messages, writes, short/failed writes and its slowest fan-out.
 * Usage: fanout_floor ADDR PORT PROCS   (SIGTERM to the parent stops all; workers also die
 * with the parent). Start it in the same session as the server it is compared with: with
 * sched_autogroup a new session (setsid) is a separate CPU-share group. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXFD 65536
#define MAXPROCS 256
static const char HEAD[] =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    "Connection: keep-alive\r\nX-Accel-Buffering: no\r\n\r\n";
static const char NOTFOUND[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

enum { FREE = 0, HEADSTATE, SUB, LISTEN, PIPE };
static unsigned char state[MAXFD];
static char *pend[MAXFD];    /* partial request bytes (only while a request is incomplete) */
static size_t pendlen[MAXFD];
static int subpos[MAXFD];    /* index in subs[] */
static int subs[MAXFD], nsubs;
static int pipes_w[MAXPROCS], nprocs, myidx, ep;
static volatile uint64_t *counter;
static volatile sig_atomic_t stop;
static long long msgs, writes, shortw, failw;
static double slowest_ms;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void closefd(int fd) {
    if (state[fd] == SUB) {
        int last = subs[--nsubs];
        subs[subpos[fd]] = last;
        subpos[last] = subpos[fd];
    }
    free(pend[fd]);
    pend[fd] = NULL;
    pendlen[fd] = 0;
    state[fd] = FREE;
    close(fd);
}

static void fanout(const char *ev, size_t len) {
    double t0 = now_ms();
    for (int i = 0; i < nsubs; i++) {
        ssize_t w = write(subs[i], ev, len);
        writes++;
        if (w < 0) failw++;
        else if ((size_t)w < len) shortw++;
    }
    double dt = now_ms() - t0;
    if (dt > slowest_ms) slowest_ms = dt;
    msgs++;
}

/* Publishes: builds the event once and hands it to every process (itself included). */
static uint64_t publish(const char *body, size_t blen) {
    uint64_t id = __atomic_fetch_add(counter, 1, __ATOMIC_SEQ_CST);
    char ev[70000];
    size_t n = (size_t)snprintf(ev + 4, 64, "id: %llu\n", (unsigned long long)id) + 4;
    size_t start = 0;
    for (size_t i = 0; i <= blen; i++) {
        if (i == blen || body[i] == '\n' || body[i] == '\r') {
            if (i == blen && start == blen && blen != 0) break;
            if (n + 8 + (i - start) > sizeof ev - 2) break;
            memcpy(ev + n, "data: ", 6);
            n += 6;
            memcpy(ev + n, body + start, i - start);
            n += i - start;
            ev[n++] = '\n';
            if (i < blen && body[i] == '\r' && i + 1 < blen && body[i + 1] == '\n') i++;
            start = i + 1;
        }
    }
    ev[n++] = '\n';
    uint32_t len = (uint32_t)(n - 4);
    memcpy(ev, &len, 4);
    for (int p = 0; p < nprocs; p++) {
        size_t off = 0;
        while (off < n) {
            ssize_t w = write(pipes_w[p], ev + off, n - off);
            if (w < 0) { if (errno == EINTR) continue; break; }
            off += (size_t)w;
        }
    }
    return id;
}

/* Handles every complete request in buf; returns bytes consumed, or -1 to close. */
static ssize_t handle(int fd, char *buf, size_t len) {
    size_t used = 0;
    while (used < len) {
        char *b = buf + used;
        size_t l = len - used;
        char *end = memmem(b, l, "\r\n\r\n", 4);
        if (!end) break;
        size_t headlen = (size_t)(end - b) + 4;
        if (l >= 9 && !memcmp(b, "GET /sub/", 9)) {
            if (write(fd, HEAD, sizeof HEAD - 1) != (ssize_t)(sizeof HEAD - 1)) return -1;
            state[fd] = SUB;
            subpos[fd] = nsubs;
            subs[nsubs++] = fd;
            return (ssize_t)len; /* anything after the head is discarded */
        } else if (l >= 10 && !memcmp(b, "POST /pub/", 10)) {
            size_t clen = 0;
            char *cl = memmem(b, headlen, "\r\nContent-Length:", 17);
            if (!cl) cl = memmem(b, headlen, "\r\ncontent-length:", 17);
            if (cl) clen = strtoul(cl + 17, NULL, 10);
            if (l < headlen + clen) break;
            char ch[128];
            size_t cn = 0;
            for (char *c = b + 10; c < end && *c != ' ' && *c != '?' && cn < sizeof ch - 1; c++)
                ch[cn++] = *c;
            ch[cn] = 0;
            uint64_t id = publish(b + headlen, clen);
            char body[256], resp[512];
            int bl = snprintf(body, sizeof body, "{\"channel\":\"%s\",\"id\":%llu}", ch,
                              (unsigned long long)id);
            int rl = snprintf(resp, sizeof resp,
                              "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                              "Content-Length: %d\r\n\r\n%s", bl, body);
            if (write(fd, resp, rl) != rl) return -1;
            used += headlen + clen;
        } else {
            if (write(fd, NOTFOUND, sizeof NOTFOUND - 1) < 0) {}
            return -1;
        }
    }
    return (ssize_t)used;
}

static void on_readable(int fd) {
    static char scratch[1 << 16];
    for (;;) {
        ssize_t r = read(fd, scratch, sizeof scratch);
        if (r == 0) { closefd(fd); return; }
        if (r < 0) {
            if (errno == EAGAIN) return;
            if (errno == EINTR) continue;
            closefd(fd);
            return;
        }
        if (state[fd] == SUB) continue; /* discard */
        char *buf = scratch;
        size_t len = (size_t)r;
        if (pendlen[fd]) {
            pend[fd] = realloc(pend[fd], pendlen[fd] + len);
            memcpy(pend[fd] + pendlen[fd], scratch, len);
            buf = pend[fd];
            len = pendlen[fd] + len;
        }
        ssize_t used = handle(fd, buf, len);
        if (used < 0) { closefd(fd); return; }
        if (state[fd] == SUB) {
            free(pend[fd]);
            pend[fd] = NULL;
            pendlen[fd] = 0;
            continue;
        }
        size_t left = len - (size_t)used;
        if (left > 1 << 20) { closefd(fd); return; }
        char *keep = left ? malloc(left) : NULL;
        if (left) memcpy(keep, buf + used, left);
        free(pend[fd]);
        pend[fd] = keep;
        pendlen[fd] = left;
    }
}

static void on_pipe(int fd) {
    static char pbuf[1 << 20];
    static size_t plen;
    for (;;) {
        ssize_t r = read(fd, pbuf + plen, sizeof pbuf - plen);
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            return;
        }
        plen += (size_t)r;
        size_t off = 0;
        while (plen - off >= 4) {
            uint32_t len;
            memcpy(&len, pbuf + off, 4);
            if (plen - off < 4 + len) break;
            fanout(pbuf + off + 4, len);
            off += 4 + len;
        }
        memmove(pbuf, pbuf + off, plen - off);
        plen -= off;
    }
}

static void onterm(int s) { (void)s; stop = 1; }

static void worker(const char *addr, int port, int prd) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct sigaction sa = {.sa_handler = onterm};
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, addr, &sin.sin_addr);
    if (bind(lfd, (struct sockaddr *)&sin, sizeof sin) || listen(lfd, 65535)) {
        perror("fanout_floor: bind/listen");
        exit(1);
    }
    ep = epoll_create1(0);
    struct epoll_event e = {.events = EPOLLIN, .data.fd = lfd};
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &e);
    state[lfd] = LISTEN;
    fcntl(prd, F_SETFL, O_NONBLOCK);
    e.data.fd = prd;
    epoll_ctl(ep, EPOLL_CTL_ADD, prd, &e);
    state[prd] = PIPE;
    static struct epoll_event evs[1024];
    long long peak = 0;
    while (!stop) {
        int n = epoll_wait(ep, evs, 1024, 500);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (state[fd] == LISTEN) {
                for (;;) {
                    int c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
                    if (c < 0) {
                        if (errno == EMFILE || errno == ENFILE) usleep(10000);
                        break;
                    }
                    if (c >= MAXFD) { close(c); continue; }
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    state[c] = HEADSTATE;
                    struct epoll_event ce = {.events = EPOLLIN | EPOLLRDHUP, .data.fd = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &ce);
                }
            } else if (state[fd] == PIPE) {
                on_pipe(fd);
            } else if (state[fd] != FREE) {
                on_readable(fd);
            }
        }
        if (nsubs > peak) peak = nsubs;
    }
    fprintf(stderr, "fanout_floor[%d] pid %d: subscribers %d (peak %lld) messages %lld writes %lld short %lld "
            "failed %lld slowest-fanout %.1f ms\n", myidx, getpid(), nsubs, peak, msgs, writes,
            shortw, failw, slowest_ms);
    exit(0);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: fanout_floor ADDR PORT PROCS\n");
        return 2;
    }
    nprocs = atoi(argv[3]);
    if (nprocs < 1 || nprocs > MAXPROCS) return 2;
    counter = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (counter == MAP_FAILED) return 2;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    *counter = (uint64_t)tv.tv_sec * 1000000u + (uint64_t)tv.tv_usec;
    int prd[MAXPROCS];
    for (int p = 0; p < nprocs; p++) {
        int fds[2];
        if (pipe(fds)) return 2;
        fcntl(fds[1], F_SETPIPE_SZ, 1 << 20);
        prd[p] = fds[0];
        pipes_w[p] = fds[1];
    }
    pid_t pids[MAXPROCS];
    for (int p = 0; p < nprocs; p++) {
        if ((pids[p] = fork()) == 0) {
            myidx = p;
            for (int q = 0; q < nprocs; q++) if (q != p) close(prd[q]);
            worker(argv[1], atoi(argv[2]), prd[p]);
        }
    }
    struct sigaction sa = {.sa_handler = onterm};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    while (!stop) pause();
    for (int p = 0; p < nprocs; p++) kill(pids[p], SIGTERM);
    while (wait(NULL) > 0) {}
    return 0;
}
