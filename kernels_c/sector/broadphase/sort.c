/* One sector's hits into ascending order (see bp_internal.h for the broadphase's files). */
#include "bp_internal.h"

/* One sector's hits arrive as a concatenation of ascending runs (one per cell).  Sorted by an
 * interpolation bucket pass (bucket = (x - min) B / (max - min + 1), monotone), then each
 * bucket by insertion, or by qsort when it is large: O(n) expected, O(n log n) worst. */
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

static int sort_hits_portable(int32_t *v, int64_t n, bp_scratch *sc) {
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
/* The SIMD sorts: a bitonic network in registers for a few hundred ids (AVX-512: up to 16 zmm,
 * 256 ids; AVX2: up to 16 ymm, 128), above that an out-of-place compress partition around the
 * middle of the ids' range (mid_pivot: each level halves the range, so at most 31 levels).
 *
 * The network is the bitonic sort's "flip" form: each merge stage first compares place i with
 * its mirror in the block (i ^ (k - 1)), then half-cleans at distances k/4 .. 1, and every
 * compare-exchange puts the min at the lower place.  So the INT32_MAX padding above the last id
 * never moves and every exchange with it is a no-op: registers wholly of padding are left out,
 * and 130 ids take 9 registers, not 16 (the classic form, sorting half-blocks alternately up and
 * down, needs the whole power of two).  The hit lists of game 10 000 x 1 000 000 (2.3 M ids,
 * sorted alone in a throwaway program, 15 alternated runs) took 4.12 ms against 4.50 padded to
 * a power of two. */

/* The partitions' pivot: the middle of the ids' range [lo, hi] (lo < hi), so the min goes
 * below it and the max above, and each side's range is half the parent's.  A sector's ids are
 * spread evenly over their range (the points' ids are random in space), so the sides come out
 * near half the list each.  The game's 2.3 M hit lists sorted alone (a throwaway program,
 * medians of 6 alternations): AVX-512 3.74 ms, AVX2 7.07, against 4.05 and 8.99 with a median
 * of 3, whose random splits often left a side over the network's size for another partition. */
static inline int32_t mid_pivot(int32_t lo, int32_t hi) { return (int32_t)(lo + ((int64_t)hi - lo + 1) / 2); }

/* Lanes l with (l & j) != 0 */
static inline uint16_t lane_bits(int j) {
    return j == 1 ? 0xAAAA : j == 2 ? 0xCCCC : j == 4 ? 0xF0F0 : 0xFF00;
}

/* The network over registers v[0 .. R) of 1 << LOG lanes each, written out stage by stage with
 * constant indices (loops over the stages and registers, even marked for unrolling, were left
 * partly rolled by gcc -O2 with v[] on the stack: 355 stack accesses in the 256-id network).
 * LANE(v, p, h) compares lane l with lane l ^ p, keeping the max in the lanes of bit h; REV(v)
 * reverses the lanes; MIN, MAX are lane-wise.  Every guard is a constant once R is, so v[] lives
 * in registers and the stages past R registers fold away. */
#define FL_LANES(LOG) (1 << (LOG))
#define FL_LOG_OF(LOG, ...) (LOG)
/* Within each register, stage k <= lanes: the mirror step */
#define FL_FLIP_INTRA(r, k, LOG, LANE, REV, MIN, MAX)                                               \
    if ((r) < R)                                                                                    \
    v[r] = LANE(v[r], (k) - 1, (k) / 2)
/* Within each register: the half-cleaner at distance j of stage k */
#define FL_HALF_INTRA(r, j, k, LOG, LANE, REV, MIN, MAX)                                            \
    if ((r) < R && (j) < FL_LANES(LOG) && (j) < (k) / 2)                                            \
    v[r] = LANE(v[r], j, j)
/* Across registers, stage of kr registers a block: the mirror step (the partner's lanes reversed) */
#define FL_FLIP_INTER(r, kr, LOG, LANE, REV, MIN, MAX)                                              \
    if ((r) < R && !((r) & ((kr) / 2)) && ((r) ^ ((kr) - 1)) < R) {                                 \
        const __typeof__(v[0]) w_ = REV(v[(r) ^ ((kr) - 1)]), mx_ = MAX(v[r], w_);                  \
        v[r] = MIN(v[r], w_);                                                                       \
        v[(r) ^ ((kr) - 1)] = REV(mx_);                                                             \
    }
/* Across registers: the half-cleaner at distance jr registers */
#define FL_HALF_INTER(r, jr, kr, LOG, LANE, REV, MIN, MAX)                                          \
    if ((r) < R && !((r) & (jr)) && ((r) | (jr)) < R && (jr) < (kr) / 2) {                          \
        const __typeof__(v[0]) mn_ = MIN(v[r], v[(r) | (jr)]);                                      \
        v[(r) | (jr)] = MAX(v[r], v[(r) | (jr)]);                                                   \
        v[r] = mn_;                                                                                 \
    }
#define FL_ALL(OP, ...)                                                                              \
    OP(0, __VA_ARGS__); OP(1, __VA_ARGS__); OP(2, __VA_ARGS__); OP(3, __VA_ARGS__);                 \
    OP(4, __VA_ARGS__); OP(5, __VA_ARGS__); OP(6, __VA_ARGS__); OP(7, __VA_ARGS__);                 \
    OP(8, __VA_ARGS__); OP(9, __VA_ARGS__); OP(10, __VA_ARGS__); OP(11, __VA_ARGS__);               \
    OP(12, __VA_ARGS__); OP(13, __VA_ARGS__); OP(14, __VA_ARGS__); OP(15, __VA_ARGS__)
/* Stage k within registers (k <= lanes); skipped when the block's upper half is all padding */
#define FL_STAGE_IN(k, ...)                                                                          \
    if ((k) <= FL_LANES(FL_LOG_OF(__VA_ARGS__)) && (k) / 2 < R << FL_LOG_OF(__VA_ARGS__)) {         \
        FL_ALL(FL_FLIP_INTRA, k, __VA_ARGS__);                                                      \
        FL_ALL(FL_HALF_INTRA, 4, k, __VA_ARGS__);                                                   \
        FL_ALL(FL_HALF_INTRA, 2, k, __VA_ARGS__);                                                   \
        FL_ALL(FL_HALF_INTRA, 1, k, __VA_ARGS__);                                                   \
    }
/* Stage of kr registers a block: across registers, then within each (at every distance: the
 * 32 stands for any stage wider than a register) */
#define FL_STAGE_X(kr, ...)                                                                          \
    if ((kr) / 2 < R) {                                                                             \
        FL_ALL(FL_FLIP_INTER, kr, __VA_ARGS__);                                                     \
        FL_ALL(FL_HALF_INTER, 4, kr, __VA_ARGS__);                                                  \
        FL_ALL(FL_HALF_INTER, 2, kr, __VA_ARGS__);                                                  \
        FL_ALL(FL_HALF_INTER, 1, kr, __VA_ARGS__);                                                  \
        FL_ALL(FL_HALF_INTRA, 8, 32, __VA_ARGS__);                                                  \
        FL_ALL(FL_HALF_INTRA, 4, 32, __VA_ARGS__);                                                  \
        FL_ALL(FL_HALF_INTRA, 2, 32, __VA_ARGS__);                                                  \
        FL_ALL(FL_HALF_INTRA, 1, 32, __VA_ARGS__);                                                  \
    }
/* The whole network (up to 16 registers); LOG, LANE, REV, MIN, MAX as above. */
#define FL_NETWORK(...)                                                                              \
    FL_STAGE_IN(2, __VA_ARGS__);                                                                    \
    FL_STAGE_IN(4, __VA_ARGS__);                                                                    \
    FL_STAGE_IN(8, __VA_ARGS__);                                                                    \
    FL_STAGE_IN(16, __VA_ARGS__);                                                                   \
    FL_STAGE_X(2, __VA_ARGS__);                                                                     \
    FL_STAGE_X(4, __VA_ARGS__);                                                                     \
    FL_STAGE_X(8, __VA_ARGS__);                                                                     \
    FL_STAGE_X(16, __VA_ARGS__)

/* The register counts the networks are built for: a list of n ids takes the first count that
 * holds it.  Each count is one unrolled function (2-10 KB); every count from 1 to 16 sorted the
 * game lists in 3.94 ms against these nine's 4.08, for twice the code and compile time. */
#define FL_COUNTS16(OP, ...)                                                                         \
    OP(1, __VA_ARGS__) OP(2, __VA_ARGS__) OP(3, __VA_ARGS__) OP(4, __VA_ARGS__) OP(6, __VA_ARGS__)     \
    OP(8, __VA_ARGS__) OP(10, __VA_ARGS__) OP(12, __VA_ARGS__) OP(16, __VA_ARGS__)
/* The ids the largest count holds: longer lists are partitioned first */
#define FL_MOST16 (16 * 16)

/* NAME_sort(from, to, n): n ids (1 <= n <= the largest count's) from `from` sorted into `to`
 * (the same place or apart) through NAME_RR, the network of the fewest registers that hold
 * them, RR from COUNTS. */
#define FL_PICK(RR, NAME)                                                                            \
    if (regs <= RR) {                                                                                \
        NAME##_##RR(from, to, n);                                                                    \
        return;                                                                                      \
    }
#define FL_SORT(ATTR, NAME, LANES, COUNTS)                                                           \
    ATTR static void NAME##_sort(const int32_t *from, int32_t *to, int64_t n) {                      \
        const int64_t regs = (n + (LANES) - 1) / (LANES);                                            \
        COUNTS(FL_PICK, NAME)                                                                        \
    }

SB_AVX512_ATTR static inline __m512i lane_perm16(__m512i v, int p) {
    __m512i idx;
    switch (p) {
    case 1: idx = _mm512_setr_epi32(1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14); break;
    case 2: idx = _mm512_setr_epi32(2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13); break;
    case 3: idx = _mm512_setr_epi32(3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12); break;
    case 4: idx = _mm512_setr_epi32(4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11); break;
    case 7: idx = _mm512_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8); break;
    case 8: idx = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7); break;
    default: idx = _mm512_setr_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0); break;
    }
    return _mm512_permutexvar_epi32(idx, v);
}

SB_AVX512_ATTR static inline __m512i lane_step16(__m512i v, int p, int h) {
    const __m512i w = lane_perm16(v, p);
    return _mm512_mask_blend_epi32(lane_bits(h), _mm512_min_epi32(v, w), _mm512_max_epi32(v, w));
}

SB_AVX512_ATTR static inline __m512i reverse16(__m512i v) { return lane_perm16(v, 15); }

SB_AVX512_ATTR static inline __attribute__((always_inline)) void network16(__m512i *v, const int R) {
    FL_NETWORK(4, lane_step16, reverse16, _mm512_min_epi32, _mm512_max_epi32);
}

#define NETWORK16_CASE(RR, _)                                                                        \
    SB_AVX512_ATTR static void network16_##RR(const int32_t *from, int32_t *to, int64_t n) {         \
        __m512i v[RR];                                                                               \
        const __m512i big = _mm512_set1_epi32(INT32_MAX);                                            \
        for (int r = 0; r < RR; r++) {                                                               \
            const int64_t left = n - 16 * r;                                                         \
            const __mmask16 m = left >= 16 ? 0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1u); \
            v[r] = _mm512_mask_loadu_epi32(big, m, from + 16 * r);                                   \
        }                                                                                            \
        network16(v, RR);                                                                            \
        for (int r = 0; r < RR; r++) {                                                               \
            const int64_t left = n - 16 * r;                                                         \
            const __mmask16 m = left >= 16 ? 0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1u); \
            _mm512_mask_storeu_epi32(to + 16 * r, m, v[r]);                                          \
        }                                                                                            \
    }
FL_COUNTS16(NETWORK16_CASE, _)
FL_SORT(SB_AVX512_ATTR, network16, 16, FL_COUNTS16)


SB_AVX512_ATTR static int simd_sort_in(const int32_t *from, int32_t *to, int64_t n, bp_scratch *sc, int32_t lo,
                                       int32_t hi) {
    while (n > FL_MOST16) {
        if (lo >= hi) { /* only with equal ids, which one sector's hits never are */
            if (from != to)
                memcpy(to, from, (size_t)n * sizeof *to);
            qsort(to, (size_t)n, sizeof *to, cmp_i32);
            return 0;
        }
        const int32_t p = mid_pivot(lo, hi);
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
        int32_t *low_side = sc->tmp, *high_side = sc->tmp + n + 32;
        int64_t nl = 0, nh = 0;
        for (int64_t i = 0; i < n; i += 16) {
            const __mmask16 live = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
            const __m512i x = _mm512_maskz_loadu_epi32(live, from + i);
            const __mmask16 m = _mm512_mask_cmplt_epi32_mask(live, x, pv);
            const __mmask16 mh = live & (__mmask16)~m;
            _mm512_storeu_si512(low_side + nl, _mm512_maskz_compress_epi32(m, x));
            _mm512_storeu_si512(high_side + nh, _mm512_maskz_compress_epi32(mh, x));
            nl += __builtin_popcount(m);
            nh += __builtin_popcount(mh);
        }
        memcpy(to, low_side, (size_t)nl * sizeof *to);
        memcpy(to + nl, high_side, (size_t)nh * sizeof *to);
        /* both sides are in `to` now: the rest sorts in place */
        if (nl < nh) {
            if (simd_sort_in(to, to, nl, sc, lo, p - 1))
                return -1;
            to += nl;
            n = nh;
            lo = p;
        } else {
            if (simd_sort_in(to + nl, to + nl, nh, sc, p, hi))
                return -1;
            n = nl;
            hi = p - 1;
        }
        from = to;
    }
    if (n > 0)
        network16_sort(from, to, n);
    return 0;
}

SB_AVX512_ATTR static int simd_sort(const int32_t *from, int32_t *to, int64_t n, bp_scratch *sc) {
    if (n <= FL_MOST16) {
        if (n > 0)
            network16_sort(from, to, n);
        return 0;
    }
    __m512i lo = _mm512_set1_epi32(INT32_MAX), hi = _mm512_set1_epi32(INT32_MIN);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 live = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
        lo = _mm512_mask_min_epi32(lo, live, lo, _mm512_maskz_loadu_epi32(live, from + i));
        hi = _mm512_mask_max_epi32(hi, live, hi, _mm512_maskz_loadu_epi32(live, from + i));
    }
    return simd_sort_in(from, to, n, sc, _mm512_reduce_min_epi32(lo), _mm512_reduce_max_epi32(hi));
}

#endif

#if defined(SB_X86)
/* The AVX2 sort: the AVX-512 one's shape on 8 lanes.  The network over 1..16 ymm registers for
 * n <= 128 (sixteen of AVX2's sixteen registers spill a few, and still beat a partition level:
 * the game lists took 10.0 ms against 11.3 with networks up to 64 ids, minima of 15 runs),
 * above that an out-of-place partition around mid_pivot, each vector's two sides stored
 * with AVX2's compress (a permutation from bp_compress_lanes). */
SB_AVX2_ATTR static inline __m256i lanes_of(unsigned bits) {
    const __m256i lane = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)bits), lane), lane);
}

/* lane l against lane l ^ p (p = 1, 2, 3, 4 or 7), the max kept in the lanes of bit h */
SB_AVX2_ATTR static inline __m256i lane_step8(__m256i v, int p, int h) {
    const __m256i w = p == 1   ? _mm256_shuffle_epi32(v, 0xB1)
                      : p == 2 ? _mm256_shuffle_epi32(v, 0x4E)
                      : p == 3 ? _mm256_shuffle_epi32(v, 0x1B)
                      : p == 4 ? _mm256_permute2x128_si256(v, v, 1)
                               : _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0));
    return _mm256_blendv_epi8(_mm256_min_epi32(v, w), _mm256_max_epi32(v, w), lanes_of(lane_bits(h) & 0xFFu));
}

SB_AVX2_ATTR static inline __m256i reverse8(__m256i v) {
    return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0));
}

SB_AVX2_ATTR static inline __attribute__((always_inline)) void network8(__m256i *v, const int R) {
    FL_NETWORK(3, lane_step8, reverse8, _mm256_min_epi32, _mm256_max_epi32);
}
#undef FL_NETWORK
#undef FL_STAGE_X
#undef FL_STAGE_IN
#undef FL_ALL
#undef FL_HALF_INTER
#undef FL_FLIP_INTER
#undef FL_HALF_INTRA
#undef FL_FLIP_INTRA
#undef FL_LOG_OF
#undef FL_LANES

SB_AVX2_ATTR static inline __m256i live8(int64_t left) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(left >= 8 ? 8 : left <= 0 ? 0 : (int)left),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The ymm register counts and the ids of the largest, as FL_COUNTS16 and FL_MOST16 */
#define FL_COUNTS8(OP, ...)                                                                          \
    OP(1, __VA_ARGS__) OP(2, __VA_ARGS__) OP(3, __VA_ARGS__) OP(4, __VA_ARGS__) OP(6, __VA_ARGS__)     \
    OP(8, __VA_ARGS__) OP(12, __VA_ARGS__) OP(16, __VA_ARGS__)
#define FL_MOST8 (16 * 8)

#define NETWORK8_CASE(RR, _)                                                                         \
    SB_AVX2_ATTR static void network8_##RR(const int32_t *from, int32_t *to, int64_t n) {            \
        __m256i v[RR];                                                                               \
        const __m256i big = _mm256_set1_epi32(INT32_MAX);                                            \
        for (int r = 0; r < RR; r++) {                                                               \
            const __m256i live = live8(n - 8 * r);                                                   \
            v[r] = _mm256_blendv_epi8(big, _mm256_maskload_epi32(from + 8 * r, live), live);         \
        }                                                                                            \
        network8(v, RR);                                                                             \
        for (int r = 0; r < RR; r++)                                                                 \
            _mm256_maskstore_epi32(to + 8 * r, live8(n - 8 * r), v[r]);                              \
    }
FL_COUNTS8(NETWORK8_CASE, _)
FL_SORT(SB_AVX2_ATTR, network8, 8, FL_COUNTS8)


SB_AVX2_ATTR static int avx2_sort_in(const int32_t *from, int32_t *to, int64_t n, bp_scratch *sc, int32_t lo,
                                     int32_t hi) {
    const __m256i spread = _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21);
    while (n > FL_MOST8) {
        if (lo >= hi) { /* only with equal ids, which one sector's hits never are */
            if (from != to)
                memcpy(to, from, (size_t)n * sizeof *to);
            qsort(to, (size_t)n, sizeof *to, cmp_i32);
            return 0;
        }
        const int32_t p = mid_pivot(lo, hi);
        const __m256i pv = _mm256_set1_epi32(p);
        if (sc->cap < 2 * n + 32) {
            free(sc->tmp);
            sc->cap = 4 * n + 128;
            sc->tmp = malloc((size_t)sc->cap * sizeof *sc->tmp);
            if (!sc->tmp) {
                sc->cap = 0;
                return -1;
            }
        }
        int32_t *low_side = sc->tmp, *high_side = sc->tmp + n + 16;
        int64_t nl = 0, nh = 0;
        for (int64_t i = 0; i < n; i += 8) {
            const int64_t left = n - i;
            const unsigned live = left >= 8 ? 0xFFu : (1u << left) - 1u;
            const __m256i x = _mm256_maskload_epi32(from + i, live8(left));
            const unsigned below = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(pv, x))) & live;
            const unsigned above = live & ~below;
            const __m256i pl = _mm256_srlv_epi32(_mm256_set1_epi32((int)bp_compress_lanes[below]), spread);
            const __m256i ph = _mm256_srlv_epi32(_mm256_set1_epi32((int)bp_compress_lanes[above]), spread);
            _mm256_storeu_si256((__m256i *)(low_side + nl), _mm256_permutevar8x32_epi32(x, pl));
            _mm256_storeu_si256((__m256i *)(high_side + nh), _mm256_permutevar8x32_epi32(x, ph));
            nl += SB_POPCOUNT8(below);
            nh += SB_POPCOUNT8(above);
        }
        memcpy(to, low_side, (size_t)nl * sizeof *to);
        memcpy(to + nl, high_side, (size_t)nh * sizeof *to);
        /* both sides are in `to` now: the rest sorts in place */
        if (nl < nh) {
            if (avx2_sort_in(to, to, nl, sc, lo, p - 1))
                return -1;
            to += nl;
            n = nh;
            lo = p;
        } else {
            if (avx2_sort_in(to + nl, to + nl, nh, sc, p, hi))
                return -1;
            n = nl;
            hi = p - 1;
        }
        from = to;
    }
    if (n > 0)
        network8_sort(from, to, n);
    return 0;
}

SB_AVX2_ATTR static int avx2_sort(const int32_t *from, int32_t *to, int64_t n, bp_scratch *sc) {
    if (n <= FL_MOST8) {
        if (n > 0)
            network8_sort(from, to, n);
        return 0;
    }
    __m256i lo = _mm256_set1_epi32(INT32_MAX), hi = _mm256_set1_epi32(INT32_MIN);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i x = _mm256_loadu_si256((const __m256i *)(from + i));
        lo = _mm256_min_epi32(lo, x);
        hi = _mm256_max_epi32(hi, x);
    }
    int32_t lanes_lo[8], lanes_hi[8];
    _mm256_storeu_si256((__m256i *)lanes_lo, lo);
    _mm256_storeu_si256((__m256i *)lanes_hi, hi);
    int32_t least = INT32_MAX, most = INT32_MIN;
    for (int l = 0; l < 8; l++) {
        least = lanes_lo[l] < least ? lanes_lo[l] : least;
        most = lanes_hi[l] > most ? lanes_hi[l] : most;
    }
    for (; i < n; i++) {
        least = from[i] < least ? from[i] : least;
        most = from[i] > most ? from[i] : most;
    }
    return avx2_sort_in(from, to, n, sc, least, most);
}
#endif

int bp_sort_hits(const int32_t *from, int32_t *to, int64_t n, bp_scratch *sc, int simd) {
#if defined(SB_X86)
    if (simd == 3)
        return simd_sort(from, to, n, sc);
    if (simd == 2)
        return avx2_sort(from, to, n, sc);
#endif
    (void)simd;
    if (from != to)
        memcpy(to, from, (size_t)n * sizeof *to);
    return sort_hits_portable(to, n, sc);
}

void bp_scratch_free(bp_scratch *sc) {
    free(sc->tmp);
    free(sc->cnt);
    sc->tmp = sc->cnt = NULL;
    sc->cap = 0;
}

/* The self-test's ids, distinct for distinct i and below INT32_MAX (the padding).  Spread:
 * i K + seed mod the prime 2^31 - 1.  Clustered: odd i near 2^30, even i near 0, each cluster
 * dense (i / 2 permuted within blocks of the prime 65 521), so the ids are far from evenly
 * spread over their range (the partitions' pivot is the range's middle). */
static int32_t spread_id(uint64_t i, uint64_t seed) { return (int32_t)((i * 2654435761u + seed) % 2147483647u); }

static int32_t clustered_id(uint64_t i) {
    const uint64_t j = i >> 1;
    return (int32_t)((i & 1) << 30 | (j * 7919u % 65521u + j / 65521u * 65521u));
}

/* Sorts n distinct pseudo-random ids with the `simd` sort (3 AVX-512, 2 AVX2, 0 portable; the
 * ids arrive as ascending runs of random lengths, as one sector's hits do) twice, into a buffer
 * apart (as the query's join does; the ids sorted from must be left as they were) and in place,
 * and checks each result against an insertion sort of the same ids: 0 when all agree, 1 when
 * not, -1 when the CPU lacks that sort or memory ran out.  For the tests: a query uses the best
 * sort its CPU has, so only this reaches the others. */
int sb_bp_selftest_sort(int simd, int64_t n, uint64_t seed) {
    if ((simd == 3 && !sb_bp_isa_supported(3)) || (simd == 2 && !sb_bp_isa_supported(2)) || n < 0)
        return -1;
    if (simd == 2)
        bp_compress_init();
    const size_t bytes = (size_t)(n + 16) * sizeof(int32_t);
    int32_t *v = malloc(bytes), *kept = malloc(bytes), *apart = malloc(bytes), *ref = malloc(bytes);
    int status = v && kept && apart && ref ? 0 : -1;
    for (int64_t i = 0; i < n && !status; i++)
        v[i] = seed ? spread_id((uint64_t)i, seed) : clustered_id((uint64_t)i);
    for (int64_t i = 0, run = 1; i < n && !status; i += run, run = 1 + (v[i - 1] >> 3) % 24)
        isort(v + i, i + run <= n ? run : n - i);
    if (!status) {
        const size_t used = (size_t)n * sizeof *v;
        memcpy(ref, v, used);
        isort(ref, n);
        memcpy(kept, v, used);
        bp_scratch sc = {0};
        if (bp_sort_hits(v, apart, n, &sc, simd))
            status = -1;
        else
            status = memcmp(apart, ref, used) != 0 || memcmp(v, kept, used) != 0;
        if (!status && bp_sort_hits(kept, kept, n, &sc, simd))
            status = -1;
        else if (!status)
            status = memcmp(kept, ref, used) != 0;
        bp_scratch_free(&sc);
    }
    free(v);
    free(kept);
    free(apart);
    free(ref);
    return status;
}
