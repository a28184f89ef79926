/* NoOperation kernels: the same loops as the real kernels, reading the same
 * points, always false.  Their time is the loop, load and call overhead that
 * the harness subtracts.  The barriers keep every load at every flag set, so
 * their time grows with N x M like the kernels'. */
#include "sb_common.h"

static inline int noop(float cx, float cy, float ux, float uy, float r2,
                       float cos_theta, float px, float py) {
    (void)cx, (void)cy, (void)ux, (void)uy, (void)r2, (void)cos_theta;
    SB_USE_FLOAT(px);
    SB_USE_FLOAT(py);
    return 0;
}

SB_SECTOR_SCALAR_KERNEL(noop, noop, r2, cos_theta, "noop", 0, SB_NOOP,
                        "NoOperation for scalar sector kernels")

#if defined(SB_X86)
SB_TARGET("sse2")
static inline __m128 noop_simd(__m128 cx, __m128 cy, __m128 ux, __m128 uy,
                               __m128 r2, __m128 cos_theta, __m128 px,
                               __m128 py) {
    (void)cx, (void)cy, (void)ux, (void)uy, (void)r2, (void)cos_theta;
    SB_USE_VECTOR(px);
    SB_USE_VECTOR(py);
    return _mm_setzero_ps();
}

#define SSE_MASK_OF(v) _mm_movemask_ps(v)
SB_SECTOR_SIMD_KERNEL(noop_simd, noop_simd, "sse2", __m128, 4, _mm_set1_ps,
                      _mm_load_ps, SSE_MASK_OF, "noop_simd", 0, SB_NOOP,
                      "NoOperation for 4-lane SIMD sector kernels")
#endif

static inline int noop_triangle(float ax, float ay, float bx, float by, float cx,
                                float cy, float px, float py) {
    (void)ax, (void)ay, (void)bx, (void)by, (void)cx, (void)cy;
    SB_USE_FLOAT(px);
    SB_USE_FLOAT(py);
    return 0;
}

SB_TRIANGLE_SCALAR_KERNEL(noop_triangle, noop_triangle, "noop_triangle", 0, 0.0,
                          SB_NOOP, "NoOperation for scalar triangle kernels")
