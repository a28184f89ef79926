/* SSE2 point-in-sector kernels, structure of arrays, 4 points per step. */
#include "sb_common.h"
#include "nosqrt.h"

#if defined(SB_X86)

/* The article's version 4: |D|^2 < r^2 and D.u > sqrt(|D|^2) cos(theta). */
SB_SSE2_ATTR
static inline __m128 sse2(__m128 cx, __m128 cy, __m128 ux, __m128 uy,
                          __m128 r2, __m128 cos_theta, __m128 px, __m128 py) {
    const __m128 dx = _mm_sub_ps(px, cx);
    const __m128 dy = _mm_sub_ps(py, cy);
    const __m128 squared_length = _mm_add_ps(_mm_mul_ps(dx, dx), _mm_mul_ps(dy, dy));
    const __m128 inside_circle = _mm_cmplt_ps(squared_length, r2);
    const __m128 d_dot_u = _mm_add_ps(_mm_mul_ps(dx, ux), _mm_mul_ps(dy, uy));
    const __m128 inside_angle =
        _mm_cmpgt_ps(d_dot_u, _mm_mul_ps(_mm_sqrt_ps(squared_length), cos_theta));
    return _mm_and_ps(inside_circle, inside_angle);
}

SB_KERNEL(sse2, SSE2, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector",
          .rounding_bound = 8, .summary = "SSE2, 4 lanes, _mm_sqrt_ps");
SB_KERNEL(sse2_nosqrt, SSE2, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector",
          .rounding_bound = 8, .summary = "SSE2, 4 lanes, no sqrt: sign-aware squares");

#endif
