/* Test-only: a kernel that crashes its worker, to prove the harness survives. */
#include <signal.h>

#include "sb_common.h"

static inline int crashes(float cx, float cy, float ux, float uy, float r2,
                          float cos_theta, float px, float py) {
    (void)cx, (void)cy, (void)ux, (void)uy, (void)r2, (void)cos_theta, (void)px, (void)py;
    raise(SIGSEGV);
    return 0;
}

SB_SECTOR_SCALAR_KERNEL(crashes, crashes, r2, cos_theta, "noop", 8, SB_NOT_DEFAULT,
                        "test only: raises SIGSEGV")
