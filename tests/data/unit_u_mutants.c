/* Test-only: mutants.c's two boundary mutants with `.contract = "unit u"` added, the only
 * change.  The declaration is honest (every scene `run` makes has unit u), and it used to
 * hide both: verify judged them on unit-u rows only, and every exact cell row had |u| ~2^-9
 * from 1 (docs/coverage.md, "unit u"). */
#include <float.h>

#include "sb_common.h"

static inline int u_edge_ge_wide(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy, a = dx * ux + dy * uy, t = sqrtf(s) * k;
    return s < r2 && (k < 0 ? (a >= t) & (s > 0) : a > t);
}
SB_KERNEL(u_edge_ge_wide, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .known_bad = 1,
          .contract = "unit u", .summary = "m_edge_ge_wide, declaring unit u");

static inline int u_tiny_radius(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s < r2 + FLT_MIN && dx * ux + dy * uy > sqrtf(s) * k;
}
SB_KERNEL(u_tiny_radius, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .known_bad = 1,
          .contract = "unit u", .summary = "m_tiny_radius, declaring unit u");
