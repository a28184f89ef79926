/* The article's other methods (seed 001, Milo Yip, "检测点是否在扇形之内"):
 *   polar       section "极坐标": phi = atan2(p - c), alpha = atan2(u), test
 *               alpha - theta < phi < alpha + theta, also with phi -/+ 2 pi (the wrap at
 *               +-pi).  The article rejects it: "we still cannot avoid one atan2()".
 *   localframe  section "其他可行方法", item 1: p - c rotated into the sector's frame
 *               (x along u, y along its perpendicular), the angle compared in that frame.
 *   cross       item 2: the edges are u rotated by +-theta; 2-D cross products decide
 *               which side of each edge p - c lies on; for theta >= pi/2 the sector is
 *               the complement of a wedge (OR of the half-planes, not AND).
 *   lut         item 3: table lookup: the angle of p - c from a 257-entry table of atan
 *               over one octant, then polar's interval test.  Approximate by design: its
 *               row declares an angular tolerance, which verify honours (the README).
 * Their measured cost is in the README's "What would I use instead?" table.
 *
 * Boundary rule, as every kernel: the arc, both edge rays and the apex are outside; a
 * NaN input is outside (every test is a strict comparison that NaN makes false; the
 * LUT index is clamped so that NaN never indexes out of bounds).  They test the ANGLE
 * between p - c and u, so they ignore |u|, which D.u > |D| cos(theta) does not: their
 * rows say .contract = "unit u", and verify judges them on unit-u rows only.
 *
 * Per-sector values (alpha = atan2f(u), sin(theta)) come from functions declared
 * const and noinline, so the compiler hoists them out of the point loop (the article's
 * "precompute alpha1, alpha2"); inlined, atan2f is not const (errno) and gcc 12 -O2
 * calls it for every test.  Written and first measured by a side investigation of
 * this project (see the README). */
#include <float.h>

#include "sb_common.h"
#include "lut_table.h"

#define SB_PI_F 3.14159265358979f     /* float32(pi) = 3.14159274 > pi, as atan2f returns */
#define SB_TWO_PI_F 6.28318530717959f /* float32(2 pi) = 2 float32(pi), exactly */

__attribute__((const, noinline)) static float direction_angle(float ux, float uy) { return atan2f(uy, ux); }

/* sin(theta) from cos(theta): sqrt((1 - k)(1 + k)) keeps its relative accuracy near
 * k = +-1, where sqrt(1 - k*k) loses it all (1 - k, 1 + k are exact there: Sterbenz). */
__attribute__((const, noinline)) static float sin_from_cos(float k) { return sqrtf((1.0f - k) * (1.0f + k)); }

/* phi in the open interval (lo, hi) modulo 2 pi: lo, hi = alpha -/+ theta lie in
 * (-2 pi, 2 pi) and hi - lo < 2 pi, so only one of phi - 2 pi, phi, phi + 2 pi can fall
 * in it.  Bitwise | and &: no branches. */
static inline int angle_in(float phi, float lo, float hi) {
    const float below = phi - SB_TWO_PI_F, above = phi + SB_TWO_PI_F;
    return ((lo < phi) & (phi < hi)) | ((lo < below) & (below < hi)) | ((lo < above) & (above < hi));
}

static inline int polar(float cx, float cy, float ux, float uy, float r, float theta, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    const float alpha = direction_angle(ux, uy); /* per sector (hoisted) */
    /* atan2f(0, 0) is 0 or +-pi: the apex is excluded explicitly (s > 0) */
    return (s < r * r) & (s > 0.0f) & angle_in(atan2f(dy, dx), alpha - theta, alpha + theta);
}

/* x' = D.u (along u), y' = |u x D| (distance from the axis).  In the upper half of the
 * frame the angle of (x', y') is below theta iff x' sin(theta) > y' cos(theta): a cross
 * product, valid for every theta in (0, pi) with no sign cases, false at the apex and on
 * the edge.  When float32 rounds cos(theta) to -1 (theta within 2.4e-4 of pi) sin(theta)
 * is 0 and the test loses the +u ray: (k < 0) & (x' > 0) keeps it.  cos(theta) < -1 (out
 * of contract, but verify feeds -inf) makes sin NaN; D.u > |D| k then holds for every
 * D != 0, which the last term says. */
static inline int localframe(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    const float sin_theta = sin_from_cos(k); /* per sector (hoisted) */
    const float x = dx * ux + dy * uy, y = fabsf(dy * ux - dx * uy);
    return (s < r2) & ((x * sin_theta > y * k) | ((k < 0.0f) & (x > 0.0f)) | ((k < -1.0f) & (s > 0.0f)));
}

/* Edges e1 = u rotated by +theta, e2 = u rotated by -theta; cross(a, b) > 0: b is
 * counter-clockwise of a.  theta < pi/2: inside iff cross(e2, D) > 0 AND cross(D, e1) > 0;
 * theta >= pi/2: OR (the complement of the wedge between e1 and e2), plus D.u > 0 for
 * when float32 cos(theta) = -1 makes e1 = e2 = -u.  On an edge ray one cross product is 0
 * and the other has the sign of sin(2 theta): outside in both cases; at the apex both are
 * 0.  The narrow case also asks D.u > 0: when float32 cos(theta) = 1 makes e1 = e2 = u, both
 * cross products of a D along -u are rounding noise, and with FMA contraction (-march=native)
 * they can both come out > 0, a point behind the apex inside (found by verify's needle rows).
 * The wide case is a per-sector mask, not a branch, so the loop stays straight. */
static inline int cross(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    const float sin_theta = sin_from_cos(k); /* per sector (hoisted) */
    const float e1x = ux * k - uy * sin_theta, e1y = ux * sin_theta + uy * k;
    const float e2x = ux * k + uy * sin_theta, e2y = uy * k - ux * sin_theta;
    const int left_of_e2 = e2x * dy - e2y * dx > 0.0f, right_of_e1 = dx * e1y - dy * e1x > 0.0f;
    const int wide = k < 0.0f, ahead = dx * ux + dy * uy > 0.0f;
    const int in_angle =
        (left_of_e2 & right_of_e1 & ahead) | (wide & (left_of_e2 | right_of_e1 | ahead)) | ((k < -1.0f) & (s > 0.0f));
    return (s < r2) & in_angle;
}

/* Angle of (dx, dy) in (-pi, pi] from the octant and a table of atan(i / T): with
 * t = min(|dx|, |dy|) / max(|dx|, |dy|) and index round(t T) the table angle is off by at
 * most half a step, 1 / (2 T) = 1.95e-3 rad for T = 256, plus a few float32 roundings
 * (< 2e-6): declared tolerance 2e-3 rad.  Written on the IEEE bits, branch-free: the
 * octant of a random point is a coin toss for the branch predictor, and gcc 12 -O2 turns
 * float ternaries back into jumps (measured 4.1x basic with them, 2.4x without). */
#define SB_LUT_TOLERANCE 2e-3

static inline uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
/* m all ones: a; m zero: b */
static inline uint32_t select_bits(uint32_t m, uint32_t a, uint32_t b) { return (a & m) | (b & ~m); }

static inline float lut_angle(float dx, float dy) {
    const uint32_t abs_mask = 0x7fffffffu, sign = 0x80000000u, one = 0x3f800000u;
    const uint32_t bx = bits_of(dx) & abs_mask, by = bits_of(dy) & abs_mask;
    const uint32_t swap = -(uint32_t)(by > bx); /* |dy| > |dx| */
    const float t0 = float_of(select_bits(swap, bx, by)) / float_of(select_bits(swap, by, bx));
    uint32_t tb = bits_of(t0);                 /* in [0, 1], or NaN at the apex / for NaN or inf */
    tb &= -(uint32_t)(tb <= one);              /* NaN of either sign -> 0: no float-to-int UB */
    const int i = (int)(float_of(tb) * (float)SB_LUT_T + 0.5f); /* 0 .. SB_LUT_T */
    const float a0 = sb_lut_atan[i];                            /* atan(t) in [0, pi/4] */
    const float a1 = float_of(select_bits(swap, bits_of(0.5f * SB_PI_F - a0), bits_of(a0))); /* [0, pi/2] */
    const uint32_t left = -(uint32_t)((bits_of(dx) >> 31) & (bx != 0));                     /* dx < 0 */
    const float a2 = float_of(select_bits(left, bits_of(SB_PI_F - a1), bits_of(a1)));       /* [0, pi] */
    const uint32_t below = (bits_of(dy) & sign) & -(uint32_t)(by != 0);                     /* dy < 0 */
    return float_of(bits_of(a2) ^ below);                                                    /* (-pi, pi] */
}

static inline int lut(float cx, float cy, float ux, float uy, float r, float theta, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    const float alpha = direction_angle(ux, uy); /* per sector (hoisted) */
    return (s < r * r) & (s > 0.0f) & angle_in(lut_angle(dx, dy), alpha - theta, alpha + theta);
}

/* polar's angles carry atan2f's error (< 1 ulp of an angle below 2 pi) plus the roundings
 * of alpha +- theta and phi +- 2 pi: a few ulps of 2 pi, up to ~16 roundings of the
 * dot-product form verify measures in (worst seen: 4.6); declared 16, as naive. */
SB_KERNEL(polar, SCALAR, 1, (cx, cy, ux, uy, r, theta), .family = "sector", .rounding_bound = 16,
          .contract = "unit u", .summary = "atan2f of p - c against atan2f(u) +- theta, the wrap at +-pi");
SB_KERNEL(localframe, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .rounding_bound = 8,
          .contract = "unit u", .summary = "p - c in u's frame: x' sin(theta) > |y'| cos(theta)");
SB_KERNEL(cross, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .rounding_bound = 8,
          .contract = "unit u", .summary = "edges u rotated by +-theta, 2-D cross products; OR for theta >= pi/2");
SB_KERNEL(lut, SCALAR, 1, (cx, cy, ux, uy, r, theta), .family = "sector", .rounding_bound = 32,
          .tolerance = SB_LUT_TOLERANCE, .contract = "unit u",
          .summary = "atan from a 257-entry octant table, then polar's test (approximate: tolerance 2e-3 rad)");
