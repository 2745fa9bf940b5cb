/* holdlisten: a trivial loopback listener that accepts and holds connections, for measuring
 * clients. PROCS processes share the port with SO_REUSEPORT (each process can hold only
 * RLIMIT_NOFILE descriptors); each accepts forever and never reads, writes or closes.
 * Usage: holdlisten ADDR PORT PROCS. Stop it by killing its process group. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static void serve(const char *addr, int port) {
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
    }
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: holdlisten ADDR PORT PROCS\n");
        return 2;
    }
    int procs = atoi(argv[3]);
    for (int i = 0; i < procs; i++) {
        if (fork() == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            serve(argv[1], atoi(argv[2]));
        }
    }
    pause();
    return 0;
}
