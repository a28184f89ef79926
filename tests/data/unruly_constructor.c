/* Test-only: a --source file whose C constructor fails while its build's library loads,
 * before any kernel runs (tests/test_worker.py), as $SB_TEST_CONSTRUCTOR says: "crash"
 * (SIGSEGV, the default), "exit" (status 3) or "hang" (never returns).  Its kernel's rows
 * fail with the load; the build's built-in kernels run without this file. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sb_common.h"

__attribute__((constructor)) static void fail_at_load(void) {
    const char *how = getenv("SB_TEST_CONSTRUCTOR");
    if (how && strcmp(how, "exit") == 0) exit(3);
    if (how && strcmp(how, "hang") == 0)
        for (;;) pause();
    raise(SIGSEGV);
}

static inline int never_reached(float cx, float cy, float ux, float uy, float r2, float cos_theta, float px, float py) {
    (void)cx, (void)cy, (void)ux, (void)uy, (void)r2, (void)cos_theta, (void)px, (void)py;
    return 0;
}
SB_KERNEL(never_reached, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector");
