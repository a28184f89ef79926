/* Test-only: sector kernels wrong only for needle cones (theta within ~0.009 rad of 0) and
 * near-pi cones (within ~0.009 of pi), found by a probe: verify's random half-angles lay in
 * [0.01, pi - 0.01] and its cos_theta extremes had random points, which never land inside a
 * needle (or behind a near-pi cone), so both passed verify while `run` miscounted hits.
 * Elsewhere each is the basic kernel; k = cos_theta, s = |p - c|^2. */
#include "sb_common.h"

#define EXTREME_TAKES (cx, cy, ux, uy, r2, cos_theta)

static inline int extreme_basic(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s < r2 && dx * ux + dy * uy > sqrtf(s) * k;
}

static inline int needle_blind(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    if (k > 0.99996f && k <= 1.0f) return 0; /* "needle cones see nothing" */
    return extreme_basic(cx, cy, ux, uy, r2, k, px, py);
}
SB_KERNEL(needle_blind, SCALAR, 1, EXTREME_TAKES, .family = "sector", .known_bad = 1,
          .summary = "test only: cones of half-angle below ~0.009 rad hold nothing");

static inline int near_pi_disc(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    if (k < -0.99996f && k >= -1.0f) return s < r2 && s > 0; /* "a near-pi cone is the whole disc" */
    return extreme_basic(cx, cy, ux, uy, r2, k, px, py);
}
SB_KERNEL(near_pi_disc, SCALAR, 1, EXTREME_TAKES, .family = "sector", .known_bad = 1,
          .summary = "test only: cones within ~0.009 rad of pi taken for the whole disc");
