/* Test-only: a --source file whose C constructor fails while its build's library loads,
 * before any kernel runs (tests/test_worker.py), as $SB_TEST_CONSTRUCTOR says: "crash"
 * (SIGSEGV, the default), "exit" (status 3) or "hang" (never returns); or returns having
 * changed the process every kernel of the build runs in: "timer" (ITIMER_REAL armed),
 * "nofile" (RLIMIT_NOFILE lowered to 12), "thread" (a thread left spinning).  Its kernel's
 * rows fail with the load; the build's built-in kernels run without this file. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

#include "sb_common.h"

static void *spin(void *unused) {
    for (volatile unsigned long turns = 0;; turns++) (void)unused;
    return NULL;
}

__attribute__((constructor)) static void fail_at_load(void) {
    const char *how = getenv("SB_TEST_CONSTRUCTOR");
    if (how && strcmp(how, "exit") == 0) exit(3);
    if (how && strcmp(how, "hang") == 0)
        for (;;) pause();
    if (how && strcmp(how, "timer") == 0) { /* long enough to be found armed, not to fire first */
        const struct itimerval later = {{0, 0}, {30, 0}};
        setitimer(ITIMER_REAL, &later, NULL);
        return;
    }
    if (how && strcmp(how, "nofile") == 0) {
        const struct rlimit few = {12, 12};
        setrlimit(RLIMIT_NOFILE, &few);
        return;
    }
    if (how && strcmp(how, "thread") == 0) {
        pthread_t thread;
        pthread_create(&thread, NULL, spin, NULL);
        return;
    }
    raise(SIGSEGV);
}

static inline int never_reached(float cx, float cy, float ux, float uy, float r2, float cos_theta, float px, float py) {
    (void)cx, (void)cy, (void)ux, (void)uy, (void)r2, (void)cos_theta, (void)px, (void)py;
    return 0;
}
SB_KERNEL(never_reached, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector");
