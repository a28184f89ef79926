/* Test-only: deliberately broken kernels that `verify` must catch as logic bugs. */
#include "sb_common.h"

/* <= instead of < on the radius: points exactly on the arc count as inside. */
static inline int radius_le(float cx, float cy, float ux, float uy, float r2,
                            float cos_theta, float px, float py) {
    const float dx = px - cx, dy = py - cy;
    const float squared_length = dx * dx + dy * dy;
    if (!(squared_length <= r2))
        return 0;
    return dx * ux + dy * uy > sqrtf(squared_length) * cos_theta;
}

/* The no-sqrt kernel without its both-negative case (squares compared as if
 * both sides were positive): wrong for wide sectors, far from any boundary. */
static inline int missing_sign_case(float cx, float cy, float ux, float uy, float r2,
                                    float cos_theta, float px, float py) {
    const float dx = px - cx, dy = py - cy;
    const float squared_length = dx * dx + dy * dy;
    if (!(squared_length < r2))
        return 0;
    const float d_dot_u = dx * ux + dy * uy;
    if (d_dot_u >= 0 && cos_theta >= 0)
        return d_dot_u * d_dot_u > squared_length * cos_theta * cos_theta;
    return d_dot_u >= 0 && squared_length > 0;
}

/* The article's unequal-sign branch: `return a >= 0` counts the apex inside. */
static inline int apex_inside(float cx, float cy, float ux, float uy, float r2,
                              float cos_theta, float px, float py) {
    const float dx = px - cx, dy = py - cy;
    const float squared_length = dx * dx + dy * dy;
    if (!(squared_length < r2))
        return 0;
    const float d_dot_u = dx * ux + dy * uy;
    if (d_dot_u >= 0 && cos_theta >= 0)
        return d_dot_u * d_dot_u > squared_length * cos_theta * cos_theta;
    if (d_dot_u < 0 && cos_theta < 0)
        return d_dot_u * d_dot_u < squared_length * cos_theta * cos_theta;
    return d_dot_u >= 0;
}

/* The article's naive kernel without the clamp: acosf(1.00000012) is NaN. */
static inline int naive_unclamped(float cx, float cy, float ux, float uy, float r,
                                  float theta, float px, float py) {
    float dx = px - cx, dy = py - cy;
    const float length = sqrtf(dx * dx + dy * dy);
    if (!(length < r) || length == 0.0f)
        return 0;
    dx /= length;
    dy /= length;
    return acosf(dx * ux + dy * uy) < theta;
}

SB_KERNEL(radius_le, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .known_bad = 1,
          .summary = "broken: <= on the radius");
SB_KERNEL(missing_sign_case, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .known_bad = 1,
          .summary = "broken: no both-negative case");
SB_KERNEL(apex_inside, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .known_bad = 1,
          .summary = "broken: the article's apex rule");
SB_KERNEL(naive_unclamped, SCALAR, 1, (cx, cy, ux, uy, r, theta), .family = "sector", .known_bad = 1,
          .rounding_bound = 16, .summary = "broken: acosf of a cosine above 1");

#if defined(SB_X86)
/* The SSE2 kernel with its last lane forced outside: the answer depends on the
 * point's position in the vector. */
SB_SSE2_ATTR
static inline __m128 lane_dependent(__m128 cx, __m128 cy, __m128 ux, __m128 uy,
                                    __m128 r2, __m128 cos_theta, __m128 px, __m128 py) {
    const __m128 dx = _mm_sub_ps(px, cx), dy = _mm_sub_ps(py, cy);
    const __m128 squared_length = _mm_add_ps(_mm_mul_ps(dx, dx), _mm_mul_ps(dy, dy));
    const __m128 d_dot_u = _mm_add_ps(_mm_mul_ps(dx, ux), _mm_mul_ps(dy, uy));
    const __m128 inside = _mm_and_ps(_mm_cmplt_ps(squared_length, r2),
        _mm_cmpgt_ps(d_dot_u, _mm_mul_ps(_mm_sqrt_ps(squared_length), cos_theta)));
    return _mm_and_ps(inside, _mm_castsi128_ps(_mm_set_epi32(0, -1, -1, -1)));
}

SB_KERNEL(lane_dependent, SSE2, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .known_bad = 1,
          .summary = "broken: lane 3 always outside");
#endif
