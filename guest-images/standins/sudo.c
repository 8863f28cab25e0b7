/*
 * sudo for the CirrOS stand-in, as CirrOS configures it: members of group wheel run any
 * command as root without a password. `sudo CMD [ARGS...]` runs CMD; `sudo -i` and `sudo -s`
 * (and `sudo` with `su`) start a root shell. Installed setuid root; static, no libc needed in
 * the guest.
 */
#include <errno.h>
#include <grp.h>
#include <sys/types.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The stand-in's /etc/group gives wheel GID 10 (getgrnam would need NSS in a static binary). */
#define WHEEL_GID 10

static int in_wheel(void)
{
    gid_t groups[64];
    int n, i;

    if (getuid() == 0 || getgid() == WHEEL_GID)
        return 1;
    n = getgroups(64, groups);
    for (i = 0; i < n; i++)
        if (groups[i] == WHEEL_GID)
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    static char *shell[] = {"/bin/sh", "-l", NULL};

    if (!in_wheel()) {
        fprintf(stderr, "sudo: you are not in group wheel; this incident will be reported\n");
        return 1;
    }
    if (setgid(0) != 0 || setgroups(0, NULL) != 0 || setuid(0) != 0) {
        fprintf(stderr, "sudo: cannot become root: %s (is sudo setuid root?)\n", strerror(errno));
        return 1;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: sudo -i | -s | COMMAND [ARGS...]\n");
        return 1;
    }
    if (strcmp(argv[1], "-i") == 0 || strcmp(argv[1], "-s") == 0) {
        if (chdir("/root") != 0)
            (void)chdir("/");
        execv(shell[0], shell);
        fprintf(stderr, "sudo: %s: %s\n", shell[0], strerror(errno));
        return 1;
    }
    execvp(argv[1], argv + 1);
    fprintf(stderr, "sudo: %s: command not found\n", argv[1]);
    return 1;
}
