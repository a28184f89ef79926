/* Test-only: "denormal guards" a kernel might add, each wrong only where float32 holds a length
 * as a subnormal: a subnormal r² taken for an empty sector, a subnormal |D|² taken for the
 * apex.  verify passed both until its "subnormal lengths" rows (a probe found them). */
#include <float.h>

#include "sb_common.h"

static inline int guards_r2(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    if (r2 < FLT_MIN)
        return 0;
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s < r2 && dx * ux + dy * uy > sqrtf(s) * k;
}
SB_KERNEL(guards_r2, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .known_bad = 1,
          .summary = "test only: a subnormal r2 is an empty sector");

static inline int guards_d(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    if (s < FLT_MIN)
        return 0;
    return s < r2 && dx * ux + dy * uy > sqrtf(s) * k;
}
SB_KERNEL(guards_d, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .known_bad = 1,
          .summary = "test only: a subnormal |D|^2 is the apex");
