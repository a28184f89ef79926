/* Scalar point-in-sector kernels: the article's four versions, each made to
 * follow the boundary rule (on the arc, on an edge ray or at the apex is
 * outside).  D = p - c, s = |D|^2, a = D.u, k = cos(theta). */
#include "sb_common.h"

/* The article's naive version: sqrt, divide, acosf; takes r and theta. */
static inline int naive(float cx, float cy, float ux, float uy, float r,
                        float theta, float px, float py) {
    float dx = px - cx;
    float dy = py - cy;
    const float length = sqrtf(dx * dx + dy * dy);
    /* The article rejects with `length > r`, which keeps points on the arc. */
    if (!(length < r) || length == 0.0f)
        return 0;
    dx /= length;
    dy /= length;
    float cosine = dx * ux + dy * uy;
    /* A point straight along u can round to a cosine of 1.00000012, where
     * acosf is NaN and the point would wrongly fall outside. */
    if (cosine > 1.0f)
        cosine = 1.0f;
    /* clang -ffast-math folds the divide so a cosine can round below -1 too: NaN again */
    if (cosine < -1.0f)
        cosine = -1.0f;
    return acosf(cosine) < theta;
}

/* Basic: r^2 and cos(theta) precomputed, sqrt deferred past the radius test,
 * no division. */
static inline int basic(float cx, float cy, float ux, float uy, float r2,
                        float cos_theta, float px, float py) {
    const float dx = px - cx;
    const float dy = py - cy;
    const float squared_length = dx * dx + dy * dy;
    if (!(squared_length < r2))
        return 0;
    return dx * ux + dy * uy > sqrtf(squared_length) * cos_theta;
}

/* No sqrt: a > sqrt(s) k decided by squaring both sides, the article's four
 * sign cases. */
static inline int nosqrt(float cx, float cy, float ux, float uy, float r2,
                         float cos_theta, float px, float py) {
    const float dx = px - cx;
    const float dy = py - cy;
    const float squared_length = dx * dx + dy * dy;
    if (!(squared_length < r2))
        return 0;
    const float d_dot_u = dx * ux + dy * uy;
    if (d_dot_u >= 0 && cos_theta >= 0)
        return d_dot_u * d_dot_u > squared_length * cos_theta * cos_theta;
    if (d_dot_u < 0 && cos_theta < 0)
        return d_dot_u * d_dot_u < squared_length * cos_theta * cos_theta;
    /* Unequal signs: a >= 0 > k holds everywhere but at the apex (0 > 0 is
     * false).  The article returns `a >= 0` here, which counts the apex, and
     * a NaN cos_theta, as inside. */
    return d_dot_u >= 0 && cos_theta < 0 && squared_length > 0;
}

/* Bit trick: sign-aware squares compared once.  x|x| carries x's sign bit on
 * x*x, and a > sqrt(s) k  <=>  a|a| > s k|k|  in all four sign cases, the
 * apex (0 > 0) and -0.0 (+0 == -0) included, with no branch.  The article
 * branches on the signs and keeps a second comparison; its unequal-sign
 * branch gets the apex wrong. */
static inline int bittrick(float cx, float cy, float ux, float uy, float r2,
                           float cos_theta, float px, float py) {
    const float dx = px - cx;
    const float dy = py - cy;
    const float squared_length = dx * dx + dy * dy;
    const float d_dot_u = dx * ux + dy * uy;
    const uint32_t sign_bit = 0x80000000u;
    uint32_t a_bits, k_bits, lhs_bits, rhs_bits;
    float lhs, rhs;
    const float a_squared = d_dot_u * d_dot_u;
    const float s_k_squared = squared_length * cos_theta * cos_theta;
    memcpy(&a_bits, &d_dot_u, sizeof a_bits);
    memcpy(&k_bits, &cos_theta, sizeof k_bits);
    memcpy(&lhs_bits, &a_squared, sizeof lhs_bits);
    memcpy(&rhs_bits, &s_k_squared, sizeof rhs_bits);
    lhs_bits |= a_bits & sign_bit;
    rhs_bits |= k_bits & sign_bit;
    memcpy(&lhs, &lhs_bits, sizeof lhs);
    memcpy(&rhs, &rhs_bits, sizeof rhs);
    return (squared_length < r2) & (lhs > rhs);
}

SB_KERNEL(naive, SCALAR, 1, (cx, cy, ux, uy, r, theta), .family = "sector",
          .rounding_bound = 16, .summary = "sqrt, divide and acosf; takes r and theta");
SB_KERNEL(basic, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector",
          .rounding_bound = 8, .summary = "r^2 and cos(theta) precomputed, sqrt after the radius test");
SB_KERNEL(nosqrt, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector",
          .rounding_bound = 8, .summary = "no sqrt: squares both sides, four sign cases");
SB_KERNEL(bittrick, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector",
          .rounding_bound = 8, .summary = "no sqrt, no branch: IEEE sign bits on the squares");
