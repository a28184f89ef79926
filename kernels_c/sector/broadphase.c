/* The sector broadphase: which points lie in which sectors, without testing all N x M pairs.
 *
 * Index the points once (grid or morton), then for each sector: its box (below), the runs of
 * candidate points the box touches, and those runs fed to the narrow phase, which is the
 * brute-force kernels' own predicate (sector_nosqrt.h: avx512_nosqrt, else avx2_nosqrt, else
 * sse2_nosqrt, chosen at run time).  Every point the predicate accepts lies in the box, so
 * the hits are those of brute force, pair for pair.  Output: CSR (offsets N + 1, indices
 * ascending per sector), allocated here and released with sb_bp_free.
 *
 *   grid    points counting-sorted into uniform cells in row-major order; a box's cells on one
 *           row are one contiguous run of points.  The cell size is the caller's (the Python
 *           side derives it from the radii, families/sector/broadphase.py).
 *   morton  seed 003's method in 2-D: points quantised to 2^q x 2^q, codes by bit separation
 *           with magic numbers (BMI2 pdep where the CPU has a fast one: not on AMD before
 *           Zen 3, where it is microcoded), counting-sorted by code; a box picks the level
 *           MSB(width) + 1 so that it touches at most 2 x 2 cells, whose Z-ranges are emitted
 *           in sorted order (one compare-swap) and merged when they touch.
 *
 * First written as a prototype by a colleague (its report measured 77-96x over brute force on
 * game 20k x 200k with identical hits); the box rule and the quantisation are its, unchanged. */
#include <float.h>
#include <stdlib.h>

#include "sb_common.h"
#include "nosqrt.h"
#include "abi.h"

#if defined(SB_X86)
#include <cpuid.h>
#endif

void sb_bp_free(void *p) { free(p); }

void sb_bp_hits_free(sb_bp_hits *h) {
    free(h->offsets);
    free(h->indices);
    h->offsets = NULL;
    h->indices = NULL;
}

/* ------------------------------------------------------------------------ the box */

/* The box of the sector's float32 kernel, not of the real sector.  Proven (the prototype's
 * report, section 3): the kernel accepts p only if |D| < sqrt(r2)(1 + 8e) and
 * D.u > |D| (k - 8e(|k| + |u|)), e = 2^-24, or |D| < 2^-40 (underflow).  So the box of the real
 * sector of radius rho = sqrt(r2)(1 + 8e) and cosine k' = (k - 8e(|k| + |u|)) / |u| about
 * u / |u|, computed in double, padded by 2^-40 (1 + rho) + 2^-50 (|c| + rho), holds every point
 * the kernel accepts; double rounding only enlarges it next to those pads.  Its corners: the
 * apex, the two arc ends (u rotated by +-acos k', sin = sqrt(1 - k'^2): no trigonometry), and
 * each axis extreme of the circle whose direction lies inside the sector.  Returns 0 when the
 * kernel can accept no point (NaN input, r2 <= 0, an infinite apex, k = +inf).  Every value is
 * finite past the first tests, so a -ffast-math build computes the same box to within a few
 * double roundings, far inside the pads. */
static inline uint32_t bits32(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}
/* Classified on the bits, not with isnan/isinf: a -ffast-math build may assume no NaN or
 * infinity in floating-point tests (clang warns that they are undefined there). */
static inline int finite32(float f) { return (bits32(f) & 0x7f800000u) != 0x7f800000u; }
static inline int nan32(float f) { return (bits32(f) & 0x7fffffffu) > 0x7f800000u; }
#define SB_BP_INF32 0x7f800000u

static int sector_box(float cxf, float cyf, float uxf, float uyf, float r2f, float kf, double *b) {
    if (nan32(uxf) || nan32(uyf) || nan32(r2f) || nan32(kf) || !finite32(cxf) || !finite32(cyf))
        return 0; /* a NaN input, or an apex at infinity: p - c is never finite and inside */
    const uint32_t r2b = bits32(r2f), kb = bits32(kf);
    if ((r2b >> 31) || r2b == 0 || kb == SB_BP_INF32)
        return 0; /* r2 <= 0: s < r2 never holds; k = +inf: the angle test never holds */
    if (r2b == SB_BP_INF32) { /* every finite point may be inside */
        b[0] = b[2] = -DBL_MAX;
        b[1] = b[3] = DBL_MAX;
        return 1;
    }
    const double cx = cxf, cy = cyf, ux = uxf, uy = uyf, r2 = r2f, k = kf;
    const double E = 0x1p-24;
    const double rho = sqrt(r2) * (1.0 + 8 * E); /* finite: r2 < 2^128 */
    double xmin, xmax, ymin, ymax;
    /* |u| far from 1 (or k = -inf): keep the radius alone, always valid.  |u| in [2^-20, 2^20]
     * keeps the products from underflowing unless |D| < 2^-100, inside the apex pad. */
    int full = !finite32(uxf) || !finite32(uyf) || !finite32(kf);
    const double un = full ? 1.0 : sqrt(ux * ux + uy * uy);
    full = full || un < 0x1p-20 || un > 0x1p20;
    double ke = 0;
    if (!full) {
        ke = (k - 8 * E * (fabs(k) + un)) / un;
        full = ke <= -1.0;
    }
    if (full) {
        xmin = ymin = -rho;
        xmax = ymax = rho;
    } else {
        if (ke > 1.0)
            ke = 1.0;
        const double hx = ux / un, hy = uy / un;
        const double cs = ke, sn = sqrt(1.0 - ke * ke);
        const double e1x = rho * (hx * cs - hy * sn), e1y = rho * (hy * cs + hx * sn);
        const double e2x = rho * (hx * cs + hy * sn), e2y = rho * (hy * cs - hx * sn);
        xmin = fmin(0.0, fmin(e1x, e2x));
        xmax = fmax(0.0, fmax(e1x, e2x));
        ymin = fmin(0.0, fmin(e1y, e2y));
        ymax = fmax(0.0, fmax(e1y, e2y));
        /* an axis direction inside the (relaxed) angle: the arc reaches the circle's extreme */
        if (hx >= cs)
            xmax = rho;
        if (-hx >= cs)
            xmin = -rho;
        if (hy >= cs)
            ymax = rho;
        if (-hy >= cs)
            ymin = -rho;
    }
    const double pad = 0x1p-40 * (1.0 + rho) + 0x1p-50 * (fabs(cx) + fabs(cy) + rho);
    b[0] = cx + xmin - pad;
    b[1] = cx + xmax + pad;
    b[2] = cy + ymin - pad;
    b[3] = cy + ymax + pad;
    return 1;
}

int sb_bp_box(const sb_bp_sectors *s, int64_t i, double *out4) {
    return sector_box(s->cx[i], s->cy[i], s->ux[i], s->uy[i], s->r2[i], s->cos_theta[i], out4);
}

/* ------------------------------------------------------------------------ narrow phase */

/* Points [a, b) of (xs, ys); hit j writes ids ? ids[j] : j to out (room for b - a + 16).
 * q = cx, cy, ux, uy, r2, cos_theta.  Returns the hits written. */
typedef int64_t (*run_fn)(const float *xs, const float *ys, const int32_t *ids, int64_t a, int64_t b,
                          const float *q, int32_t *out);

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
        if (hit) {
            const __m512i id =
                ids ? _mm512_loadu_si512((const void *)(ids + j)) : _mm512_add_epi32(_mm512_set1_epi32((int)j), iota);
            /* register-form compress and a full store: the memory form is slow on Zen 4 */
            _mm512_storeu_si512((void *)(out + n), _mm512_maskz_compress_epi32(hit, id));
            n += __builtin_popcount(hit);
        }
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
    int64_t n = 0, j = a;
    for (; j < b; j += 8) {
        unsigned hit;
        if (j + 8 <= b) {
            hit = (unsigned)_mm256_movemask_ps(
                avx2_nosqrt(cx, cy, ux, uy, r2, k, _mm256_loadu_ps(xs + j), _mm256_loadu_ps(ys + j)));
        } else {
            const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(b - j)),
                                                    _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            hit = (unsigned)_mm256_movemask_ps(avx2_nosqrt(cx, cy, ux, uy, r2, k, _mm256_maskload_ps(xs + j, live),
                                                           _mm256_maskload_ps(ys + j, live)));
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

/* The narrow phases, best first; SB_BP_AUTO (0) picks the best this CPU runs. */
int sb_bp_isa_supported(int isa) {
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

static run_fn pick_run(int isa) {
    if (isa == 0)
        isa = sb_bp_best_isa();
    if (!sb_bp_isa_supported(isa))
        return NULL;
#if defined(SB_X86)
    if (isa == 3)
        return run_avx512;
    if (isa == 2)
        return run_avx2;
    if (isa == 1)
        return run_sse2;
#endif
    return NULL;
}

/* ------------------------------------------------------------------------ hits */

static int hits_init(sb_bp_hits *h, int64_t n, int64_t cap) {
    memset(h, 0, sizeof *h);
    h->n = n;
    h->cap = cap < 1024 ? 1024 : cap;
    h->offsets = malloc((size_t)(n + 1) * sizeof *h->offsets);
    h->indices = malloc((size_t)h->cap * sizeof *h->indices);
    if (!h->offsets || !h->indices) {
        sb_bp_hits_free(h);
        return -1;
    }
    h->offsets[0] = 0;
    return 0;
}

static int hits_reserve(sb_bp_hits *h, int64_t more) {
    if (h->nhits + more + 16 <= h->cap)
        return 0;
    int64_t cap = h->cap * 2;
    while (cap < h->nhits + more + 16)
        cap *= 2;
    int32_t *p = realloc(h->indices, (size_t)cap * sizeof *p);
    if (!p)
        return -1;
    h->indices = p;
    h->cap = cap;
    return 0;
}

/* One sector's hits arrive as a concatenation of ascending runs (one per cell).  Sorted by an
 * interpolation bucket pass (bucket = (x - min) B / (max - min + 1), monotone), then each
 * bucket by insertion, or by qsort when it is large: O(n) expected, O(n log n) worst. */
typedef struct scratch {
    int32_t *tmp, *cnt;
    int64_t cap;
} scratch;

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void isort(int32_t *v, int64_t n) {
    for (int64_t i = 1; i < n; i++) {
        const int32_t x = v[i];
        int64_t j = i;
        while (j > 0 && v[j - 1] > x) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x;
    }
}

static int sort_hits_portable(int32_t *v, int64_t n, scratch *sc) {
    if (n <= 32) {
        isort(v, n);
        return 0;
    }
    int64_t B = 64;
    while (B < n)
        B *= 2;
    if (sc->cap < B + 1 || sc->cap < n) {
        const int64_t cap = 2 * (n > B ? n : B) + 2;
        free(sc->tmp);
        free(sc->cnt);
        sc->tmp = malloc((size_t)cap * sizeof *sc->tmp);
        sc->cnt = malloc((size_t)cap * sizeof *sc->cnt);
        sc->cap = cap;
        if (!sc->tmp || !sc->cnt)
            return -1;
    }
    int32_t lo = v[0], hi = v[0];
    for (int64_t i = 1; i < n; i++) {
        lo = v[i] < lo ? v[i] : lo;
        hi = v[i] > hi ? v[i] : hi;
    }
    const double scale = (double)B / ((double)hi - (double)lo + 1.0);
    int32_t *cnt = sc->cnt, *tmp = sc->tmp;
    memset(cnt, 0, (size_t)(B + 1) * sizeof *cnt);
    for (int64_t i = 0; i < n; i++)
        cnt[1 + (int64_t)((double)(v[i] - lo) * scale)]++;
    for (int64_t k = 1; k <= B; k++)
        cnt[k] += cnt[k - 1];
    /* cnt[k] is now the start of bucket k; fill moves it to the start of bucket k + 1 */
    for (int64_t i = 0; i < n; i++)
        tmp[cnt[(int64_t)((double)(v[i] - lo) * scale)]++] = v[i];
    int64_t start = 0;
    for (int64_t k = 0; k < B; k++) {
        const int64_t end = cnt[k], size = end - start;
        if (size > 48)
            qsort(tmp + start, (size_t)size, sizeof *tmp, cmp_i32);
        else if (size > 1)
            isort(tmp + start, size);
        start = end;
    }
    memcpy(v, tmp, (size_t)n * sizeof *v);
    return 0;
}

#if defined(SB_X86)
/* AVX-512 sort of one sector's hits (the prototype's): a bitonic network over 1..16 zmm
 * registers for n <= 256 (padded with INT32_MAX), above that an out-of-place compress
 * partition around a median of 3 (ids of one sector are distinct, so it always splits). */
SB_AVX512_ATTR static inline __m512i bitonic_lane(__m512i v, int j, __mmask16 keepmax) {
    __m512i perm;
    switch (j) {
    case 1: perm = _mm512_setr_epi32(1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14); break;
    case 2: perm = _mm512_setr_epi32(2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13); break;
    case 4: perm = _mm512_setr_epi32(4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11); break;
    default: perm = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7); break;
    }
    const __m512i w = _mm512_permutexvar_epi32(perm, v);
    return _mm512_mask_blend_epi32(keepmax, _mm512_min_epi32(v, w), _mm512_max_epi32(v, w));
}

/* lanes l with (l & j) != 0 */
static inline uint16_t lane_bits(int j) {
    return j == 1 ? 0xAAAA : j == 2 ? 0xCCCC : j == 4 ? 0xF0F0 : 0xFF00;
}

SB_AVX512_ATTR static inline __attribute__((always_inline)) void bitonic_regs(__m512i *v, const int R) {
    const int N = 16 * R;
#pragma GCC unroll 16
    for (int k = 2; k <= N; k <<= 1) {
#pragma GCC unroll 16
        for (int j = k >> 1; j > 0; j >>= 1) {
            if (j >= 16) {
                const int jr = j >> 4;
#pragma GCC unroll 16
                for (int r = 0; r < R; r++) {
                    if (r & jr) continue;
                    const int up = !((r << 4) & k);
                    const __m512i mn = _mm512_min_epi32(v[r], v[r | jr]);
                    const __m512i mx = _mm512_max_epi32(v[r], v[r | jr]);
                    v[r] = up ? mn : mx;
                    v[r | jr] = up ? mx : mn;
                }
            } else {
#pragma GCC unroll 16
                for (int r = 0; r < R; r++) {
                    const uint16_t U = k < 16 ? (uint16_t)~lane_bits(k) : (((r << 4) & k) ? 0 : 0xFFFF);
                    const __mmask16 keepmax = (__mmask16)~(lane_bits(j) ^ U);
                    v[r] = bitonic_lane(v[r], j, keepmax);
                }
            }
        }
    }
}

#define BITONIC_CASE(RR)                                                                       \
    SB_AVX512_ATTR static void bitonic_##RR(int32_t *a, int64_t n) {                                     \
        __m512i v[RR < 2 ? 2 : RR];                                                                       \
        const __m512i big = _mm512_set1_epi32(INT32_MAX);                                      \
        for (int r = 0; r < RR; r++) {                                                         \
            const int64_t left = n - 16 * r;                                                   \
            const __mmask16 m = left >= 16 ? 0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1u); \
            v[r] = _mm512_mask_loadu_epi32(big, m, a + 16 * r);                                \
        }                                                                                      \
        bitonic_regs(v, RR);                                                                   \
        for (int r = 0; r < RR; r++) {                                                         \
            const int64_t left = n - 16 * r;                                                   \
            const __mmask16 m = left >= 16 ? 0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1u); \
            _mm512_mask_storeu_epi32(a + 16 * r, m, v[r]);                                     \
        }                                                                                      \
    }
BITONIC_CASE(1)
BITONIC_CASE(2)
BITONIC_CASE(4)
BITONIC_CASE(8)
BITONIC_CASE(16)


SB_AVX512_ATTR static int simd_sort(int32_t *v, int64_t n, int depth, scratch *sc) {
    while (n > 256) {
        if (depth-- <= 0) {
            qsort(v, (size_t)n, sizeof *v, cmp_i32);
            return 0;
        }
        const int32_t a = v[0], b = v[n / 2], c = v[n - 1];
        const int32_t p = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
        const __m512i pv = _mm512_set1_epi32(p);
        if (sc->cap < 2 * n + 64) {
            free(sc->tmp);
            sc->cap = 4 * n + 128;
            sc->tmp = malloc((size_t)sc->cap * sizeof *sc->tmp);
            if (!sc->tmp) {
                sc->cap = 0;
                return -1;
            }
        }
        int32_t *lo = sc->tmp, *hi = sc->tmp + n + 32;
        int64_t nl = 0, nh = 0;
        for (int64_t i = 0; i < n; i += 16) {
            const __mmask16 live = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
            const __m512i x = _mm512_maskz_loadu_epi32(live, v + i);
            const __mmask16 m = _mm512_mask_cmplt_epi32_mask(live, x, pv);
            const __mmask16 mh = live & (__mmask16)~m;
            _mm512_storeu_si512(lo + nl, _mm512_maskz_compress_epi32(m, x));
            _mm512_storeu_si512(hi + nh, _mm512_maskz_compress_epi32(mh, x));
            nl += __builtin_popcount(m);
            nh += __builtin_popcount(mh);
        }
        memcpy(v, lo, (size_t)nl * sizeof *v);
        memcpy(v + nl, hi, (size_t)nh * sizeof *v);
        if (nl < nh) {
            if (simd_sort(v, nl, depth, sc))
                return -1;
            v += nl;
            n = nh;
        } else {
            if (simd_sort(v + nl, nh, depth, sc))
                return -1;
            n = nl;
        }
    }
    if (n <= 1)
        return 0;
    if (n <= 16)
        bitonic_1(v, n);
    else if (n <= 32)
        bitonic_2(v, n);
    else if (n <= 64)
        bitonic_4(v, n);
    else if (n <= 128)
        bitonic_8(v, n);
    else
        bitonic_16(v, n);
    return 0;
}

#endif

static int sort_hits(int32_t *v, int64_t n, scratch *sc, int simd) {
#if defined(SB_X86)
    if (simd)
        return simd_sort(v, n, 64, sc);
#endif
    (void)simd;
    return sort_hits_portable(v, n, sc);
}

/* ------------------------------------------------------------------------ the index */

/* Monotone non-decreasing in v (a rounded subtraction, a rounded product by inv > 0, floor and
 * clamping all are), so a point inside [lo, hi] lands in a cell within [cell(lo), cell(hi)]: no
 * epsilon at cell borders, the same function bins the points and the boxes. */
static inline int64_t cell_of(double v, double o, double inv, int64_t n) {
    const double t = (v - o) * inv;
    if (!(t >= 0.0))
        return 0; /* also -inf */
    if (t >= (double)(n - 1))
        return n - 1;
    return (int64_t)t;
}

enum { KIND_GRID = 1, KIND_MORTON = 2 };

struct sb_bp_index {
    int kind;
    int q;                /* morton: bits per axis */
    int64_t m, kept;      /* points, finite points (the others are never inside) */
    int64_t nx, ny;       /* grid: cells per axis */
    double x0, y0, inv;   /* cell of v: (v - origin) * inv */
    float *xs, *ys;       /* the finite points, sorted by cell (stable: ids ascend within a cell) */
    int32_t *ids;
    int32_t *start;       /* cells + 1: start[c] = first point of cell c (row-major or Z order) */
};

void sb_bp_index_free(sb_bp_index *t) {
    if (!t)
        return;
    free(t->xs);
    free(t->ys);
    free(t->ids);
    free(t->start);
    free(t);
}

int sb_bp_index_qbits(const sb_bp_index *t) { return t->kind == KIND_MORTON ? t->q : 0; }

int64_t sb_bp_index_cells(const sb_bp_index *t) { return t->kind == KIND_GRID ? t->nx * t->ny : 1ll << (2 * t->q); }

/* magic-number bit separation (seed 003, in 2-D) */
static inline uint32_t part1by1(uint32_t x) {
    x &= 0x0000FFFFu;
    x = (x | (x << 8)) & 0x00FF00FFu;
    x = (x | (x << 4)) & 0x0F0F0F0Fu;
    x = (x | (x << 2)) & 0x33333333u;
    x = (x | (x << 1)) & 0x55555555u;
    return x;
}
static inline uint32_t morton2(uint32_t x, uint32_t y) { return part1by1(x) | (part1by1(y) << 1); }

#if defined(SB_X86)
__attribute__((target("bmi2"))) static inline uint32_t morton2_pdep(uint32_t x, uint32_t y) {
    return _pdep_u32(x, 0x55555555u) | _pdep_u32(y, 0xAAAAAAAAu);
}
#endif

/* pdep where it is fast: BMI2, and not an AMD core before Zen 3 (family 0x19), which
 * microcodes it at hundreds of cycles. */
int sb_bp_fast_pdep(void) {
#if defined(SB_X86)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("bmi2"))
        return 0;
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d))
        return 0;
    const int amd = b == 0x68747541u; /* "Auth"enticAMD */
    if (!amd)
        return 1;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    const unsigned family = ((a >> 8) & 0xF) + (((a >> 8) & 0xF) == 0xF ? ((a >> 20) & 0xFF) : 0);
    return family >= 0x19;
#else
    return 0;
#endif
}

static void point_bounds(const float *px, const float *py, int64_t m, double *b, int64_t *finite) {
    float x0 = FLT_MAX, x1 = -FLT_MAX, y0 = FLT_MAX, y1 = -FLT_MAX;
    int64_t count = 0;
    for (int64_t j = 0; j < m; j++) {
        const float x = px[j], y = py[j];
        if (finite32(x) && finite32(y)) {
            x0 = x < x0 ? x : x0;
            x1 = x > x1 ? x : x1;
            y0 = y < y0 ? y : y0;
            y1 = y > y1 ? y : y1;
            count++;
        }
    }
    if (!count)
        x0 = x1 = y0 = y1 = 0;
    b[0] = x0, b[1] = x1, b[2] = y0, b[3] = y1;
    *finite = count;
}

/* Counting sort of the finite points by key (key UINT32_MAX: left out). */
static int scatter(sb_bp_index *t, const float *px, const float *py, const uint32_t *key, int64_t cells) {
    int32_t *cnt = t->start + 1; /* counts shifted by one, so the prefix sum lands in start */
    for (int64_t j = 0; j < t->m; j++)
        if (key[j] != UINT32_MAX)
            cnt[key[j]]++;
    for (int64_t c = 1; c <= cells; c++)
        t->start[c] += t->start[c - 1];
    const int64_t kept = t->start[cells];
    t->kept = kept;
    t->xs = malloc((size_t)(kept + 16) * sizeof(float));
    t->ys = malloc((size_t)(kept + 16) * sizeof(float));
    t->ids = malloc((size_t)(kept + 16) * sizeof(int32_t));
    int32_t *fill = malloc((size_t)(cells + 1) * sizeof *fill);
    if (!t->xs || !t->ys || !t->ids || !fill) {
        free(fill);
        return -1;
    }
    memcpy(fill, t->start, (size_t)(cells + 1) * sizeof *fill);
    for (int64_t j = 0; j < t->m; j++) {
        const uint32_t c = key[j];
        if (c == UINT32_MAX)
            continue;
        const int32_t d = fill[c]++;
        t->xs[d] = px[j];
        t->ys[d] = py[j];
        t->ids[d] = (int32_t)j;
    }
    free(fill);
    return 0;
}

/* At most 2^24 cells: the cell grows (doubling) when the points' extent demands it. */
#define SB_BP_MAX_CELLS (1 << 24)

/* cell: the side the caller wants (from the radii); raised to sqrt(area / points), about one
 * point per cell, below which cells only add runs. */
sb_bp_index *sb_bp_grid_build(const float *px, const float *py, int64_t m, double cell) {
    if (!(cell > 0) || m > INT32_MAX)
        return NULL;
    sb_bp_index *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    double bd[4];
    int64_t finite;
    point_bounds(px, py, m, bd, &finite);
    t->kind = KIND_GRID;
    t->m = m;
    t->x0 = bd[0];
    t->y0 = bd[2];
    const double w = bd[1] - bd[0], h = bd[3] - bd[2];
    if (finite > 0 && sqrt(w * h / (double)finite) > cell)
        cell = sqrt(w * h / (double)finite);
    while ((floor(w / cell) + 1) * (floor(h / cell) + 1) > (double)SB_BP_MAX_CELLS)
        cell *= 2;
    t->nx = (int64_t)floor(w / cell) + 1;
    t->ny = (int64_t)floor(h / cell) + 1;
    t->inv = 1.0 / cell;
    const int64_t cells = t->nx * t->ny;
    uint32_t *key = malloc((size_t)(m ? m : 1) * sizeof *key);
    t->start = calloc((size_t)cells + 2, sizeof *t->start);
    if (!key || !t->start) {
        free(key);
        sb_bp_index_free(t);
        return NULL;
    }
    for (int64_t j = 0; j < m; j++) {
        const float x = px[j], y = py[j];
        key[j] = finite32(x) && finite32(y) ? (uint32_t)(cell_of(y, t->y0, t->inv, t->ny) * t->nx +
                                                         cell_of(x, t->x0, t->inv, t->nx))
                                            : UINT32_MAX; /* never inside: the kernel rejects it */
    }
    const int failed = scatter(t, px, py, key, cells);
    free(key);
    if (failed) {
        sb_bp_index_free(t);
        return NULL;
    }
    return t;
}

/* The finest cells: 2^q per axis over the points' square extent, with q the smallest whose
 * cell is at most `cell` (the grid's rule), at most SB_BP_MAX_QBITS (a 4^q + 1 table).
 * pdep: -1 = where fast (sb_bp_fast_pdep), 0 = magic numbers, 1 = pdep if the CPU has BMI2. */
#define SB_BP_MAX_QBITS 12

sb_bp_index *sb_bp_morton_build(const float *px, const float *py, int64_t m, double cell, int pdep) {
    if (!(cell > 0) || m > INT32_MAX)
        return NULL;
    sb_bp_index *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    double bd[4];
    int64_t finite;
    point_bounds(px, py, m, bd, &finite);
    double ext = fmax(bd[1] - bd[0], bd[3] - bd[2]);
    if (!(ext > 0))
        ext = 1.0;
    int qbits = 1;
    while (qbits < SB_BP_MAX_QBITS && ext / (double)(1ll << qbits) > cell)
        qbits++;
    t->kind = KIND_MORTON;
    t->m = m;
    t->q = qbits;
    t->x0 = bd[0];
    t->y0 = bd[2];
    const int64_t side = 1ll << qbits;
    t->inv = (double)side / ext; /* the maximum lands on `side`, clamped to side - 1 */
    const int64_t cells = side * side;
    uint32_t *key = malloc((size_t)(m ? m : 1) * sizeof *key);
    t->start = calloc((size_t)cells + 2, sizeof *t->start);
    if (!key || !t->start) {
        free(key);
        sb_bp_index_free(t);
        return NULL;
    }
#if defined(SB_X86)
    const int use_pdep = pdep < 0 ? sb_bp_fast_pdep() : pdep && __builtin_cpu_supports("bmi2");
#else
    const int use_pdep = 0;
    (void)pdep;
#endif
    for (int64_t j = 0; j < m; j++) {
        const float x = px[j], y = py[j];
        if (!(finite32(x) && finite32(y))) {
            key[j] = UINT32_MAX;
            continue;
        }
        const uint32_t qx = (uint32_t)cell_of(x, t->x0, t->inv, side);
        const uint32_t qy = (uint32_t)cell_of(y, t->y0, t->inv, side);
#if defined(SB_X86)
        key[j] = use_pdep ? morton2_pdep(qx, qy) : morton2(qx, qy);
#else
        key[j] = morton2(qx, qy);
#endif
    }
    (void)use_pdep;
    const int failed = scatter(t, px, py, key, cells);
    free(key);
    if (failed) {
        sb_bp_index_free(t);
        return NULL;
    }
    return t;
}

/* seed 003's MSB: smear the bits right, count them (checked against 31 - clz in the tests) */
static inline int msb_smear(uint32_t v) {
    if (v == 0)
        return -1;
    v |= v >> 1;
    v |= v >> 2;
    v |= v >> 4;
    v |= v >> 8;
    v |= v >> 16;
    v = (v & 0x55555555u) + ((v >> 1) & 0x55555555u);
    v = (v & 0x33333333u) + ((v >> 2) & 0x33333333u);
    v = (v & 0x0f0f0f0fu) + ((v >> 4) & 0x0f0f0f0fu);
    v = (v & 0x00ff00ffu) + ((v >> 8) & 0x00ff00ffu);
    return (int)((v & 0x0000ffffu) + ((v >> 16) & 0x0000ffffu)) - 1;
}

/* Mismatches of the bit tricks against plain loops (magic numbers, pdep where the CPU has
 * BMI2, the smear MSB against clz) over `count` pseudo-random values: 0 when they agree. */
int64_t sb_bp_selftest_bits(int64_t count) {
    int64_t bad = 0;
    uint64_t st = 0x9E3779B97F4A7C15ull;
    for (int64_t t = 0; t < count; t++) {
        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        uint32_t v = (uint32_t)st >> (t & 31);
        if (t < 64)
            v = t < 32 ? (1u << t) : (1u << (t - 32)) - 1u;
        bad += msb_smear(v) != (v ? 31 - __builtin_clz(v) : -1);
        const uint32_t x = v & 0xFFFF, y = (uint32_t)(st >> 40) & 0xFFFF;
        uint32_t ref = 0;
        for (int bit = 0; bit < 16; bit++)
            ref |= ((x >> bit) & 1u) << (2 * bit) | ((y >> bit) & 1u) << (2 * bit + 1);
        bad += morton2(x, y) != ref;
#if defined(SB_X86)
        if (__builtin_cpu_supports("bmi2"))
            bad += morton2_pdep(x, y) != ref;
#endif
    }
    return bad;
}

/* ------------------------------------------------------------------------ queries */

typedef struct run_state {
    run_fn run;
    sb_bp_hits *out;
    float q[6];
} run_state;

static inline int emit_run(run_state *st, const sb_bp_index *t, int64_t a, int64_t b) {
    if (a >= b)
        return 0;
    if (hits_reserve(st->out, b - a))
        return -1;
    st->out->nhits += st->run(t->xs, t->ys, t->ids, a, b, st->q, st->out->indices + st->out->nhits);
    st->out->candidates += b - a;
    st->out->runs++;
    return 0;
}

static int grid_runs(run_state *st, const sb_bp_index *t, const double *b) {
    const int64_t nx = t->nx;
    const int64_t gx0 = cell_of(b[0], t->x0, t->inv, nx), gx1 = cell_of(b[1], t->x0, t->inv, nx);
    const int64_t gy0 = cell_of(b[2], t->y0, t->inv, t->ny), gy1 = cell_of(b[3], t->y0, t->inv, t->ny);
    for (int64_t gy = gy0; gy <= gy1; gy++) /* one row of cells: one contiguous run */
        if (emit_run(st, t, t->start[gy * nx + gx0], t->start[gy * nx + gx1 + 1]))
            return -1;
    return 0;
}

static int morton_runs(run_state *st, const sb_bp_index *t, const double *b) {
    const int64_t side = 1ll << t->q;
    const uint32_t qx0 = (uint32_t)cell_of(b[0], t->x0, t->inv, side), qx1 = (uint32_t)cell_of(b[1], t->x0, t->inv, side);
    const uint32_t qy0 = (uint32_t)cell_of(b[2], t->y0, t->inv, side), qy1 = (uint32_t)cell_of(b[3], t->y0, t->inv, side);
    const uint32_t w = (qx1 - qx0) > (qy1 - qy0) ? qx1 - qx0 : qy1 - qy0;
    /* the level whose cells are wider than the box: at most 2 cells per axis */
    const int lv = msb_smear(w) + 1;
    const uint32_t X0 = qx0 >> lv, X1 = qx1 >> lv, Y0 = qy0 >> lv, Y1 = qy1 >> lv;
    uint32_t z[4];
    int nz = 0;
    /* z(X0, Y0) is the least, z(X1, Y1) the greatest; the middle two need one compare-swap */
    z[nz++] = morton2(X0, Y0);
    if (X1 != X0)
        z[nz++] = morton2(X1, Y0);
    if (Y1 != Y0)
        z[nz++] = morton2(X0, Y1);
    if (X1 != X0 && Y1 != Y0) {
        if (z[1] > z[2]) {
            const uint32_t tmp = z[1];
            z[1] = z[2];
            z[2] = tmp;
        }
        z[nz++] = morton2(X1, Y1);
    }
    /* cell Z at level lv holds codes [Z << 2lv, (Z + 1) << 2lv); touching ranges merge */
    for (int c = 0; c < nz;) {
        const uint64_t lo = (uint64_t)z[c] << (2 * lv);
        uint32_t last = z[c];
        while (c + 1 < nz && z[c + 1] == last + 1)
            last = z[++c];
        c++;
        const uint64_t hi = ((uint64_t)last + 1) << (2 * lv);
        if (emit_run(st, t, t->start[lo], t->start[hi]))
            return -1;
    }
    return 0;
}

/* Hits of sectors [begin, end) (CSR over those sectors only).  isa: 0 = the best here,
 * 3 = AVX-512, 2 = AVX2, 1 = SSE2.  0 on success, -1 unsupported isa, -2 out of memory. */
int sb_bp_query(const sb_bp_index *t, const sb_bp_sectors *s, int64_t begin, int64_t end, int isa,
                sb_bp_hits *out) {
    run_state st = {.run = pick_run(isa), .out = out};
    if (!st.run)
        return -1;
    /* room for ~16 hits per sector to start with (it doubles as needed), at most 64 MiB */
    const int64_t start_cap = (end - begin) * 16;
    if (hits_init(out, end - begin, start_cap < (1 << 24) ? start_cap : (1 << 24)))
        return -2;
    scratch sc = {0};
    const int simd = sb_bp_isa_supported(3); /* the AVX-512 sort, else the bucket sort */
    int status = 0;
    for (int64_t i = begin; i < end; i++) {
        const int64_t first = out->nhits;
        double b[4];
        if (sector_box(s->cx[i], s->cy[i], s->ux[i], s->uy[i], s->r2[i], s->cos_theta[i], b)) {
            st.q[0] = s->cx[i], st.q[1] = s->cy[i], st.q[2] = s->ux[i];
            st.q[3] = s->uy[i], st.q[4] = s->r2[i], st.q[5] = s->cos_theta[i];
            if ((t->kind == KIND_GRID ? grid_runs(&st, t, b) : morton_runs(&st, t, b)) ||
                sort_hits(out->indices + first, out->nhits - first, &sc, simd)) {
                status = -2;
                break;
            }
        }
        out->offsets[i - begin + 1] = out->nhits;
    }
    free(sc.tmp);
    free(sc.cnt);
    if (status)
        sb_bp_hits_free(out);
    return status;
}

/* Brute force with the same narrow phase and output: every sector against all M points. */
int sb_bp_none(const float *px, const float *py, int64_t m, const sb_bp_sectors *s, int64_t begin, int64_t end,
               int isa, sb_bp_hits *out) {
    run_fn run = pick_run(isa);
    if (!run)
        return -1;
    if (hits_init(out, end - begin, 1 << 16))
        return -2;
    for (int64_t i = begin; i < end; i++) {
        const float q[6] = {s->cx[i], s->cy[i], s->ux[i], s->uy[i], s->r2[i], s->cos_theta[i]};
        if (hits_reserve(out, m)) {
            sb_bp_hits_free(out);
            return -2;
        }
        out->nhits += run(px, py, NULL, 0, m, q, out->indices + out->nhits);
        out->candidates += m;
        out->runs++;
        out->offsets[i - begin + 1] = out->nhits;
    }
    return 0;
}
