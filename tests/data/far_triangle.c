/* Test-only: triangle kernels wrong only where vertex a lies far from the origin (beyond 2^30,
 * or 1e16), where verify had no exact row (its constructed triangles stopped at 1e5): the first
 * failed on a few metamorphic rows only, the second passed at seeds 1 and 2.
 * tests/test_coverage.py. */
#include "sb_common.h"

static inline int far_orient(float ax, float ay, float bx, float by, float cx, float cy, float px, float py,
                             int on_edge_inside) {
    const float o1 = (bx - ax) * (py - ay) - (by - ay) * (px - ax);
    const float o2 = (cx - bx) * (py - by) - (cy - by) * (px - bx);
    const float o3 = (ax - cx) * (py - cy) - (ay - cy) * (px - cx);
    if (on_edge_inside)
        return ((o1 >= 0) & (o2 >= 0) & (o3 >= 0)) | ((o1 <= 0) & (o2 <= 0) & (o3 <= 0));
    return ((o1 > 0) & (o2 > 0) & (o3 > 0)) | ((o1 < 0) & (o2 < 0) & (o3 < 0));
}

static inline int far_edge_inclusive(float ax, float ay, float bx, float by, float cx, float cy, float px, float py) {
    /* "far away a tolerance cannot hurt" */
    const int far = fabsf(ax) > 0x1p30f || fabsf(ay) > 0x1p30f;
    return far_orient(ax, ay, bx, by, cx, cy, px, py, far);
}
SB_KERNEL(far_edge_inclusive, SCALAR, 1, (ax, ay, bx, by, cx, cy), .family = "triangle", .known_bad = 1,
          .summary = "test only: edges and vertices inside when a is beyond 2^30 from the origin");

static inline int far_parked(float ax, float ay, float bx, float by, float cx, float cy, float px, float py) {
    if (fabsf(ax) > 1e16f || fabsf(ay) > 1e16f) /* "a triangle that far out is a parked one" */
        return 0;
    return far_orient(ax, ay, bx, by, cx, cy, px, py, 0);
}
SB_KERNEL(far_parked, SCALAR, 1, (ax, ay, bx, by, cx, cy), .family = "triangle", .known_bad = 1,
          .summary = "test only: triangles whose vertex a is beyond 1e16 hold nothing");
