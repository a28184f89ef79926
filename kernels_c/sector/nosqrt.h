/* The no-sqrt point-in-sector predicates, a|a| > s k|k| and s < r2, shared by the brute-force
 * kernels (sector_sse2.c, sector_avx.c) and the broadphase's narrow phase
 * (sector_broadphase.c): one definition, so the broadphase tests every candidate pair with
 * the very operations the brute-force kernels use, and its hits are identical to theirs.
 * Included after sb_common.h. */
#ifndef SECTOR_NOSQRT_H
#define SECTOR_NOSQRT_H

#if defined(SB_X86)

/* Version 5 without sqrt, as the sign-aware squares of the scalar bittrick:
 * a|a| > s k|k|.  Five fewer operations than the article's blend of the sign
 * cases, and right at the apex. */
SB_SSE2_ATTR
static inline __m128 sse2_nosqrt(__m128 cx, __m128 cy, __m128 ux, __m128 uy,
                                 __m128 r2, __m128 cos_theta, __m128 px,
                                 __m128 py) {
    const __m128 sign_bit = _mm_castsi128_ps(_mm_set1_epi32((int)0x80000000u));
    const __m128 dx = _mm_sub_ps(px, cx);
    const __m128 dy = _mm_sub_ps(py, cy);
    const __m128 squared_length = _mm_add_ps(_mm_mul_ps(dx, dx), _mm_mul_ps(dy, dy));
    const __m128 inside_circle = _mm_cmplt_ps(squared_length, r2);
    const __m128 d_dot_u = _mm_add_ps(_mm_mul_ps(dx, ux), _mm_mul_ps(dy, uy));
    const __m128 lhs = _mm_or_ps(_mm_mul_ps(d_dot_u, d_dot_u),
                                 _mm_and_ps(d_dot_u, sign_bit));
    const __m128 rhs = _mm_or_ps(
        _mm_mul_ps(squared_length, _mm_mul_ps(cos_theta, cos_theta)),
        _mm_and_ps(cos_theta, sign_bit));
    return _mm_and_ps(inside_circle, _mm_cmpgt_ps(lhs, rhs));
}

/* s = |D|^2 and a = D.u for 8 points, D = p - c, each product pinned (no FMA). */
SB_AVX2_ATTR
static inline void avx2_s_a(__m256 cx, __m256 cy, __m256 ux, __m256 uy, __m256 px, __m256 py, __m256 *s, __m256 *a) {
    const __m256 dx = _mm256_sub_ps(px, cx), dy = _mm256_sub_ps(py, cy);
    __m256 xx = _mm256_mul_ps(dx, dx), yy = _mm256_mul_ps(dy, dy);
    __m256 xu = _mm256_mul_ps(dx, ux), yu = _mm256_mul_ps(dy, uy);
    SB_NO_CONTRACT(xx);
    SB_NO_CONTRACT(yy);
    SB_NO_CONTRACT(xu);
    SB_NO_CONTRACT(yu);
    *s = _mm256_add_ps(xx, yy);
    *a = _mm256_add_ps(xu, yu);
}

/* a|a| > s·k|k| with the sign bits carried by and/or, as sse2_nosqrt. */
SB_AVX2_ATTR
static inline __m256 avx2_nosqrt(__m256 cx, __m256 cy, __m256 ux, __m256 uy, __m256 r2, __m256 k, __m256 px,
                                 __m256 py) {
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    __m256 s, a;
    avx2_s_a(cx, cy, ux, uy, px, py, &s, &a);
    const __m256 lhs = _mm256_or_ps(_mm256_mul_ps(a, a), _mm256_and_ps(a, sign));
    const __m256 rhs = _mm256_or_ps(_mm256_mul_ps(s, _mm256_mul_ps(k, k)), _mm256_and_ps(k, sign));
    return _mm256_and_ps(_mm256_cmp_ps(s, r2, _CMP_LT_OQ), _mm256_cmp_ps(lhs, rhs, _CMP_GT_OQ));
}

/* s = |D|^2 and a = D.u for 16 points, D = p - c, each product pinned (no FMA). */
SB_AVX512_ATTR
static inline void avx512_s_a(__m512 cx, __m512 cy, __m512 ux, __m512 uy, __m512 px, __m512 py, __m512 *s,
                              __m512 *a) {
    const __m512 dx = _mm512_sub_ps(px, cx), dy = _mm512_sub_ps(py, cy);
    __m512 xx = _mm512_mul_ps(dx, dx), yy = _mm512_mul_ps(dy, dy);
    __m512 xu = _mm512_mul_ps(dx, ux), yu = _mm512_mul_ps(dy, uy);
    SB_NO_CONTRACT(xx);
    SB_NO_CONTRACT(yy);
    SB_NO_CONTRACT(xu);
    SB_NO_CONTRACT(yu);
    *s = _mm512_add_ps(xx, yy);
    *a = _mm512_add_ps(xu, yu);
}

/* a·|a| > s·(k·|k|): |a| by clearing the sign bit, k·|k| hoisted out of the loop. */
SB_AVX512_ATTR
static inline __mmask16 avx512_nosqrt(__m512 cx, __m512 cy, __m512 ux, __m512 uy, __m512 r2, __m512 k, __m512 px,
                                      __m512 py) {
    __m512 s, a;
    avx512_s_a(cx, cy, ux, uy, px, py, &s, &a);
    const __m512 lhs = _mm512_mul_ps(a, _mm512_abs_ps(a));
    const __m512 rhs = _mm512_mul_ps(s, _mm512_mul_ps(k, _mm512_abs_ps(k)));
    return _mm512_mask_cmp_ps_mask(_mm512_cmp_ps_mask(s, r2, _CMP_LT_OQ), lhs, rhs, _CMP_GT_OQ);
}

#endif

#endif
