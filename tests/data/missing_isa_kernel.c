/* Test-only: a kernel needing a CPU feature this harness never claims to have
 * (sb_cpu_supports does not know avx512fp16), so it must be skipped. */
#include "sb_common.h"

#if defined(SB_X86)
SB_TARGET("avx512fp16")
static inline __m128 needs_fp16(__m128 cx, __m128 cy, __m128 ux, __m128 uy,
                                __m128 r2, __m128 cos_theta, __m128 px, __m128 py) {
    (void)cx, (void)cy, (void)ux, (void)uy, (void)r2, (void)cos_theta, (void)px, (void)py;
    return _mm_setzero_ps();
}

#define MASK_OF(v) _mm_movemask_ps(v)
SB_SECTOR_SIMD_KERNEL(needs_fp16, needs_fp16, "avx512fp16", __m128, 4, _mm_set1_ps,
                      _mm_load_ps, MASK_OF, "noop_simd", 8, SB_NOT_DEFAULT,
                      "test only: needs a feature never reported")
#endif
