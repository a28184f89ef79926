/* The point index, common to the grid and the Morton table (see bp_internal.h): the points'
 * bounds and the stable counting sort of the points by cell, both split across threads. */
#include "bp_internal.h"

void sb_bp_index_free(sb_bp_index *t) {
    if (!t)
        return;
    bp_free(t->xs);
    bp_free(t->ys);
    bp_free(t->ids);
    bp_free(t->start);
    free(t);
}

int64_t sb_bp_index_cells(const sb_bp_index *t) { return t->cells; }

int sb_bp_index_qbits(const sb_bp_index *t) { return t->kind == BP_KIND_MORTON ? t->q : 0; }

/* ------------------------------------------------------------------------ bounds */

typedef struct bounds_job {
    const float *px, *py;
    int64_t m;
    float b[BP_MAX_PARTS][4];
    int64_t finite[BP_MAX_PARTS];
} bounds_job;

#if defined(SB_X86)
SB_AVX2_ATTR static int64_t bounds_avx2(const float *px, const float *py, int64_t a, int64_t e, float *b) {
    const __m256i exponent = _mm256_set1_epi32(0x7f800000);
    const __m256 big = _mm256_set1_ps(FLT_MAX), small = _mm256_set1_ps(-FLT_MAX);
    __m256 x0 = big, x1 = small, y0 = big, y1 = small;
    __m256i count = _mm256_setzero_si256();
    int64_t j = a;
    for (; j + 8 <= e; j += 8) {
        const __m256 x = _mm256_loadu_ps(px + j), y = _mm256_loadu_ps(py + j);
        const __m256i xe = _mm256_and_si256(_mm256_castps_si256(x), exponent);
        const __m256i ye = _mm256_and_si256(_mm256_castps_si256(y), exponent);
        const __m256 bad = _mm256_castsi256_ps(
            _mm256_or_si256(_mm256_cmpeq_epi32(xe, exponent), _mm256_cmpeq_epi32(ye, exponent)));
        x0 = _mm256_min_ps(_mm256_blendv_ps(x, big, bad), x0);
        x1 = _mm256_max_ps(_mm256_blendv_ps(x, small, bad), x1);
        y0 = _mm256_min_ps(_mm256_blendv_ps(y, big, bad), y0);
        y1 = _mm256_max_ps(_mm256_blendv_ps(y, small, bad), y1);
        count = _mm256_sub_epi32(count, _mm256_castps_si256(bad)); /* counts the bad lanes */
    }
    float v[4][8];
    int32_t c[8];
    _mm256_storeu_ps(v[0], x0);
    _mm256_storeu_ps(v[1], x1);
    _mm256_storeu_ps(v[2], y0);
    _mm256_storeu_ps(v[3], y1);
    _mm256_storeu_si256((__m256i *)c, count);
    int64_t bad = 0;
    for (int l = 0; l < 8; l++) {
        b[0] = v[0][l] < b[0] ? v[0][l] : b[0];
        b[1] = v[1][l] > b[1] ? v[1][l] : b[1];
        b[2] = v[2][l] < b[2] ? v[2][l] : b[2];
        b[3] = v[3][l] > b[3] ? v[3][l] : b[3];
        bad += c[l];
    }
    return (j - a) - bad;
}
#endif

static void bounds_part(void *arg, int part, int parts) {
    bounds_job *job = arg;
    const int64_t a = bp_share(job->m, part, parts), e = bp_share(job->m, part + 1, parts);
    float *b = job->b[part];
    b[0] = b[2] = FLT_MAX;
    b[1] = b[3] = -FLT_MAX;
    int64_t count = 0, j = a;
#if defined(SB_X86)
    if (__builtin_cpu_supports("avx2")) {
        count = bounds_avx2(job->px, job->py, a, e, b);
        j = a + (e - a) / 8 * 8;
    }
#endif
    for (; j < e; j++) {
        const float x = job->px[j], y = job->py[j];
        if (bp_finite32(x) && bp_finite32(y)) {
            b[0] = x < b[0] ? x : b[0];
            b[1] = x > b[1] ? x : b[1];
            b[2] = y < b[2] ? y : b[2];
            b[3] = y > b[3] ? y : b[3];
            count++;
        }
    }
    job->finite[part] = count;
}

void bp_point_bounds(const float *px, const float *py, int64_t m, int threads, double *b, int64_t *finite) {
    bounds_job job = {.px = px, .py = py, .m = m};
    bp_parallel(threads, bounds_part, &job);
    float x0 = FLT_MAX, x1 = -FLT_MAX, y0 = FLT_MAX, y1 = -FLT_MAX;
    int64_t count = 0;
    for (int p = 0; p < threads; p++) {
        const float *v = job.b[p];
        x0 = v[0] < x0 ? v[0] : x0;
        x1 = v[1] > x1 ? v[1] : x1;
        y0 = v[2] < y0 ? v[2] : y0;
        y1 = v[3] > y1 ? v[3] : y1;
        count += job.finite[p];
    }
    if (!count)
        x0 = x1 = y0 = y1 = 0;
    b[0] = x0, b[1] = x1, b[2] = y0, b[3] = y1;
    *finite = count;
}

/* ------------------------------------------------------------------------ counting sort */

typedef struct sort_job {
    sb_bp_index *t;
    const float *px, *py;
    bp_key_fn key_of;
    uint32_t *key;
    int32_t *hist; /* parts x cells: counts, then each part's first position in each cell */
} sort_job;

static void histogram_part(void *arg, int part, int parts) {
    sort_job *job = arg;
    const int64_t a = bp_share(job->t->m, part, parts), e = bp_share(job->t->m, part + 1, parts);
    job->key_of(job->t, job->px, job->py, a, e, job->key);
    int32_t *hist = job->hist + (int64_t)part * job->t->cells;
    memset(hist, 0, (size_t)job->t->cells * sizeof *hist);
    const uint32_t *key = job->key;
    for (int64_t j = a; j < e; j++)
        if (key[j] != UINT32_MAX)
            hist[key[j]]++;
}

static void scatter_part(void *arg, int part, int parts) {
    sort_job *job = arg;
    sb_bp_index *t = job->t;
    const int64_t a = bp_share(t->m, part, parts), e = bp_share(t->m, part + 1, parts);
    int32_t *fill = job->hist + (int64_t)part * t->cells;
    const uint32_t *key = job->key;
    float *xs = t->xs, *ys = t->ys;
    int32_t *ids = t->ids;
    for (int64_t j = a; j < e; j++) {
        const uint32_t c = key[j];
        if (c == UINT32_MAX)
            continue;
        const int32_t d = fill[c]++;
        xs[d] = job->px[j];
        ys[d] = job->py[j];
        ids[d] = (int32_t)j;
    }
}

int bp_index_sort(sb_bp_index *t, const float *px, const float *py, bp_key_fn key_of, int threads) {
    const int64_t cells = t->cells;
    sort_job job = {.t = t, .px = px, .py = py, .key_of = key_of};
    job.key = bp_alloc((size_t)(t->m ? t->m : 1) * sizeof *job.key);
    job.hist = bp_alloc((size_t)threads * (size_t)cells * sizeof *job.hist);
    t->start = bp_alloc((size_t)(cells + 2) * sizeof *t->start);
    if (!job.key || !job.hist || !t->start) {
        bp_free(job.key);
        bp_free(job.hist);
        return -1;
    }
    bp_parallel(threads, histogram_part, &job);
    /* cell-major, part-minor: part p's points of cell c follow those of parts < p, whose ids
     * are smaller, so the order is the one-thread order whatever the thread count */
    int64_t running = 0;
    for (int64_t c = 0; c < cells; c++) {
        t->start[c] = (int32_t)running;
        for (int p = 0; p < threads; p++) {
            int32_t *h = job.hist + (int64_t)p * cells + c;
            const int32_t count = *h;
            *h = (int32_t)running;
            running += count;
        }
    }
    t->start[cells] = t->start[cells + 1] = (int32_t)running;
    t->kept = running;
    t->xs = bp_alloc((size_t)(running + 16) * sizeof(float));
    t->ys = bp_alloc((size_t)(running + 16) * sizeof(float));
    t->ids = bp_alloc((size_t)(running + 16) * sizeof(int32_t));
    const int failed = !t->xs || !t->ys || !t->ids;
    if (!failed)
        bp_parallel(threads, scatter_part, &job);
    bp_free(job.key);
    bp_free(job.hist);
    return failed ? -1 : 0;
}
