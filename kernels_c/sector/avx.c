/* AVX2 and AVX-512 point-in-sector kernels: 8 and 16 points per step, compiled into
 * every build with per-function target attributes and skipped where the CPU lacks them.
 *
 * Exactness: each product is pinned with SB_NO_CONTRACT, so no flag set can fuse it
 * into an FMA (a different rounding); these kernels then answer exactly as sse2 and
 * sse2_nosqrt do, at -O2 and at -O3 -march=native alike.  The *_fma kernel fuses on
 * purpose and may differ from them by a rounding.
 *
 * The bound (see the README): on Zen 4, AVX-512 multiplies and every compare into a
 * mask register share the two multiply pipes, each taking a 512-bit op per cycle.  The
 * no-sqrt test needs 6 multiplies (dx², dy², dx·ux, dy·uy, a·|a|, s·k|k|) and 2 compares
 * per 16 points: 8 cycles, 0.5 cycles per test. */
#include "sb_common.h"
#include "nosqrt.h"

#if defined(SB_X86)

/* ------------------------------------------------------------------------ AVX2 */

SB_AVX2_ATTR
static inline __m256 avx2(__m256 cx, __m256 cy, __m256 ux, __m256 uy, __m256 r2, __m256 k, __m256 px, __m256 py) {
    __m256 s, a;
    avx2_s_a(cx, cy, ux, uy, px, py, &s, &a);
    __m256 edge = _mm256_mul_ps(_mm256_sqrt_ps(s), k);
    SB_NO_CONTRACT(edge);
    return _mm256_and_ps(_mm256_cmp_ps(s, r2, _CMP_LT_OQ), _mm256_cmp_ps(a, edge, _CMP_GT_OQ));
}

/* The same with the sums fused: two fewer instructions per 8 points, at the price of
 * one rounding fewer in s and a (its answers may differ from the others' by a rounding). */
SB_AVX2_FMA_ATTR
static inline __m256 avx2_nosqrt_fma(__m256 cx, __m256 cy, __m256 ux, __m256 uy, __m256 r2, __m256 k, __m256 px,
                                     __m256 py) {
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    const __m256 dx = _mm256_sub_ps(px, cx), dy = _mm256_sub_ps(py, cy);
    const __m256 s = _mm256_fmadd_ps(dy, dy, _mm256_mul_ps(dx, dx));
    const __m256 a = _mm256_fmadd_ps(dy, uy, _mm256_mul_ps(dx, ux));
    const __m256 lhs = _mm256_or_ps(_mm256_mul_ps(a, a), _mm256_and_ps(a, sign));
    const __m256 rhs = _mm256_or_ps(_mm256_mul_ps(s, _mm256_mul_ps(k, k)), _mm256_and_ps(k, sign));
    return _mm256_and_ps(_mm256_cmp_ps(s, r2, _CMP_LT_OQ), _mm256_cmp_ps(lhs, rhs, _CMP_GT_OQ));
}

/* Blocked: four sectors tested per load of 8 points (issue 19).  Its NoOperation loads the
 * points a quarter as often as avx2_nosqrt's, so where the points stream from beyond L2 the
 * two kernels' net times differ while their end-to-end times do not. */
SB_AVX2_ATTR
static inline __m256 avx2_nosqrt_b4(__m256 cx, __m256 cy, __m256 ux, __m256 uy, __m256 r2, __m256 k, __m256 px,
                                    __m256 py) {
    return avx2_nosqrt(cx, cy, ux, uy, r2, k, px, py);
}

/* ------------------------------------------------------------------------ AVX-512 */

SB_AVX512_ATTR
static inline __mmask16 avx512(__m512 cx, __m512 cy, __m512 ux, __m512 uy, __m512 r2, __m512 k, __m512 px,
                               __m512 py) {
    __m512 s, a;
    avx512_s_a(cx, cy, ux, uy, px, py, &s, &a);
    __m512 edge = _mm512_mul_ps(_mm512_sqrt_ps(s), k);
    SB_NO_CONTRACT(edge);
    /* the second compare runs under the first's mask: the AND costs nothing */
    return _mm512_mask_cmp_ps_mask(_mm512_cmp_ps_mask(s, r2, _CMP_LT_OQ), a, edge, _CMP_GT_OQ);
}

/* Blocked: four sectors tested per load of 16 points.  On Zen 4 it buys nothing (the
 * multiply pipes, not the loads, are the limit); on a core with more load pressure
 * per multiply it would. */
SB_AVX512_ATTR
static inline __mmask16 avx512_nosqrt_b4(__m512 cx, __m512 cy, __m512 ux, __m512 uy, __m512 r2, __m512 k, __m512 px,
                                         __m512 py) {
    return avx512_nosqrt(cx, cy, ux, uy, r2, k, px, py);
}

#define SECTOR (cx, cy, ux, uy, r2, cos_theta)
SB_KERNEL(avx2, AVX2, 1, SECTOR, .family = "sector", .rounding_bound = 8,
          .summary = "AVX2, 8 lanes, _mm256_sqrt_ps");
SB_KERNEL(avx2_nosqrt, AVX2, 1, SECTOR, .family = "sector", .rounding_bound = 8,
          .summary = "AVX2, 8 lanes, no sqrt: sign-aware squares");
SB_KERNEL(avx2_nosqrt_b4, AVX2, 4, SECTOR, .family = "sector", .rounding_bound = 8,
          .summary = "AVX2, no sqrt, 4 sectors per load of 8 points");
SB_KERNEL(avx2_nosqrt_fma, AVX2_FMA, 1, SECTOR, .family = "sector", .rounding_bound = 8,
          .summary = "AVX2, 8 lanes, no sqrt, |D|^2 and D.u fused (FMA)");
SB_KERNEL(avx512, AVX512, 1, SECTOR, .family = "sector", .rounding_bound = 8,
          .summary = "AVX-512, 16 lanes into a mask, _mm512_sqrt_ps");
SB_KERNEL(avx512_nosqrt, AVX512, 1, SECTOR, .family = "sector", .rounding_bound = 8,
          .summary = "AVX-512, 16 lanes into a mask, no sqrt");
SB_KERNEL(avx512_nosqrt_b4, AVX512, 4, SECTOR, .family = "sector", .rounding_bound = 8,
          .summary = "AVX-512, no sqrt, 4 sectors per load of 16 points");

#endif
