/* Test-only: a --source file whose C constructor crashes while its build's library loads,
 * before any kernel runs (tests/test_worker.py): the build cannot start, and the error says
 * which build and which file. */
#include <signal.h>

#include "sb_common.h"

__attribute__((constructor)) static void crash_at_load(void) { raise(SIGSEGV); }

static inline int never_reached(float cx, float cy, float ux, float uy, float r2, float cos_theta, float px, float py) {
    (void)cx, (void)cy, (void)ux, (void)uy, (void)r2, (void)cos_theta, (void)px, (void)py;
    return 0;
}
SB_KERNEL(never_reached, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector");
