/* Test-only: an approximate kernel whose angle is off by up to 1e-4 rad, declared with a
 * tolerance that covers it and with one that does not. */
#include "sb_common.h"

static inline int widened(float cx, float cy, float ux, float uy, float r, float theta, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    if (!(s < r * r) || s == 0.0f) return 0;
    float cosine = (dx * ux + dy * uy) / sqrtf(s);
    cosine = fminf(fmaxf(cosine, -1.0f), 1.0f);
    return acosf(cosine) < theta + 1e-4f; /* a sector 1e-4 rad too wide on each side */
}

static inline int widened_undeclared(float cx, float cy, float ux, float uy, float r, float theta, float px,
                                     float py) {
    return widened(cx, cy, ux, uy, r, theta, px, py);
}

SB_KERNEL(widened, SCALAR, 1, (cx, cy, ux, uy, r, theta), .family = "sector", .rounding_bound = 16,
          .tolerance = 2e-4, .contract = "unit u", .summary = "test only: 1e-4 rad too wide, declared 2e-4");
SB_KERNEL(widened_undeclared, SCALAR, 1, (cx, cy, ux, uy, r, theta), .family = "sector", .rounding_bound = 16,
          .tolerance = 1e-6, .known_bad = 1, .contract = "unit u",
          .summary = "test only: 1e-4 rad too wide, declared 1e-6");
