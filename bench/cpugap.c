/* cpugap.c: how much of one CPU a spinning process does not get. Spins for SECONDS reading
 * CLOCK_MONOTONIC and adds up every gap over 1 ms between two reads: time the kernel or the
 * hypervisor gave the CPU to something else. Pin it (taskset -c N) on an otherwise idle box to
 * see the floor under any latency target there (bench/ack-idle.sh).
 * Usage: cpugap SECONDS   prints "lost X ms in gaps over 1 ms, worst Y ms"
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: cpugap SECONDS\n");
        return 2;
    }
    uint64_t end = now_ns() + strtoull(argv[1], 0, 10) * 1000000000ull;
    uint64_t last = now_ns(), lost = 0, worst = 0;
    for (uint64_t t; (t = now_ns()) < end; last = t) {
        uint64_t gap = t - last;
        if (gap > 1000000) {
            lost += gap;
            if (gap > worst) worst = gap;
        }
    }
    printf("lost %.0f ms in gaps over 1 ms, worst %.1f ms\n", lost / 1e6, worst / 1e6);
    return 0;
}
