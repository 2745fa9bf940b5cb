/* connect-cliff: how long one connect() takes as one (source, destination) pair fills the
 * ephemeral port range. Every connect() is a plain blocking connect() without bind(), so the
 * kernel picks the port in __inet_hash_connect (the path a client without
 * IP_BIND_ADDRESS_NO_PORT or IP_LOCAL_PORT_RANGE takes). All connections go from 127.0.0.1 to
 * one listener 127.0.0.1:PORT and are held open, so the range fills up.
 *
 * Output: one line per 5 % of the range: fill, connects in the bucket, median and p90 µs.
 * Run it inside a fresh network namespace (bench/connect-cliff.sh does) so the port range and
 * the sockets are the namespace's own and the host is untouched.
 *
 * Descriptors: RLIMIT_NOFILE is capped per process (20000 on this project's machines), so the
 * client side is spread over several processes that open their share one after the other
 * (each keeps its sockets while the next one goes on), and two acceptor processes share the
 * listener with SO_REUSEPORT.
 *
 * Usage: connect-cliff PORT PERCENT   (PERCENT of the range to fill, e.g. 95) */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PER_CLIENT 12000
#define ACCEPTORS 3
#define MAX_CLIENTS 8

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void raise_nofile(void) {
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: connect-cliff PORT PERCENT\n");
        return 2;
    }
    int port = atoi(argv[1]), percent = atoi(argv[2]);
    FILE *rf = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    long lo, hi;
    if (!rf || fscanf(rf, "%ld %ld", &lo, &hi) != 2) return 2;
    fclose(rf);
    long range = hi - lo + 1, total = range * percent / 100;
    int clients = (int)((total + PER_CLIENT - 1) / PER_CLIENT);
    if (clients > MAX_CLIENTS || percent < 1 || percent > 100) {
        fprintf(stderr, "range too large for %d client processes\n", MAX_CLIENTS);
        return 2;
    }
    alarm(300); /* bound the whole run */
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);

    pid_t kids[ACCEPTORS + MAX_CLIENTS];
    int nkids = 0;
    int ready[2];
    if (pipe(ready)) return 2;
    for (int a = 0; a < ACCEPTORS; a++) {
        int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        setsockopt(l, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
        if (bind(l, (struct sockaddr *)&dst, sizeof dst) || listen(l, 4096)) {
            perror("listen");
            return 2;
        }
        if ((kids[nkids++] = fork()) == 0) {
            raise_nofile();
            alarm(300);
            for (;;) { /* hold every accepted connection; EMFILE just waits */
                if (accept(l, NULL, NULL) < 0 && errno == EMFILE) pause();
            }
        }
        close(l);
    }

    float *us = calloc(total, sizeof(float));
    long done = 0, failed = 0;
    for (int c = 0; c < clients; c++) {
        long first = (long)c * PER_CLIENT;
        long n = total - first < PER_CLIENT ? total - first : PER_CLIENT;
        int pipefd[2];
        if (pipe(pipefd)) return 2;
        if ((kids[nkids++] = fork()) == 0) {
            raise_nofile();
            close(pipefd[0]);
            float *mine = calloc(n, sizeof(float));
            long fails = 0;
            for (long i = 0; i < n; i++) {
                int s = socket(AF_INET, SOCK_STREAM, 0);
                double t0 = now_us();
                int r = connect(s, (struct sockaddr *)&dst, sizeof dst);
                mine[i] = (float)(now_us() - t0);
                if (r) {
                    fails++;
                    close(s);
                }
            }
            if (write(pipefd[1], &fails, sizeof fails) < 0 ||
                write(pipefd[1], mine, n * sizeof(float)) < 0)
                _exit(1);
            close(pipefd[1]);
            pause(); /* keep the sockets while the next client fills the rest */
            _exit(0);
        }
        close(pipefd[1]);
        long f = 0;
        if (read(pipefd[0], &f, sizeof f) != sizeof f) return 2;
        size_t want = n * sizeof(float), got = 0;
        while (got < want) {
            ssize_t k = read(pipefd[0], (char *)(us + first) + got, want - got);
            if (k <= 0) return 2;
            got += k;
        }
        close(pipefd[0]);
        failed += f;
        done += n;
    }

    printf("range %ld-%ld (%ld ports), %ld connects from 127.0.0.1 to 127.0.0.1:%d, %ld failed\n",
           lo, hi, range, done, port, failed);
    printf("%-10s %8s %10s %10s\n", "fill", "connects", "p50_us", "p90_us");
    long step = range / 20;
    for (long b = 0; b * step < done; b++) {
        long from = b * step, to = from + step < done ? from + step : done;
        long m = to - from;
        float *tmp = malloc(m * sizeof(float));
        memcpy(tmp, us + from, m * sizeof(float));
        qsort(tmp, m, sizeof(float), cmp_float);
        printf("%3ld-%3ld%%  %8ld %10.1f %10.1f\n", from * 100 / range, to * 100 / range, m,
               tmp[m / 2], tmp[m * 9 / 10]);
        free(tmp);
    }
    fflush(stdout);
    for (int k = 0; k < nkids; k++) kill(kids[k], SIGKILL);
    for (int k = 0; k < nkids; k++) waitpid(kids[k], NULL, 0);
    return 0;
}
