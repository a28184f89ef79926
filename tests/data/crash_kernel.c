/* Test-only: a kernel that crashes its worker, to prove the harness survives. */
#include <signal.h>

#include "sb_common.h"

static inline int crashes(float cx, float cy, float ux, float uy, float r2,
                          float cos_theta, float px, float py) {
    (void)cx, (void)cy, (void)ux, (void)uy, (void)r2, (void)cos_theta, (void)px, (void)py;
    raise(SIGSEGV);
    return 0;
}

SB_KERNEL(crashes, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .known_bad = 1,
          .summary = "test only: raises SIGSEGV");
