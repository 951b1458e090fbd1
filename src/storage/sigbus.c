/*
 * sigbus.c — reading a mapped file that shrank underneath raises SIGBUS; inside a guarded
 * region the signal becomes a jump back to the region's start, so the caller can clean up
 * and return an error instead of the process dying. Outside one, SIGBUS keeps its default.
 */
#include <signal.h>
#include <string.h>
#include "vx_int.h"

static _Thread_local sigjmp_buf *guard;

static void on_bus(int sig, siginfo_t *si, void *uc)
{
    (void)si;
    (void)uc;
    if (guard)
        siglongjmp(*guard, 1);
    /* not ours: the default action, which the return re-faults into */
    signal(sig, SIG_DFL);
}

void vx_bus_arm(sigjmp_buf *jb)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_bus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
    guard = jb;
}

void vx_bus_disarm(void)
{
    guard = NULL;
}
