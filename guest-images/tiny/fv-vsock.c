/*
 * fv-vsock: AF_VSOCK stream between stdin/stdout and a peer, for the tiny guest (busybox has
 * no vsock). Built static by build-tiny.sh.
 *
 *   fv-vsock connect CID PORT   connect to CID:PORT, send stdin, then print what comes back
 *   fv-vsock listen PORT        accept one connection on PORT, print what it sends
 *
 * connect shuts its write side down at the end of stdin and then copies the peer's bytes to
 * stdout until the peer closes; listen copies the connection to stdout until it closes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <linux/vm_sockets.h>

static int copy(int from, int to)
{
    char buf[65536];
    for (;;) {
        ssize_t n = read(from, buf, sizeof buf);
        if (n == 0)
            return 0;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(to, buf + off, (size_t)(n - off));
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                return -1;
            }
            off += w;
        }
    }
}

static int fail(const char *what)
{
    fprintf(stderr, "fv-vsock: %s: %s\n", what, strerror(errno));
    return 1;
}

int main(int argc, char **argv)
{
    struct sockaddr_vm addr;
    memset(&addr, 0, sizeof addr);
    addr.svm_family = AF_VSOCK;
    int fd = socket(AF_VSOCK, SOCK_STREAM, 0);
    if (fd < 0)
        return fail("socket");
    if (argc == 4 && strcmp(argv[1], "connect") == 0) {
        addr.svm_cid = (unsigned)strtoul(argv[2], NULL, 10);
        addr.svm_port = (unsigned)strtoul(argv[3], NULL, 10);
        if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0)
            return fail("connect");
        if (copy(0, fd) < 0)
            return fail("send");
        shutdown(fd, SHUT_WR);
        if (copy(fd, 1) < 0)
            return fail("receive");
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "listen") == 0) {
        addr.svm_cid = VMADDR_CID_ANY;
        addr.svm_port = (unsigned)strtoul(argv[2], NULL, 10);
        if (bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0)
            return fail("bind");
        if (listen(fd, 1) < 0)
            return fail("listen");
        int conn = accept(fd, NULL, NULL);
        if (conn < 0)
            return fail("accept");
        if (copy(conn, 1) < 0)
            return fail("receive");
        return 0;
    }
    fprintf(stderr, "usage: fv-vsock connect CID PORT | fv-vsock listen PORT\n");
    return 2;
}
