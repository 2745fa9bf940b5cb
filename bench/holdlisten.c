/* holdlisten: a trivial loopback listener that accepts and holds connections, for measuring
 * clients. PROCS processes share the port with SO_REUSEPORT (each process can hold only
 * RLIMIT_NOFILE descriptors); each accepts forever and never closes. Plain: never reads or
 * writes. With `sse` (the subscribe floor, with `blockconnect ... PATH`): reads each request
 * head (blocking, 10 s bound) and writes c1m serve's 124-byte SSE response head, then holds.
 * Usage: holdlisten ADDR PORT PROCS [sse]. Stop it by killing its process group. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* c1m serve's answer to an SSE subscribe, byte for byte. */
static const char HEAD[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                           "Cache-Control: no-cache\r\nConnection: keep-alive\r\n"
                           "X-Accel-Buffering: no\r\n\r\n";

/* Reads up to the end of the request head, then answers it. */
static void answer(int c) {
    struct timeval tv = {.tv_sec = 10};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[1024];
    size_t have = 0;
    for (;;) {
        ssize_t n = read(c, buf + have, sizeof buf - 1 - have);
        if (n <= 0) return;
        have += (size_t)n;
        buf[have] = 0;
        if (strstr(buf, "\r\n\r\n")) break;
        if (have == sizeof buf - 1) return;
    }
    if (write(c, HEAD, sizeof HEAD - 1) < 0) return;
}

static void serve(const char *addr, int port, int sse) {
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, addr, &sa.sin_addr);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 65535)) {
        perror("holdlisten: bind/listen");
        exit(1);
    }
    for (;;) {
        int c = accept(fd, NULL, NULL);
        if (c < 0 && (errno == EMFILE || errno == ENFILE)) sleep(1);
        if (c >= 0 && sse) answer(c);
    }
}

int main(int argc, char **argv) {
    if (argc != 4 && !(argc == 5 && strcmp(argv[4], "sse") == 0)) {
        fprintf(stderr, "usage: holdlisten ADDR PORT PROCS [sse]\n");
        return 2;
    }
    int procs = atoi(argv[3]), sse = argc == 5;
    for (int i = 0; i < procs; i++) {
        if (fork() == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            serve(argv[1], atoi(argv[2]), sse);
        }
    }
    pause();
    return 0;
}
