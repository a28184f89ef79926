/* The narrow phase: the runs of candidate points through the brute-force kernels' own
 * predicate (../nosqrt.h: avx512_nosqrt, else avx2_nosqrt, else sse2_nosqrt, chosen at run time),
 * so the hits are those of brute force, pair for pair. */
#include <pthread.h>

#include "bp_internal.h"

/* AVX2 has no compress: per 8-bit hit mask, its lanes' numbers packed 3 bits each, lowest first,
 * spread by a variable shift into a permutation (vpermd reads an index's low 3 bits only), so a
 * vector's hits are stored with one permute and one store instead of a loop over its bits. */
uint32_t bp_compress_lanes[256];
static pthread_once_t compress_once = PTHREAD_ONCE_INIT;

static void compress_fill(void) {
    for (unsigned mask = 0; mask < 256; mask++) {
        uint32_t packed = 0;
        for (unsigned lane = 0, k = 0; lane < 8; lane++)
            if (mask >> lane & 1u)
                packed |= lane << (3 * k++);
        bp_compress_lanes[mask] = packed;
    }
}

void bp_compress_init(void) { pthread_once(&compress_once, compress_fill); }

#if defined(SB_X86)
SB_AVX512_ATTR
static int64_t run_avx512(const float *xs, const float *ys, const int32_t *ids, int64_t a, int64_t b,
                          const float *q, int32_t *out) {
    const __m512 cx = _mm512_set1_ps(q[0]), cy = _mm512_set1_ps(q[1]), ux = _mm512_set1_ps(q[2]);
    const __m512 uy = _mm512_set1_ps(q[3]), r2 = _mm512_set1_ps(q[4]), k = _mm512_set1_ps(q[5]);
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    int64_t n = 0, j = a;
    for (; j + 16 <= b; j += 16) {
        const __mmask16 hit = avx512_nosqrt(cx, cy, ux, uy, r2, k, _mm512_loadu_ps(xs + j), _mm512_loadu_ps(ys + j));
        const __m512i id =
            ids ? _mm512_loadu_si512((const void *)(ids + j)) : _mm512_add_epi32(_mm512_set1_epi32((int)j), iota);
        /* register-form compress and a full store, even of no hit: the memory form is slow on
         * Zen 4, and a branch on the mask mispredicts */
        _mm512_storeu_si512((void *)(out + n), _mm512_maskz_compress_epi32(hit, id));
        n += __builtin_popcount(hit);
    }
    if (j < b) {
        const __mmask16 live = (__mmask16)((1u << (b - j)) - 1u);
        const __mmask16 hit = live & avx512_nosqrt(cx, cy, ux, uy, r2, k, _mm512_maskz_loadu_ps(live, xs + j),
                                                   _mm512_maskz_loadu_ps(live, ys + j));
        if (hit) {
            const __m512i id = ids ? _mm512_maskz_loadu_epi32(live, ids + j)
                                   : _mm512_add_epi32(_mm512_set1_epi32((int)j), iota);
            _mm512_storeu_si512((void *)(out + n), _mm512_maskz_compress_epi32(hit, id));
            n += __builtin_popcount(hit);
        }
    }
    return n;
}

SB_AVX2_ATTR
static int64_t run_avx2(const float *xs, const float *ys, const int32_t *ids, int64_t a, int64_t b,
                        const float *q, int32_t *out) {
    const __m256 cx = _mm256_set1_ps(q[0]), cy = _mm256_set1_ps(q[1]), ux = _mm256_set1_ps(q[2]);
    const __m256 uy = _mm256_set1_ps(q[3]), r2 = _mm256_set1_ps(q[4]), k = _mm256_set1_ps(q[5]);
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i spread = _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21);
    int64_t n = 0, j = a;
    for (; j < b; j += 8) {
        unsigned hit;
        __m256i live = _mm256_set1_epi32(-1);
        if (j + 8 <= b) {
            hit = (unsigned)_mm256_movemask_ps(
                avx2_nosqrt(cx, cy, ux, uy, r2, k, _mm256_loadu_ps(xs + j), _mm256_loadu_ps(ys + j)));
        } else {
            live = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(b - j)), iota);
            hit = (unsigned)_mm256_movemask_ps(avx2_nosqrt(cx, cy, ux, uy, r2, k, _mm256_maskload_ps(xs + j, live),
                                                           _mm256_maskload_ps(ys + j, live)));
            hit &= (1u << (b - j)) - 1u;
        }
        if (hit) {
            const __m256i id = ids ? _mm256_maskload_epi32(ids + j, live)
                                   : _mm256_add_epi32(_mm256_set1_epi32((int)j), iota);
            const __m256i lanes = _mm256_srlv_epi32(_mm256_set1_epi32((int)bp_compress_lanes[hit]), spread);
            _mm256_storeu_si256((__m256i *)(out + n), _mm256_permutevar8x32_epi32(id, lanes));
            n += SB_POPCOUNT8(hit);
        }
    }
    return n;
}

SB_SSE2_ATTR
static int64_t run_sse2(const float *xs, const float *ys, const int32_t *ids, int64_t a, int64_t b,
                        const float *q, int32_t *out) {
    const __m128 cx = _mm_set1_ps(q[0]), cy = _mm_set1_ps(q[1]), ux = _mm_set1_ps(q[2]);
    const __m128 uy = _mm_set1_ps(q[3]), r2 = _mm_set1_ps(q[4]), k = _mm_set1_ps(q[5]);
    int64_t n = 0, j = a;
    for (; j < b; j += 4) {
        unsigned hit;
        if (j + 4 <= b) {
            hit = (unsigned)_mm_movemask_ps(sse2_nosqrt(cx, cy, ux, uy, r2, k, _mm_loadu_ps(xs + j), _mm_loadu_ps(ys + j)));
        } else { /* the tail through a zeroed copy: no load past b */
            float tx[4] = {0, 0, 0, 0}, ty[4] = {0, 0, 0, 0};
            for (int64_t t = j; t < b; t++) {
                tx[t - j] = xs[t];
                ty[t - j] = ys[t];
            }
            hit = (unsigned)_mm_movemask_ps(sse2_nosqrt(cx, cy, ux, uy, r2, k, _mm_loadu_ps(tx), _mm_loadu_ps(ty)));
            hit &= (1u << (b - j)) - 1u;
        }
        while (hit) {
            const int l = __builtin_ctz(hit);
            hit &= hit - 1;
            out[n++] = ids ? ids[j + l] : (int32_t)(j + l);
        }
    }
    return n;
}
#endif

/* The instruction sets the caller allows (sb_bp_allow): the best narrow phase, and what the
 * SIMD sort, the grid's keys and the points' bounds may use; pdep for Morton codes. */
static int allowed_isa = 3, allowed_bmi2 = 1;

void sb_bp_allow(int isa, int bmi2) {
    allowed_isa = isa;
    allowed_bmi2 = bmi2;
}

int bp_bmi2_allowed(void) { return allowed_bmi2; }

/* The narrow phases, best first; SB_BP_AUTO (0) picks the best this CPU runs and the caller allows. */
int sb_bp_isa_supported(int isa) {
    if (isa > allowed_isa)
        return 0;
#if defined(SB_X86)
    __builtin_cpu_init();
    switch (isa) {
    case 3:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("popcnt");
    case 2:
        return __builtin_cpu_supports("avx2") != 0;
    case 1:
        return __builtin_cpu_supports("sse2") != 0;
    }
#endif
    (void)isa;
    return 0;
}

int sb_bp_best_isa(void) {
    for (int isa = 3; isa >= 1; isa--)
        if (sb_bp_isa_supported(isa))
            return isa;
    return 0;
}

bp_run_fn bp_pick_run(int isa) {
    if (isa == 0)
        isa = sb_bp_best_isa();
    if (!sb_bp_isa_supported(isa))
        return NULL;
#if defined(SB_X86)
    if (isa == 3)
        return run_avx512;
    if (isa == 2) {
        bp_compress_init();
        return run_avx2;
    }
    if (isa == 1)
        return run_sse2;
#endif
    return NULL;
}
