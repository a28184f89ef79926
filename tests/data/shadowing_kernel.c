/* A --source kernel named as a built-in one (basic): the build must refuse the clash in one
 * line, not run the built-in in its place (tests/test_fuzz_cli.py). */
#include "sb_common.h"
static inline int basic(float cx, float cy, float ux, float uy, float r2, float cos_theta, float px, float py) {
    (void)cx, (void)cy, (void)ux, (void)uy, (void)r2, (void)cos_theta, (void)px, (void)py;
    return 0;
}
SB_KERNEL(basic, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .summary = "always outside");
