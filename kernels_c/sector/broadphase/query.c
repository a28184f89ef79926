/* The queries (see bp_internal.h): per sector its box, the runs of candidate points the box
 * touches in the index, those runs through the narrow phase, the sector's hits sorted; CSR out
 * (offsets N + 1, indices ascending per sector), allocated here and released with sb_bp_free.
 * Every point the predicate accepts lies in the box, so the hits are those of brute force,
 * pair for pair.
 *
 * The order of work: a thread queries its sectors in the order of their place in the index
 * (query_order), so that consecutive sectors read neighbouring cells, and writes their hits one
 * after the other into a work buffer, sized beforehand by the candidates its boxes touch (an
 * upper bound on its hits: no reallocation while it runs); then the join sorts each sector's
 * hits from there into its place in the CSR, in the sectors' order.  Game 10 000 x 1 000 000 on
 * one thread, tools/broadphase_phases.c alternated with the sectors' own order: the query 13.13
 * ms against 14.78 (medians of 12 runs of 31 on a busy VM;
 * docs/findings/2026-11-24-broadphase-sessions.md).  Sorting on the
 * way, rather than in the work buffer and then copying: 9.03 ms against 9.68 (medians of 10
 * alternations; the sort reads lists no longer in L1, but the 9 MB copy, 1.3 ms, is gone).
 *
 * Threads: the sectors are cut into T contiguous shares (as model/split.py's shape_ranges
 * cuts them), each queried by one thread into its own work buffer; then each thread sorts
 * its share's hits into the one result at its offset.  A sector's answer does not depend on
 * its share or on the order of work, so the CSR is the same for every T. */
#include "bp_internal.h"

typedef struct query_job {
    const sb_bp_index *t; /* NULL: brute force over (px, py) */
    const float *px, *py;
    int64_t m;
    const sb_bp_sectors *s;
    int64_t begin, end;
    bp_run_fn run;
    int simd_sort;
    int64_t max_candidates;        /* > 0: refuse (-3) sectors whose boxes touch more candidates */
    double *boxes[BP_MAX_PARTS];   /* each part's sectors' boxes (pass 1) */
    int64_t *near[BP_MAX_PARTS];   /* per sector, its first candidate's place in the index (pass 1) */
    int64_t bound[BP_MAX_PARTS];   /* the candidates they touch: a bound on the part's hits */
    /* each part's answer: sector k's hits are part.indices[at[k] ..] (part.offsets[k + 1] of them) */
    sb_bp_hits part[BP_MAX_PARTS];
    int64_t *at[BP_MAX_PARTS];
    int status[BP_MAX_PARTS];
    sb_bp_hits *out;
    int64_t base[BP_MAX_PARTS + 1]; /* each part's first hit in the result */
} query_job;

static int hits_alloc(sb_bp_hits *h, int64_t n, int64_t cap) {
    memset(h, 0, sizeof *h);
    h->n = n;
    h->cap = cap < 1024 ? 1024 : cap;
    h->offsets = bp_alloc((size_t)(n + 1) * sizeof *h->offsets);
    h->indices = bp_alloc((size_t)h->cap * sizeof *h->indices);
    if (!h->offsets || !h->indices) {
        sb_bp_hits_free(h);
        return -1;
    }
    h->offsets[0] = 0;
    return 0;
}

/* Room for `more` hits and the narrow phase's 16 past them (brute force only: the indexed
 * query knows its bound beforehand). */
static int hits_reserve(sb_bp_hits *h, int64_t more) {
    if (h->nhits + more + 16 <= h->cap)
        return 0;
    int64_t cap = h->cap * 2;
    while (cap < h->nhits + more + 16)
        cap *= 2;
    int32_t *p = bp_alloc((size_t)cap * sizeof *p);
    if (!p)
        return -1;
    memcpy(p, h->indices, (size_t)h->nhits * sizeof *p);
    bp_free(h->indices);
    h->indices = p;
    h->cap = cap;
    return 0;
}

static inline void sector_q(const sb_bp_sectors *s, int64_t i, float *q) {
    q[0] = s->cx[i], q[1] = s->cy[i], q[2] = s->ux[i];
    q[3] = s->uy[i], q[4] = s->r2[i], q[5] = s->cos_theta[i];
}

/* The index positions a box touches, as runs [a, b): the grid's rows (one run per row) or the
 * Morton table's at most 4 ranges.  Calls EMIT(a, b) for each. */
#define FOR_EACH_RUN(t, box, EMIT)                                                                   \
    do {                                                                                             \
        if ((t)->kind == BP_KIND_GRID) {                                                             \
            int64_t g_[4];                                                                           \
            bp_grid_box_cells((t), (box), g_);                                                       \
            for (int64_t row_ = g_[2]; row_ <= g_[3]; row_++) {                                      \
                const int64_t first_ = row_ * (t)->nx;                                               \
                EMIT((t)->start[first_ + g_[0]], (t)->start[first_ + g_[1] + 1]);                    \
            }                                                                                        \
        } else {                                                                                     \
            int64_t a_[4], b_[4];                                                                    \
            const int runs_ = bp_morton_runs((t), (box), a_, b_);                                    \
            for (int r_ = 0; r_ < runs_; r_++)                                                       \
                EMIT(a_[r_], b_[r_]);                                                                \
        }                                                                                            \
    } while (0)

/* Sector i's box (an empty one, xmin > xmax, when it holds no point: no NaN in fast-math
 * builds) and the candidates it touches in the index: an upper bound on its hits.  *near: the
 * index position of its first candidate (0 when none), the place the sector is queried from. */
static int64_t sector_bound(const sb_bp_index *t, const sb_bp_sectors *s, int64_t i, double *box, int64_t *near) {
    int64_t bound = 0, first = INT64_MAX;
#define ADD_BOUND(a, b) (bound += (b) - (a), first = (a) < (b) && (a) < first ? (a) : first)
    if (bp_sector_box(s->cx[i], s->cy[i], s->ux[i], s->uy[i], s->r2[i], s->cos_theta[i], box))
        FOR_EACH_RUN(t, box, ADD_BOUND);
    else
        box[0] = 1, box[1] = 0;
#undef ADD_BOUND
    *near = first == INT64_MAX ? 0 : first;
    return bound;
}

/* Pass 1 for a part's sectors: their boxes, and the candidates they touch (the bound on the
 * hits, which sizes the part's buffer and is checked against the caller's limit). */
static int query_boxes(query_job *job, int part, int64_t begin, int64_t end) {
    const size_t count = (size_t)(end > begin ? end - begin : 1);
    double *boxes = job->boxes[part] = bp_alloc(count * 4 * sizeof *boxes);
    int64_t *near = job->near[part] = bp_alloc(count * sizeof *near);
    if (!boxes || !near)
        return -2;
    int64_t bound = 0;
    for (int64_t i = begin; i < end; i++)
        bound += sector_bound(job->t, job->s, i, boxes + 4 * (i - begin), near + (i - begin));
    job->bound[part] = bound;
    return 0;
}

/* The part's sectors in the order of their first candidate's place in the index (a counting
 * sort on its top bits), so that consecutive sectors read neighbouring cells. */
static int32_t *query_order(const query_job *job, int part, int64_t count) {
    int64_t buckets = 1;
    while (buckets < count)
        buckets *= 2;
    int32_t *order = bp_alloc((size_t)(count ? count : 1) * sizeof *order);
    int32_t *next = bp_calloc((size_t)(buckets + 1) * sizeof *next);
    if (!order || !next) {
        bp_free(order);
        bp_free(next);
        return NULL;
    }
    const int64_t *near = job->near[part];
    const double scale = (double)buckets / ((double)job->t->kept + 1.0);
#define BUCKET(k) ((int64_t)((double)near[k] * scale))
    for (int64_t k = 0; k < count; k++)
        next[BUCKET(k) + 1]++;
    for (int64_t b = 1; b <= buckets; b++)
        next[b] += next[b - 1];
    for (int64_t k = 0; k < count; k++)
        order[next[BUCKET(k)]++] = (int32_t)k;
#undef BUCKET
    bp_free(next);
    return order;
}

/* Pass 2: the narrow phase over the runs, the sectors in query_order; out: the work buffer
 * (each sector's hits unsorted) and the counts, job->at[part] where each sector's hits are. */
static int query_share(query_job *job, int part, int64_t begin, int64_t end, sb_bp_hits *out) {
    const sb_bp_index *t = job->t;
    const sb_bp_sectors *s = job->s;
    const double *boxes = job->boxes[part];
    const int64_t count = end - begin;
    int32_t *order = query_order(job, part, count);
    int64_t *at = job->at[part] = bp_alloc((size_t)(count + 1) * sizeof *at);
    if (!order || !at || hits_alloc(out, count, job->bound[part] + 16)) {
        bp_free(order);
        return -2;
    }
    float q[6];
    int32_t *work = out->indices;
    int64_t *found = out->offsets + 1;
    int64_t nhits = 0, candidates = 0, runs = 0;
#define NARROW(a, b)                                                                                 \
    do {                                                                                             \
        const int64_t a__ = (a), b__ = (b);                                                          \
        if (a__ < b__) {                                                                             \
            nhits += job->run(t->xs, t->ys, t->ids, a__, b__, q, work + nhits);                      \
            candidates += b__ - a__;                                                                 \
            runs++;                                                                                  \
        }                                                                                            \
    } while (0)
    for (int64_t o = 0; o < count; o++) {
        const int64_t k = order[o];
        const double *box = boxes + 4 * k;
        at[k] = nhits;
        if (box[0] <= box[1]) {
            sector_q(s, begin + k, q);
            FOR_EACH_RUN(t, box, NARROW);
        }
        found[k] = nhits - at[k];
    }
#undef NARROW
    out->nhits = nhits;
    out->candidates = candidates;
    out->runs = runs;
    bp_free(order);
    return 0;
}

/* Brute force: every sector of the share against all M points, the same narrow phase, in the
 * sectors' order (nothing to gain from another: each reads all the points). */
static int none_share(query_job *job, int part, int64_t begin, int64_t end, sb_bp_hits *out) {
    int64_t *at = job->at[part] = bp_alloc((size_t)(end - begin + 1) * sizeof *at);
    if (!at || hits_alloc(out, end - begin, 1 << 16))
        return -2;
    float q[6];
    for (int64_t i = begin; i < end; i++) {
        sector_q(job->s, i, q);
        if (hits_reserve(out, job->m)) {
            sb_bp_hits_free(out);
            return -2;
        }
        const int64_t first = at[i - begin] = out->nhits;
        out->nhits += job->run(job->px, job->py, NULL, 0, job->m, q, out->indices + out->nhits);
        out->candidates += job->m;
        out->runs++;
        out->offsets[i - begin + 1] = out->nhits - first;
    }
    return 0;
}

static void boxes_part(void *arg, int part, int parts) {
    query_job *job = arg;
    const int64_t n = job->end - job->begin;
    job->status[part] =
        query_boxes(job, part, job->begin + bp_share(n, part, parts), job->begin + bp_share(n, part + 1, parts));
}

static void share_part(void *arg, int part, int parts) {
    query_job *job = arg;
    const int64_t n = job->end - job->begin;
    const int64_t a = job->begin + bp_share(n, part, parts), e = job->begin + bp_share(n, part + 1, parts);
    job->status[part] =
        job->t ? query_share(job, part, a, e, &job->part[part]) : none_share(job, part, a, e, &job->part[part]);
}

/* The index's pass 1 on every part; 0, -2 (out of memory) or -3 (over job->max_candidates). */
static int query_bounds(query_job *job, int threads) {
    bp_parallel(threads, boxes_part, job);
    int64_t total = 0;
    int status = 0;
    for (int p = 0; p < threads; p++) {
        status = status ? status : job->status[p];
        total += job->bound[p];
    }
    return status ? status : job->max_candidates > 0 && total > job->max_candidates ? -3 : 0;
}

/* The join reads sector k + JOIN_AHEAD's hits into the cache while it sorts sector k's: the
 * work buffer holds them in query order, so the sectors' order jumps about in it and the
 * hardware prefetcher cannot guess the next list. */
#define JOIN_AHEAD 2

/* Each part's hits into the result at its base, in the sectors' order, the offsets with them;
 * the indexed query's hits sorted on the way (brute force finds them ascending). */
static void join_part(void *arg, int part, int parts) {
    query_job *job = arg;
    const sb_bp_hits *h = &job->part[part];
    const int64_t *at = job->at[part];
    const int64_t n = job->end - job->begin, first = bp_share(n, part, parts);
    bp_scratch sc = {0};
    int failed = 0;
    int64_t next = job->base[part];
    for (int64_t k = 0; k < h->n; k++) {
        const int64_t hits = h->offsets[k + 1];
        int32_t *to = job->out->indices + next;
        if (k + JOIN_AHEAD < h->n) {
            const char *ahead = (const char *)(h->indices + at[k + JOIN_AHEAD]);
            for (int64_t byte = 0; byte < h->offsets[k + JOIN_AHEAD + 1] * (int64_t)sizeof *to; byte += 64)
                __builtin_prefetch(ahead + byte);
        }
        if (job->t)
            failed |= bp_sort_hits(h->indices + at[k], to, hits, &sc, job->simd_sort);
        else
            memcpy(to, h->indices + at[k], (size_t)hits * sizeof *to);
        next += hits;
        job->out->offsets[first + k + 1] = next;
    }
    bp_scratch_free(&sc);
    job->status[part] = failed ? -2 : 0;
}

static int run_query(query_job *job, int isa, int threads, sb_bp_hits *out) {
    memset(out, 0, sizeof *out);
    job->run = bp_pick_run(isa);
    if (!job->run)
        return -1;
    /* the AVX-512 sort, else the AVX2 one, else the bucket sort (any narrow phase: the hits
     * are the same ids, and the sort only orders them) */
    job->simd_sort = sb_bp_isa_supported(3) ? 3 : sb_bp_isa_supported(2) ? 2 : 0;
    if (job->simd_sort == 2)
        bp_compress_init();
    const int64_t n = job->end - job->begin;
    threads = threads < 1 ? 1 : threads > BP_MAX_PARTS ? BP_MAX_PARTS : threads;
    if (threads > n)
        threads = n > 0 ? (int)n : 1;
    bp_hold(threads, 1);
    int status = job->t ? query_bounds(job, threads) : 0;
    if (!status) {
        bp_parallel(threads, share_part, job);
        for (int p = 0; p < threads; p++)
            status = status ? status : job->status[p];
    }
    for (int p = 0; p < threads; p++) {
        bp_free(job->boxes[p]);
        bp_free(job->near[p]);
        job->boxes[p] = NULL;
        job->near[p] = NULL;
    }
    job->base[0] = 0;
    for (int p = 0; p < threads; p++)
        job->base[p + 1] = job->base[p] + job->part[p].nhits;
    if (!status && hits_alloc(out, n, job->base[threads] + 16))
        status = -2;
    if (!status) {
        job->out = out;
        bp_parallel(threads, join_part, job);
        for (int p = 0; p < threads; p++)
            status = status ? status : job->status[p];
        if (status) /* a sort ran out of scratch memory */
            sb_bp_hits_free(out);
        out->nhits = job->base[threads];
        for (int p = 0; p < threads; p++) {
            out->candidates += job->part[p].candidates;
            out->runs += job->part[p].runs;
        }
    }
    bp_hold(threads, 0);
    for (int p = 0; p < threads; p++) { /* a part that failed freed its own; NULLs are no-ops */
        sb_bp_hits_free(&job->part[p]);
        bp_free(job->at[p]);
    }
    return status;
}

int sb_bp_query(const sb_bp_index *t, const sb_bp_sectors *s, int64_t begin, int64_t end, int isa, int threads,
                int64_t max_candidates, sb_bp_hits *out) {
    query_job *job = calloc(1, sizeof *job);
    if (!job)
        return -2;
    job->t = t, job->s = s, job->begin = begin, job->end = end, job->max_candidates = max_candidates;
    const int status = run_query(job, isa, threads, out);
    free(job);
    return status;
}

int64_t sb_bp_bounds(const sb_bp_index *t, const sb_bp_sectors *s, int64_t begin, int64_t end, int64_t *bound) {
    double box[4];
    int64_t total = 0, near;
    for (int64_t i = begin; i < end; i++)
        total += bound[i - begin] = sector_bound(t, s, i, box, &near);
    return total;
}

int sb_bp_none(const float *px, const float *py, int64_t m, const sb_bp_sectors *s, int64_t begin, int64_t end,
               int isa, int threads, sb_bp_hits *out) {
    query_job *job = calloc(1, sizeof *job);
    if (!job)
        return -2;
    job->px = px, job->py = py, job->m = m, job->s = s, job->begin = begin, job->end = end;
    const int status = run_query(job, isa, threads, out);
    free(job);
    return status;
}
