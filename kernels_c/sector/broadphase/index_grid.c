/* The uniform grid (see bp_internal.h): points counting-sorted into cells in row-major order;
 * a box's cells on one row are one contiguous run of points.  A cell has the area of the
 * caller's square (the Python side derives its side from the radii,
 * families/sector/broadphase.py), raised to about one point per cell, below which cells only
 * add runs; its shape is BP_CELL_STRETCH's. */
#include "bp_internal.h"

/* At most 2^24 cells: the cell grows (doubling) when the points' extent demands it. */
#define SB_BP_MAX_CELLS (1 << 24)
/* A cell is this many times narrower than the caller's side and as many times taller (the same
 * area, so the same points a cell): a box's run of points is one per row, and each run costs
 * more than its points (a new place in memory, ~80 ns a run on the VM this was tuned on), so
 * fewer, longer runs win although the narrower columns and taller rows of a box take in more
 * candidates.  Game 10 000 x 1 000 000: 25 051 runs of 6.15 M candidates against 40 206 of
 * 5.70 M with square cells, query 8.09 ms against 8.51 on one thread, 4.14 against 4.30 on two
 * (tools/broadphase_phases.c, medians of 8 alternations); stretches of 1.5, 2.5 and 3 were
 * within 0.1-0.3 ms of 2, and it did as well or better on a clustered scene and on game
 * 2 000 x 200 000 and 50 000 x 1 000 000. */
#define BP_CELL_STRETCH 2.0

#if defined(SB_X86)
/* bp_cell_of on 16 values at once, the same operations in the same order (subtraction,
 * product, the two clamps, truncation), so the cells are bit for bit the scalar function's. */
SB_AVX512_ATTR static inline __m512i cells16(__m512 v, __m512 o, __m512 inv, __m512 last) {
    const __m512 t = _mm512_mul_ps(_mm512_sub_ps(v, o), inv);
    const __mmask16 low = _mm512_cmp_ps_mask(t, _mm512_setzero_ps(), _CMP_GE_OQ); /* false for NaN too */
    const __mmask16 high = _mm512_cmp_ps_mask(t, last, _CMP_GE_OQ);
    return _mm512_cvttps_epi32(_mm512_mask_blend_ps(high, _mm512_maskz_mov_ps(low, t), last));
}

SB_AVX512_ATTR static int64_t grid_keys_avx512(const sb_bp_index *t, const float *px, const float *py, int64_t a,
                                               int64_t e, uint32_t *key) {
    const __m512 x0 = _mm512_set1_ps(t->x0), y0 = _mm512_set1_ps(t->y0);
    const __m512 inv_x = _mm512_set1_ps(t->inv_x), inv_y = _mm512_set1_ps(t->inv_y);
    const __m512 xlast = _mm512_set1_ps((float)(t->nx - 1)), ylast = _mm512_set1_ps((float)(t->ny - 1));
    const __m512i nx = _mm512_set1_epi32((int)t->nx), exponent = _mm512_set1_epi32(0x7f800000);
    int64_t j = a;
    for (; j + 16 <= e; j += 16) {
        const __m512 x = _mm512_loadu_ps(px + j), y = _mm512_loadu_ps(py + j);
        const __m512i gx = cells16(x, x0, inv_x, xlast), gy = cells16(y, y0, inv_y, ylast);
        const __mmask16 bad = _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(x), exponent), exponent) |
                              _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(y), exponent), exponent);
        const __m512i cell = _mm512_add_epi32(_mm512_mullo_epi32(gy, nx), gx);
        _mm512_storeu_si512((void *)(key + j), _mm512_mask_blend_epi32(bad, cell, _mm512_set1_epi32(-1)));
    }
    return j;
}

/* The same on 8 values, for CPUs with AVX2 only. */
SB_AVX2_ATTR static inline __m256i cells8(__m256 v, __m256 o, __m256 inv, __m256 last) {
    const __m256 t = _mm256_mul_ps(_mm256_sub_ps(v, o), inv);
    const __m256 low = _mm256_cmp_ps(t, _mm256_setzero_ps(), _CMP_GE_OQ); /* false for NaN too */
    const __m256 high = _mm256_cmp_ps(t, last, _CMP_GE_OQ);
    return _mm256_cvttps_epi32(_mm256_blendv_ps(_mm256_and_ps(t, low), last, high));
}

SB_AVX2_ATTR static int64_t grid_keys_avx2(const sb_bp_index *t, const float *px, const float *py, int64_t a,
                                           int64_t e, uint32_t *key) {
    const __m256 x0 = _mm256_set1_ps(t->x0), y0 = _mm256_set1_ps(t->y0);
    const __m256 inv_x = _mm256_set1_ps(t->inv_x), inv_y = _mm256_set1_ps(t->inv_y);
    const __m256 xlast = _mm256_set1_ps((float)(t->nx - 1)), ylast = _mm256_set1_ps((float)(t->ny - 1));
    const __m256i nx = _mm256_set1_epi32((int)t->nx), exponent = _mm256_set1_epi32(0x7f800000);
    int64_t j = a;
    for (; j + 8 <= e; j += 8) {
        const __m256 x = _mm256_loadu_ps(px + j), y = _mm256_loadu_ps(py + j);
        const __m256i gx = cells8(x, x0, inv_x, xlast), gy = cells8(y, y0, inv_y, ylast);
        const __m256i bad = _mm256_or_si256(
            _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(x), exponent), exponent),
            _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(y), exponent), exponent));
        _mm256_storeu_si256((__m256i *)(key + j), _mm256_or_si256(_mm256_add_epi32(_mm256_mullo_epi32(gy, nx), gx), bad));
    }
    return j;
}
#endif

static void scalar_keys(const sb_bp_index *t, const float *px, const float *py, int64_t a, int64_t e,
                        uint32_t *key) {
    for (int64_t j = a; j < e; j++) {
        const float x = px[j], y = py[j];
        key[j] = bp_finite32(x) && bp_finite32(y) ? (uint32_t)(bp_cell_of(y, t->y0, t->inv_y, t->ny) * t->nx +
                                                               bp_cell_of(x, t->x0, t->inv_x, t->nx))
                                                  : UINT32_MAX; /* never inside: the kernel rejects it */
    }
}

static void grid_keys(const sb_bp_index *t, const float *px, const float *py, int64_t a, int64_t e, uint32_t *key) {
#if defined(SB_X86)
    if (sb_bp_isa_supported(3))
        a = grid_keys_avx512(t, px, py, a, e, key);
    else if (sb_bp_isa_supported(2))
        a = grid_keys_avx2(t, px, py, a, e, key);
#endif
    scalar_keys(t, px, py, a, e, key);
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
    bp_hold(threads, 1);
    bp_point_bounds(px, py, m, threads, bd, &finite);
    t->kind = BP_KIND_GRID;
    t->m = m;
    t->x0 = (float)bd[0]; /* exact: the bounds are float32 values */
    t->y0 = (float)bd[2];
    const double w = bd[1] - bd[0], h = bd[3] - bd[2];
    if (finite > 0 && sqrt(w * h / (double)finite) > cell)
        cell = sqrt(w * h / (double)finite);
    double width = cell / BP_CELL_STRETCH, height = cell * BP_CELL_STRETCH;
    while ((floor(w / width) + 1) * (floor(h / height) + 1) > (double)SB_BP_MAX_CELLS)
        width *= 2, height *= 2;
    t->nx = (int64_t)floor(w / width) + 1;
    t->ny = (int64_t)floor(h / height) + 1;
    t->inv_x = bp_inverse32(1.0 / width);
    t->inv_y = bp_inverse32(1.0 / height);
    t->cells = t->nx * t->ny;
    const int failed = bp_index_sort(t, px, py, grid_keys, threads);
    bp_hold(threads, 0);
    if (failed) {
        sb_bp_index_free(t);
        return NULL;
    }
    return t;
}

sb_bp_index *sb_bp_grid_build_into(const float *px, const float *py, int64_t m, double cell, int threads,
                                   sb_bp_index **into) {
    return *into = sb_bp_grid_build(px, py, m, cell, threads);
}

void bp_grid_box_cells(const sb_bp_index *t, const double *b, int64_t *g) {
    g[0] = bp_cell_of(bp_to32(b[0]), t->x0, t->inv_x, t->nx);
    g[1] = bp_cell_of(bp_to32(b[1]), t->x0, t->inv_x, t->nx);
    g[2] = bp_cell_of(bp_to32(b[2]), t->y0, t->inv_y, t->ny);
    g[3] = bp_cell_of(bp_to32(b[3]), t->y0, t->inv_y, t->ny);
}

/* For the tests: the grid's one promise, checked on points and boxes the caller chooses (near
 * cell borders, where float32 cells could differ from exact ones).  Builds the grid of the
 * points with `cell`; counts (1) the points whose key differs between each vector key this CPU
 * runs (AVX-512, AVX2) and the scalar one, and (2) the (point, box) pairs with the point inside
 * the box (double comparisons) but its cell outside the box's cells.  *pairs: the pairs of (2)
 * it checked.  Returns (1) + (2), or -1 when memory ran out. */
int64_t sb_bp_selftest_grid(const float *px, const float *py, int64_t m, double cell, const double *boxes, int64_t n,
                            int64_t *pairs) {
    sb_bp_index *t = sb_bp_grid_build(px, py, m, cell, 1);
    uint32_t *vector = malloc((size_t)(m ? m : 1) * sizeof *vector), *scalar = malloc((size_t)(m ? m : 1) * sizeof *scalar);
    int64_t wrong = -1;
    *pairs = 0;
    if (t && vector && scalar) {
        wrong = 0;
        scalar_keys(t, px, py, 0, m, scalar);
#if defined(SB_X86)
        for (int isa = 3; isa >= 2; isa--) {
            if (!sb_bp_isa_supported(isa))
                continue;
            const int64_t rest = isa == 3 ? grid_keys_avx512(t, px, py, 0, m, vector) : grid_keys_avx2(t, px, py, 0, m, vector);
            for (int64_t j = 0; j < rest; j++)
                wrong += vector[j] != scalar[j];
        }
#endif
        for (int64_t i = 0; i < n; i++) {
            const double *b = boxes + 4 * i;
            int64_t g[4];
            bp_grid_box_cells(t, b, g);
            for (int64_t j = 0; j < m; j++) {
                if (scalar[j] == UINT32_MAX || !(px[j] >= b[0] && px[j] <= b[1] && py[j] >= b[2] && py[j] <= b[3]))
                    continue;
                const int64_t gx = scalar[j] % t->nx, gy = scalar[j] / t->nx;
                ++*pairs;
                wrong += gx < g[0] || gx > g[1] || gy < g[2] || gy > g[3];
            }
        }
    }
    free(vector);
    free(scalar);
    sb_bp_index_free(t);
    return wrong;
}
