/* Test-only: a kernel needing a CPU feature this harness never claims to have
 * (sb_cpu_supports does not know avx512fp16), so it must be skipped. */
#include "sb_common.h"

#if defined(SB_X86)
/* A descriptor like SSE2's whose feature this harness never reports. */
#define SB_FP16_NAME "fp16 x4"
#define SB_FP16_FEATURES "avx512fp16"
#define SB_FP16_ATTR __attribute__((target("avx512fp16")))
#define SB_FP16_W SB_SSE2_W
#define SB_FP16_VEC SB_SSE2_VEC
#define SB_FP16_RESULT SB_SSE2_RESULT
#define SB_FP16_SET1 SB_SSE2_SET1
#define SB_FP16_LOAD SB_SSE2_LOAD
#define SB_FP16_BITS SB_SSE2_BITS
#define SB_FP16_COUNT SB_SSE2_COUNT
#define SB_FP16_NOOP SB_SSE2_NOOP

SB_FP16_ATTR
static inline __m128 needs_fp16(__m128 cx, __m128 cy, __m128 ux, __m128 uy,
                                __m128 r2, __m128 cos_theta, __m128 px, __m128 py) {
    (void)cx, (void)cy, (void)ux, (void)uy, (void)r2, (void)cos_theta, (void)px, (void)py;
    return _mm_setzero_ps();
}

SB_KERNEL(needs_fp16, FP16, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .known_bad = 1,
          .summary = "test only: needs a feature never reported");
#endif
