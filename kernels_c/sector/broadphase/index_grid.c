/* The uniform grid (see bp_internal.h): points counting-sorted into cells in row-major order;
 * a box's cells on one row are one contiguous run of points.  The cell size is the caller's
 * (the Python side derives it from the radii, families/sector/broadphase.py), raised to about
 * one point per cell, below which cells only add runs. */
#include "bp_internal.h"

/* At most 2^24 cells: the cell grows (doubling) when the points' extent demands it. */
#define SB_BP_MAX_CELLS (1 << 24)

#if defined(SB_X86)
/* bp_cell_of on 4 values at once, the same operations in the same order (double subtraction,
 * product, the two clamps, truncation), so the cells are bit for bit the scalar function's. */
SB_AVX2_ATTR static inline __m128i cells4(__m128 v, __m256d o, __m256d inv, __m256d last) {
    const __m256d t = _mm256_mul_pd(_mm256_sub_pd(_mm256_cvtps_pd(v), o), inv);
    const __m256d low = _mm256_cmp_pd(t, _mm256_setzero_pd(), _CMP_GE_OQ); /* false for NaN too */
    const __m256d high = _mm256_cmp_pd(t, last, _CMP_GE_OQ);
    const __m256d clamped = _mm256_blendv_pd(_mm256_and_pd(t, low), last, high);
    return _mm256_cvttpd_epi32(clamped);
}

SB_AVX2_ATTR static void grid_keys_avx2(const sb_bp_index *t, const float *px, const float *py, int64_t a,
                                        int64_t e, uint32_t *key) {
    const __m256d x0 = _mm256_set1_pd(t->x0), y0 = _mm256_set1_pd(t->y0), inv = _mm256_set1_pd(t->inv);
    const __m256d xlast = _mm256_set1_pd((double)(t->nx - 1)), ylast = _mm256_set1_pd((double)(t->ny - 1));
    const __m128i nx = _mm_set1_epi32((int)t->nx), exponent = _mm_set1_epi32(0x7f800000);
    for (int64_t j = a; j < e; j += 4) {
        const __m128 x = _mm_loadu_ps(px + j), y = _mm_loadu_ps(py + j);
        const __m128i gx = cells4(x, x0, inv, xlast), gy = cells4(y, y0, inv, ylast);
        const __m128i bad = _mm_or_si128(_mm_cmpeq_epi32(_mm_and_si128(_mm_castps_si128(x), exponent), exponent),
                                         _mm_cmpeq_epi32(_mm_and_si128(_mm_castps_si128(y), exponent), exponent));
        _mm_storeu_si128((__m128i *)(key + j), _mm_or_si128(_mm_add_epi32(_mm_mullo_epi32(gy, nx), gx), bad));
    }
}
#endif

static void grid_keys(const sb_bp_index *t, const float *px, const float *py, int64_t a, int64_t e, uint32_t *key) {
#if defined(SB_X86)
    if (__builtin_cpu_supports("avx2")) {
        const int64_t whole = a + (e - a) / 4 * 4;
        grid_keys_avx2(t, px, py, a, whole, key);
        a = whole;
    }
#endif
    for (int64_t j = a; j < e; j++) {
        const float x = px[j], y = py[j];
        key[j] = bp_finite32(x) && bp_finite32(y)
                     ? (uint32_t)(bp_cell_of(y, t->y0, t->inv, t->ny) * t->nx + bp_cell_of(x, t->x0, t->inv, t->nx))
                     : UINT32_MAX; /* never inside: the kernel rejects it */
    }
}

sb_bp_index *sb_bp_grid_build(const float *px, const float *py, int64_t m, double cell, int threads) {
    if (!(cell > 0) || m > INT32_MAX)
        return NULL;
    threads = threads < 1 ? 1 : threads > BP_MAX_PARTS ? BP_MAX_PARTS : threads;
    sb_bp_index *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    double bd[4];
    int64_t finite;
    bp_point_bounds(px, py, m, threads, bd, &finite);
    t->kind = BP_KIND_GRID;
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
    t->cells = t->nx * t->ny;
    if (bp_index_sort(t, px, py, grid_keys, threads)) {
        sb_bp_index_free(t);
        return NULL;
    }
    return t;
}

void bp_grid_box_cells(const sb_bp_index *t, const double *b, int64_t *g) {
    g[0] = bp_cell_of(b[0], t->x0, t->inv, t->nx);
    g[1] = bp_cell_of(b[1], t->x0, t->inv, t->nx);
    g[2] = bp_cell_of(b[2], t->y0, t->inv, t->ny);
    g[3] = bp_cell_of(b[3], t->y0, t->inv, t->ny);
}
