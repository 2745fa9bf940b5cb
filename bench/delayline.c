/* delayline: a wire with a fixed one-way delay between two network namespaces, in user space.
 *
 * This kernel has no netem (CONFIG_NET_SCH_NETEM is not set, nor sch_fq for EDT pacing), so
 * the delay is made here: two TUN devices, one created inside each namespace; every IP packet
 * read from one is written to the other DELAY_MS later, in order. TCP runs end to end through
 * it, so the two sides see a real round-trip time (2 x DELAY_MS) and real congestion control.
 * A TUN device without IFF_VNET_HDR gets packets already segmented to its MTU, as on a wire.
 *
 * Bounded: the queue per direction holds at most QUEUE packets (a full queue drops, like a
 * router, and the drop is counted and printed at exit) and the program exits after LIMIT_S
 * seconds (alarm) or on SIGTERM/SIGINT, printing packets forwarded and dropped per direction.
 *
 * Usage: delayline NETNS_A TUN_A NETNS_B TUN_B DELAY_MS LIMIT_S
 *   (NETNS_* are names under /var/run/netns, as `ip netns add` makes them). Prints "ready"
 *   once both devices exist; the caller then sets addresses and brings them up. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define QUEUE 65536
#define SLOT 2048 /* > MTU 1500 + headers; a bigger packet is dropped and counted */

struct packet {
    double due_us;
    int len;
    unsigned char data[SLOT];
};

struct direction {
    int from, to;
    struct packet *ring;
    long head, tail; /* tail - head packets queued */
    long forwarded, dropped;
    const char *name;
};

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void die(const char *what) {
    perror(what);
    exit(2);
}

/* Opens TUN device `name` inside network namespace `ns` (the fd stays bound to it). */
static int open_tun_in(const char *ns, const char *name) {
    char path[256];
    snprintf(path, sizeof path, "/var/run/netns/%s", ns);
    int nsfd = open(path, O_RDONLY | O_CLOEXEC);
    if (nsfd < 0) die(path);
    if (setns(nsfd, CLONE_NEWNET) < 0) die("setns");
    close(nsfd);
    int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) die("/dev/net/tun");
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name);
    if (ioctl(fd, TUNSETIFF, &ifr) < 0) die("TUNSETIFF");
    return fd;
}

/* Reads every packet waiting on d->from into the queue, each due `delay_us` from now. */
static void take_in(struct direction *d, double delay_us) {
    for (;;) {
        struct packet *p = &d->ring[d->tail % QUEUE];
        unsigned char scratch[SLOT];
        int full = d->tail - d->head >= QUEUE;
        ssize_t n = read(d->from, full ? scratch : p->data, SLOT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) return;
            die("read tun");
        }
        if (full || n >= SLOT) {
            d->dropped++;
            continue;
        }
        p->len = (int)n;
        p->due_us = now_us() + delay_us;
        d->tail++;
    }
}

/* Writes every queued packet that is due; returns µs until the next one is (or -1). */
static double hand_over(struct direction *d) {
    double now = now_us();
    while (d->head < d->tail) {
        struct packet *p = &d->ring[d->head % QUEUE];
        if (p->due_us > now) return p->due_us - now;
        if (write(d->to, p->data, p->len) < 0 && errno != EAGAIN && errno != EINTR)
            die("write tun");
        d->head++;
        d->forwarded++;
    }
    return -1;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s NETNS_A TUN_A NETNS_B TUN_B DELAY_MS LIMIT_S\n", argv[0]);
        return 2;
    }
    double delay_us = atof(argv[5]) * 1000.0;
    alarm((unsigned)atoi(argv[6]));
    signal(SIGALRM, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);

    int a = open_tun_in(argv[1], argv[2]);
    int b = open_tun_in(argv[3], argv[4]);
    struct direction dirs[2] = {
        {.from = a, .to = b, .name = "a->b"},
        {.from = b, .to = a, .name = "b->a"},
    };
    for (int i = 0; i < 2; i++) {
        dirs[i].ring = malloc(sizeof(struct packet) * QUEUE);
        if (!dirs[i].ring) die("malloc");
    }
    printf("ready\n");
    fflush(stdout);

    struct pollfd pfd[2] = {{.fd = a, .events = POLLIN}, {.fd = b, .events = POLLIN}};
    while (!stop) {
        double wait_us = -1;
        for (int i = 0; i < 2; i++) {
            double w = hand_over(&dirs[i]);
            if (w >= 0 && (wait_us < 0 || w < wait_us)) wait_us = w;
        }
        struct timespec ts = {0, 0};
        if (wait_us >= 0) {
            ts.tv_sec = (time_t)(wait_us / 1e6);
            ts.tv_nsec = (long)((wait_us - ts.tv_sec * 1e6) * 1e3);
        }
        int r = ppoll(pfd, 2, wait_us >= 0 ? &ts : NULL, NULL);
        if (r < 0 && errno != EINTR) die("ppoll");
        if (pfd[0].revents & POLLIN) take_in(&dirs[0], delay_us);
        if (pfd[1].revents & POLLIN) take_in(&dirs[1], delay_us);
    }
    for (int i = 0; i < 2; i++)
        printf("delayline %s: %ld packets forwarded, %ld dropped\n", dirs[i].name,
               dirs[i].forwarded, dirs[i].dropped);
    return 0;
}
