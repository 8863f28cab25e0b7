/*
 * The Pod sandbox ("pause") process: PID 1 of every Pod, holding the Pod's
 * namespaces. It sleeps until told to stop and reaps any zombie handed to it.
 * Built static (gcc -static) so its image is this one file.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig)
{
	(void)sig;
	_exit(0);
}

static void reap(int sig)
{
	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

static void on(int sig, void (*handler)(int))
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(sig, &sa, NULL) != 0) {
		perror("sigaction");
		_exit(1);
	}
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "-v") == 0) {
		puts("ferrovirt-pause");
		return 0;
	}
	if (getpid() != 1)
		fputs("pause: warning: not running as PID 1\n", stderr);
	on(SIGINT, stop);
	on(SIGTERM, stop);
	on(SIGCHLD, reap);
	for (;;)
		pause();
}
