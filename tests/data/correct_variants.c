/* Test-only: correct kernels written differently from the shipped ones, which `verify`
 * must NOT call logic bugs: they decide the same predicate, only their rounding differs. */
#include "sb_common.h"

/* Everything in double: closer to the exact answer than any float32 kernel. */
static inline int c_sector_double(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const double dx = (double)px - cx, dy = (double)py - cy, s = dx * dx + dy * dy;
    return s < r2 && dx * ux + dy * uy > sqrt(s) * k;
}
SB_KERNEL(c_sector_double, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector",
          .summary = "correct: computed in double");

/* Fused multiply-adds, terms in the other order, sign-aware squares. */
static inline int c_sector_fma(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy;
    const float s = fmaf(dy, dy, dx * dx), a = fmaf(dy, uy, dx * ux);
    return (s < r2) & (a * fabsf(a) > s * (k * fabsf(k)));
}
SB_KERNEL(c_sector_fma, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector",
          .summary = "correct: fmaf with reordered terms, sign-aware squares");

#if defined(SB_X86)
/* SSE2 with the radius test on |D| and the sums in the other order. */
SB_SSE2_ATTR
static inline __m128 c_sector_sse2_length(__m128 cx, __m128 cy, __m128 ux, __m128 uy, __m128 r2, __m128 k, __m128 px,
                                          __m128 py) {
    const __m128 dx = _mm_sub_ps(px, cx), dy = _mm_sub_ps(py, cy);
    const __m128 s = _mm_add_ps(_mm_mul_ps(dy, dy), _mm_mul_ps(dx, dx));
    const __m128 a = _mm_add_ps(_mm_mul_ps(dy, uy), _mm_mul_ps(dx, ux));
    return _mm_and_ps(_mm_cmpgt_ps(r2, s), _mm_cmpgt_ps(a, _mm_mul_ps(k, _mm_sqrt_ps(s))));
}
SB_KERNEL(c_sector_sse2_length, SSE2, 2, (cx, cy, ux, uy, r2, cos_theta), .family = "sector",
          .summary = "correct: SSE2, sums reordered, 2 sectors per load");
#endif

/* Orientations in double. */
static inline int c_triangle_double(float ax, float ay, float bx, float by, float cx, float cy, float px, float py) {
    const double o1 = ((double)bx - ax) * ((double)py - ay) - ((double)by - ay) * ((double)px - ax);
    const double o2 = ((double)cx - bx) * ((double)py - by) - ((double)cy - by) * ((double)px - bx);
    const double o3 = ((double)ax - cx) * ((double)py - cy) - ((double)ay - cy) * ((double)px - cx);
    return ((o1 > 0) & (o2 > 0) & (o3 > 0)) | ((o1 < 0) & (o2 < 0) & (o3 < 0));
}
SB_KERNEL(c_triangle_double, SCALAR, 1, (ax, ay, bx, by, cx, cy), .family = "triangle",
          .summary = "correct: orientations in double");
