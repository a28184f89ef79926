/* Test-only: a --source file whose library constructor changes the floating-point environment
 * when the build is loaded (rounding upward, and flush-to-zero on x86), before any kernel
 * runs: the worker must restore the build's environment and say so on the build's rows
 * (docs/worker.md).  Its kernel is basic's predicate, well behaved itself. */
#include <fenv.h>

#include "sb_common.h"
#include "basic_predicate.h"

__attribute__((constructor)) static void fpenv_at_load_changed(void) {
    fesetround(FE_UPWARD);
#if defined(SB_X86)
    _mm_setcsr(_mm_getcsr() | (1u << 15)); /* MXCSR.FTZ */
#endif
}

static inline int loaded_beside(float cx, float cy, float ux, float uy, float r2, float cos_theta, float px,
                                float py) {
    return basic_predicate(cx, cy, ux, uy, r2, cos_theta, px, py);
}

SB_KERNEL(loaded_beside, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .rounding_bound = 8,
          .summary = "test only: basic, in a file whose constructor changes the FP environment at load");
