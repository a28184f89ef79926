/* Test-only: sector kernels wrong only where the apex lies far from the origin (|c| above
 * 2^20), where verify had no exact row (its constructed apexes stopped at 1e5) and no inside
 * row beyond ~1e16: both passed verify at every seed; and one wrong only beyond 1e22, where the
 * constructions (then stopping at 1.25 * 2^60) had no row.  tests/test_coverage.py. */
#include "sb_common.h"

static inline int far_right(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s < r2 && dx * ux + dy * uy > sqrtf(s) * k;
}

static inline int far_arc_inclusive(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    if (fabsf(cx) > 0x1p20f || fabsf(cy) > 0x1p20f) /* "far away a tolerance cannot hurt" */
        return s <= r2 && dx * ux + dy * uy > sqrtf(s) * k;
    return far_right(cx, cy, ux, uy, r2, k, px, py);
}
SB_KERNEL(far_arc_inclusive, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .known_bad = 1,
          .summary = "the arc inside when the apex is beyond 2^20 from the origin");

static inline int far_culled(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    if (fabsf(cx) > 1e16f || fabsf(cy) > 1e16f) /* "a sector that far out is a parked one" */
        return 0;
    return far_right(cx, cy, ux, uy, r2, k, px, py);
}
SB_KERNEL(far_culled, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .known_bad = 1,
          .summary = "sectors whose apex is beyond 1e16 hold nothing");

static inline int far_culled_1e22(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    if (fabsf(cx) > 1e22f || fabsf(cy) > 1e22f) /* "a sector that far out is a parked one" */
        return 0;
    return far_right(cx, cy, ux, uy, r2, k, px, py);
}
SB_KERNEL(far_culled_1e22, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .known_bad = 1,
          .summary = "sectors whose apex is beyond 1e22 hold nothing");
