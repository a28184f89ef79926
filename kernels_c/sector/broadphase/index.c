/* The point index, common to the grid and the Morton table (see bp_internal.h): the points'
 * bounds and the stable counting sort of the points by cell, both split across threads. */
#include "bp_internal.h"
#if defined(SB_X86) && !defined(SB_ROWS_ONLY)
#include <x86intrin.h> /* __rdtsc */
#endif

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

int64_t sb_bp_index_kept(const sb_bp_index *t) { return t->kept; }

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
    if (sb_bp_isa_supported(2)) {
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

/* ------------------------------------------------------------------------ counting sort
 *
 * A stable counting sort of the points by cell, done one of two ways by the number of cells:
 *
 *   direct      one scatter of (x, y, id) straight into the cells.  Each cell holds three
 *               open write positions, one cache line apiece; beyond a few thousand cells they
 *               no longer fit in L1/L2 and nearly every write waits for a line from L3.
 *   two digits  a least-significant-digit radix sort on two digits of the cell key: pass 1
 *               writes each point as one 16-byte record into 2^low buckets by the key's low
 *               digit, pass 2 reads the records in order and writes (x, y, id) into the cells
 *               by its high digit.  Twice the passes, but each writes to a few hundred open
 *               lines (the split below).  Stable, so the result is the direct sort's, bit for bit.
 *               Each pass stores plain or write-combined, whichever this host runs faster
 *               (measured by the process's first large builds: "which way", below).
 *
 * Measured on game 10 000 x 1 000 000 (33 124 cells, 16 key bits: 8 + 8), the scatter alone,
 * one thread, in one throwaway program: direct 6.4-8.5 ms, two digits 4.7-5.0 ms
 * (docs/findings/2026-11-24-broadphase-sessions.md). */

/* Up to 2^this many cells the direct scatter (every open line fits the caches). */
#define BP_DIRECT_BITS 12
/* Above, the low digit takes half the key's bits, or more (up to BP_LOW_BITS) so that the high
 * digit spans at most 2^BP_HIGH_BITS buckets: 3 x 128 open lines in pass 2, against 2^low
 * records' lines in pass 1.  Game 10 000 x 1 000 000 (33 124 cells, 16 bits) built in 5.88 ms
 * with 9 + 7 against 6.22 with 8 + 8, and 5.94 against 6.22 in cells of 0.35 x the median
 * radius (17 bits: 10 + 7 against 9 + 8; medians of 8 alternations).  Halves of 18 bits left
 * pass 2 3 x 500 lines: 13.8 against 9.4 ms with 10 + 8 on 256 036 cells.  A low digit of 11 or
 * 12 bits, 2048 or 4096 open records in pass 1, was as slow the other way. */
#define BP_HIGH_BITS 7
#define BP_LOW_BITS 10

/* The low digit's width for a key of key_bits bits; 0: the direct scatter. */
static int low_digit_bits(int key_bits) {
    if (key_bits <= BP_DIRECT_BITS)
        return 0;
    const int half = (key_bits + 1) / 2, wide = key_bits - BP_HIGH_BITS;
    const int capped = wide < BP_LOW_BITS ? wide : BP_LOW_BITS;
    return capped > half ? capped : half;
}

/* Each part's row of counts or positions in a parts x entries table starts on a cache line of its
 * own: rows packed end to end shared a line at each boundary, and the parts' increments there
 * bounced it between the cores.  The high buckets' fill of pass 2 (65 entries a part on game 10
 * 000 x 1 000 000) put 15 of one part's buckets on the other's last line: the build on two
 * threads took 6.34-6.50 ms packed, 5.08-5.20 padded (tools/broadphase_phases.c, three
 * alternations), pass 2 alone 3.3-3.6 ms on two threads as on one. */
static inline int64_t part_stride(int64_t entries) { return (entries + 15) & ~(int64_t)15; }

typedef struct bp_record {
    float x, y;
    int32_t id;
    uint32_t key;
} bp_record;

typedef struct sort_job {
    sb_bp_index *t;
    const float *px, *py;
    bp_key_fn key_of;
    uint32_t *key;
    int32_t *hist; /* parts x cells (rows part_stride(cells) apart): counts, then each part's first position in each cell */
    /* two digits (low_bits > 0): */
    int low_bits;
    int32_t *low_fill;  /* parts x 2^low_bits: each part's counts, then next record, in each low bucket (pass 1) */
    int32_t *high_fill; /* parts x 2^(key bits - low_bits) (rows part_stride apart): its next point in each high bucket (pass 2) */
    bp_record *records;
    /* pass 2: part p reads records [first[p], first[p + 1]), whole low buckets from low[p] on */
    int64_t first[BP_MAX_PARTS + 1];
    int64_t low[BP_MAX_PARTS + 1];
    /* the write-combined passes: each part's lines, `line_bytes` apart; pass 2 write-combined too */
    int combined_cells;
    char *lines, *lines_block; /* lines: lines_block's first 64-byte boundary */
    size_t line_bytes;
} sort_job;

static void histogram_part(void *arg, int part, int parts) {
    sort_job *job = arg;
    const int64_t a = bp_share(job->t->m, part, parts), e = bp_share(job->t->m, part + 1, parts);
    job->key_of(job->t, job->px, job->py, a, e, job->key);
    int32_t *hist = job->hist + (int64_t)part * part_stride(job->t->cells);
    memset(hist, 0, (size_t)job->t->cells * sizeof *hist);
    const uint32_t *key = job->key;
    for (int64_t j = a; j < e; j++)
        if (key[j] != UINT32_MAX)
            hist[key[j]]++;
    if (job->low_bits) { /* the two-digit sort's counts by low digit, from the cells' */
        const uint32_t mask = (1u << job->low_bits) - 1u;
        int32_t *low = job->low_fill + ((int64_t)part << job->low_bits);
        for (int64_t c = 0; c < job->t->cells; c++)
            low[c & mask] += hist[c];
    }
}

static void scatter_part(void *arg, int part, int parts) {
    sort_job *job = arg;
    sb_bp_index *t = job->t;
    const int64_t a = bp_share(t->m, part, parts), e = bp_share(t->m, part + 1, parts);
    int32_t *fill = job->hist + (int64_t)part * part_stride(t->cells);
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

#if defined(SB_X86)
/* Pass 1 four points at a time: a 4 x 4 transposition makes each record one 16-byte store
 * (three scalar stores a record: pass 1 took 2.6-3.0 ms against 2.0 on game 1 000 000).
 * Points j .. j + 3 as four records (x, y, id, key): */
SB_SSE2_ATTR static inline void four_records(const sort_job *job, int64_t j, __m128 *record) {
    const __m128 x = _mm_loadu_ps(job->px + j), y = _mm_loadu_ps(job->py + j);
    const __m128 i = _mm_castsi128_ps(_mm_add_epi32(_mm_set1_epi32((int32_t)j), _mm_setr_epi32(0, 1, 2, 3)));
    const __m128 k = _mm_castsi128_ps(_mm_loadu_si128((const __m128i *)(job->key + j)));
    const __m128 xy01 = _mm_unpacklo_ps(x, y), xy23 = _mm_unpackhi_ps(x, y);
    const __m128 ik01 = _mm_unpacklo_ps(i, k), ik23 = _mm_unpackhi_ps(i, k);
    record[0] = _mm_movelh_ps(xy01, ik01);
    record[1] = _mm_movehl_ps(ik01, xy01);
    record[2] = _mm_movelh_ps(xy23, ik23);
    record[3] = _mm_movehl_ps(ik23, xy23);
}

SB_SSE2_ATTR static int64_t records_sse2(const sort_job *job, int64_t a, int64_t e, int32_t *fill) {
    const uint32_t mask = (1u << job->low_bits) - 1u, *key = job->key;
    bp_record *records = job->records;
    int64_t j = a;
    for (; j + 4 <= e; j += 4) {
        __m128 record[4];
        four_records(job, j, record);
        for (int l = 0; l < 4; l++) {
            const uint32_t c = key[j + l];
            if (c != UINT32_MAX)
                _mm_storeu_ps(&records[fill[c & mask]++].x, record[l]);
        }
    }
    return j;
}
#endif

static void records_part(void *arg, int part, int parts) {
    sort_job *job = arg;
    const int64_t a = bp_share(job->t->m, part, parts), e = bp_share(job->t->m, part + 1, parts);
    int32_t *fill = job->low_fill + ((int64_t)part << job->low_bits);
    const uint32_t mask = (1u << job->low_bits) - 1u, *key = job->key;
    int64_t j = a;
#if defined(SB_X86)
    j = records_sse2(job, a, e, fill);
#endif
    for (; j < e; j++) {
        const uint32_t c = key[j];
        if (c != UINT32_MAX)
            job->records[fill[c & mask]++] = (bp_record){job->px[j], job->py[j], (int32_t)j, c};
    }
}

/* Pass 2's part `part`: its first point in each of the `highs` high buckets, into its fill. */
static int32_t *high_starts(sort_job *job, int part, int64_t highs) {
    const sb_bp_index *t = job->t;
    const int64_t low = job->low[part];
    /* the records hold low buckets low .. low[part + 1] - 1, so within high bucket h they start
     * at cell (h, low) */
    int32_t *fill = job->high_fill + (int64_t)part * part_stride(highs);
    for (int64_t h = 0; h < highs; h++) {
        const int64_t c = (h << job->low_bits) | low;
        fill[h] = t->start[c < t->cells ? c : t->cells];
    }
    return fill;
}

static void cells_part(void *arg, int part, int parts) {
    sort_job *job = arg;
    sb_bp_index *t = job->t;
    const int low_bits = job->low_bits;
    const int64_t highs = ((t->cells - 1) >> low_bits) + 1;
    (void)parts;
    if (job->first[part] == job->first[part + 1])
        return;
    int32_t *fill = high_starts(job, part, highs);
    float *xs = t->xs, *ys = t->ys;
    int32_t *ids = t->ids;
    const bp_record *records = job->records;
    for (int64_t j = job->first[part]; j < job->first[part + 1]; j++) {
        const bp_record r = records[j];
        const int32_t d = fill[r.key >> low_bits]++;
        xs[d] = r.x;
        ys[d] = r.y;
        ids[d] = r.id;
    }
}

/* ------------------------------------------------------------------------ write-combined passes
 *
 * Both passes scatter to hundreds of open lines at once (512 low buckets, 3 x 128 high ones).
 * On some hosts that is nearly free, on others each line costs a trip to memory.  A throwaway
 * program (docs/findings/2026-11-24-broadphase-sessions.md) scattering 1 000 000 16-byte
 * records into K buckets with plain stores took 3.3-6.4 ms up to K = 64, then 11-12.5 ms for
 * every K from 128 to 2048 on an Intel Xeon host, where on the AMD hosts both passes together
 * took 4.7-5.8 ms.  Software
 * write-combining keeps each bucket's open lines in a buffer of its own (pass 1: four lines a
 * bucket, 512 x 256 bytes in L2; pass 2: one line a stream, 3 x 128 x 64 bytes in L1) and writes
 * them out whole with streaming stores once full, so a line costs one 64-byte store
 * whatever the number of buckets: 4.8-6.3 ms for every K on the Intel host (the index build on
 * game 10 000 x 1 000 000: 12-14.5 ms against 21.5-22.4 plain), but 8.6-9.4 ms for both passes
 * on the AMD hosts, where plain stores win.  Which way is faster depends on the host: the
 * index measures both (which way, below).
 *
 * A line is streamed only when all of it is this part's (another part, on another thread, may
 * own the start of a bucket's first line or the end of its last): the lines a part shares are
 * written record by record with ordinary stores.  Streaming stores are weakly ordered: a part
 * ends with a fence, before the join that publishes its writes. */
#if defined(SB_X86)
/* 64 bytes from src (aligned) to dst (aligned), around the caches. */
SB_SSE2_ATTR static inline void stream_line(void *dst, const void *src) {
    const __m128i *from = src;
    __m128i *to = dst;
    _mm_stream_si128(to, _mm_load_si128(from));
    _mm_stream_si128(to + 1, _mm_load_si128(from + 1));
    _mm_stream_si128(to + 2, _mm_load_si128(from + 2));
    _mm_stream_si128(to + 3, _mm_load_si128(from + 3));
}

/* Records per line, and points per line of xs, ys, ids. */
#define BP_LINE_RECORDS 4
#define BP_LINE_POINTS 16
/* Records a bucket's buffer holds in pass 1: four lines, streamed out together.  The test "is
 * the buffer full?" is then true once in 16 records rather than once in 4, and its
 * mispredictions were most of the pass's time: game 10 000 x 1 000 000 on the Intel host, one
 * thread, pass 1 alone 5.4-6.2 ms with one line a bucket, 4.0-5.4 with two, 3.4-4.1 with four
 * (3.4-4.5 with eight; medians of 31 builds, three alternations each). */
#define BP_BUFFER_RECORDS 16

/* Record d of low bucket b is in place in the bucket's buffer; once the buffer is full, out it goes. */
SB_SSE2_ATTR static inline void record_placed(bp_record *records, bp_record (*buffer)[BP_BUFFER_RECORDS],
                                              const int32_t *begin, uint32_t b, int32_t d) {
    if (__builtin_expect((d & (BP_BUFFER_RECORDS - 1)) != BP_BUFFER_RECORDS - 1, 1))
        return;
    const int32_t first = d - (BP_BUFFER_RECORDS - 1);
    if (first >= begin[b])
        for (int q = 0; q < BP_BUFFER_RECORDS; q += BP_LINE_RECORDS)
            stream_line(&records[first + q], &buffer[b][q]);
    else
        for (int32_t s = begin[b]; s <= d; s++)
            records[s] = buffer[b][s & (BP_BUFFER_RECORDS - 1)];
}

SB_SSE2_ATTR static void records_part_combined(void *arg, int part, int parts) {
    sort_job *job = arg;
    const int64_t a = bp_share(job->t->m, part, parts), e = bp_share(job->t->m, part + 1, parts);
    const int64_t lows = (int64_t)1 << job->low_bits;
    int32_t *fill = job->low_fill + ((int64_t)part << job->low_bits);
    const uint32_t mask = (1u << job->low_bits) - 1u, *key = job->key;
    bp_record *records = job->records;
    bp_record(*buffer)[BP_BUFFER_RECORDS] = (void *)(job->lines + (size_t)part * job->line_bytes);
    int32_t *begin = (int32_t *)(buffer + lows); /* this part's first record in each bucket */
    memcpy(begin, fill, (size_t)lows * sizeof *begin);
    int64_t j = a;
    for (; j + 4 <= e; j += 4) {
        __m128 record[4];
        four_records(job, j, record);
        for (int l = 0; l < 4; l++) {
            const uint32_t c = key[j + l];
            if (c == UINT32_MAX)
                continue;
            const uint32_t b = c & mask;
            const int32_t d = fill[b]++;
            _mm_store_ps(&buffer[b][d & (BP_BUFFER_RECORDS - 1)].x, record[l]);
            record_placed(records, buffer, begin, b, d);
        }
    }
    for (; j < e; j++) {
        const uint32_t c = key[j];
        if (c == UINT32_MAX)
            continue;
        const uint32_t b = c & mask;
        const int32_t d = fill[b]++;
        buffer[b][d & (BP_BUFFER_RECORDS - 1)] = (bp_record){job->px[j], job->py[j], (int32_t)j, c};
        record_placed(records, buffer, begin, b, d);
    }
    for (int64_t b = 0; b < lows; b++) { /* the buffers not full: what of them is this part's */
        const int32_t end = fill[b], whole = end & ~(BP_BUFFER_RECORDS - 1);
        for (int32_t s = whole > begin[b] ? whole : begin[b]; s < end; s++)
            records[s] = buffer[b][s & (BP_BUFFER_RECORDS - 1)];
    }
    _mm_sfence();
}

typedef struct cell_lines {
    float x[BP_LINE_POINTS], y[BP_LINE_POINTS];
    int32_t id[BP_LINE_POINTS];
} cell_lines;

/* Points q of xs, ys, ids from a high bucket's lines, for q in [from, to] */
static inline void points_out(sb_bp_index *t, const cell_lines *line, int32_t from, int32_t to) {
    for (int32_t q = from; q <= to; q++) {
        t->xs[q] = line->x[q & (BP_LINE_POINTS - 1)];
        t->ys[q] = line->y[q & (BP_LINE_POINTS - 1)];
        t->ids[q] = line->id[q & (BP_LINE_POINTS - 1)];
    }
}

SB_SSE2_ATTR static void cells_part_combined(void *arg, int part, int parts) {
    sort_job *job = arg;
    sb_bp_index *t = job->t;
    const int low_bits = job->low_bits;
    const int64_t highs = ((t->cells - 1) >> low_bits) + 1;
    (void)parts;
    if (job->first[part] == job->first[part + 1])
        return;
    int32_t *fill = high_starts(job, part, highs);
    cell_lines *line = (void *)(job->lines + (size_t)part * job->line_bytes);
    int32_t *begin = (int32_t *)(line + highs); /* this part's first point in each bucket */
    memcpy(begin, fill, (size_t)highs * sizeof *begin);
    const bp_record *records = job->records;
    for (int64_t j = job->first[part]; j < job->first[part + 1]; j++) {
        const bp_record r = records[j];
        const uint32_t h = r.key >> low_bits;
        const int32_t d = fill[h]++, s = d & (BP_LINE_POINTS - 1);
        line[h].x[s] = r.x;
        line[h].y[s] = r.y;
        line[h].id[s] = r.id;
        if (s == BP_LINE_POINTS - 1) {
            const int32_t first = d - (BP_LINE_POINTS - 1);
            if (first >= begin[h]) {
                stream_line(t->xs + first, line[h].x);
                stream_line(t->ys + first, line[h].y);
                stream_line(t->ids + first, line[h].id);
            } else {
                points_out(t, &line[h], begin[h], d);
            }
        }
    }
    for (int64_t h = 0; h < highs; h++) {
        const int32_t whole = fill[h] & ~(BP_LINE_POINTS - 1);
        points_out(t, &line[h], whole > begin[h] ? whole : begin[h], fill[h] - 1);
    }
    _mm_sfence();
}
#endif

/* ------------------------------------------------------------------------ which way
 *
 * The first large builds of a process (per thread count) alternate the plain and the
 * write-combined passes, BP_SCATTER_TRIALS builds each, and time them; later ones take the way
 * with the shorter best time a point.  Both ways build the same index, bit for bit: only the
 * time depends on the choice.  Builds of fewer points than BP_SCATTER_TRIAL_POINTS scatter
 * plain: their buffers stay in the caches, where plain stores cost no trip to memory (on the
 * Intel host, one thread, medians of 41 builds: game 2 000 x 100 000 built in 1.20-1.28 ms
 * plain against 1.45 write-combined, game 20 000 x 200 000 in 2.24-2.43 against 2.26-2.93). */
#define BP_SCATTER_TRIALS 3
#define BP_SCATTER_TRIAL_POINTS (1 << 18)

/* 0: measure, as above; 1 or 2: always plain or always write-combined (sb_bp_scatter_force) */
static int scatter_forced;
static int scatter_trials[BP_MAX_PARTS + 1][2];
/* the time stamp counter's ticks per 1024 points (its rate is constant; it is only compared
 * with itself); 0: none yet */
static int64_t scatter_best[BP_MAX_PARTS + 1][2];

static int scatter_decided(int threads) {
    return __atomic_load_n(&scatter_trials[threads][0], __ATOMIC_RELAXED) >= BP_SCATTER_TRIALS &&
           __atomic_load_n(&scatter_trials[threads][1], __ATOMIC_RELAXED) >= BP_SCATTER_TRIALS;
}

/* How a build of `points` finite points on `threads` threads writes them: 1 plain, 2
 * write-combined, 0 not chosen yet (its way is a trial's). */
static int scatter_chosen(int threads, int64_t points) {
#if !defined(SB_X86)
    (void)threads, (void)points;
    return 1;
#endif
    const int forced = __atomic_load_n(&scatter_forced, __ATOMIC_RELAXED);
    if (forced)
        return forced;
    if (points < BP_SCATTER_TRIAL_POINTS)
        return 1;
    if (!scatter_decided(threads))
        return 0;
    return __atomic_load_n(&scatter_best[threads][1], __ATOMIC_RELAXED) <
                   __atomic_load_n(&scatter_best[threads][0], __ATOMIC_RELAXED)
               ? 2
               : 1;
}

/* 1 for the write-combined passes, 0 for the plain ones; *trial: this build is timed (the way
 * with fewer trials so far, plain first) */
static int scatter_way(int threads, int64_t kept, int *trial) {
    const int chosen = scatter_chosen(threads, kept);
    *trial = !chosen;
    if (chosen)
        return chosen == 2;
    return __atomic_load_n(&scatter_trials[threads][1], __ATOMIC_RELAXED) <
           __atomic_load_n(&scatter_trials[threads][0], __ATOMIC_RELAXED);
}

#if defined(SB_X86)
static void scatter_timed(int threads, int combined, uint64_t ticks, int64_t kept) {
    const int64_t per_1024 = (int64_t)(ticks * 1024 / (uint64_t)kept) + 1;
    int64_t *best = &scatter_best[threads][combined];
    int64_t old = __atomic_load_n(best, __ATOMIC_RELAXED);
    while ((old == 0 || per_1024 < old) &&
           !__atomic_compare_exchange_n(best, &old, per_1024, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    __atomic_fetch_add(&scatter_trials[threads][combined], 1, __ATOMIC_RELAXED);
}
#endif

void sb_bp_scatter_force(int way) {
    __atomic_store_n(&scatter_forced, way == 1 || way == 2 ? way : 0, __ATOMIC_RELAXED);
}

int sb_bp_scatter_trials(int threads) {
    threads = threads < 1 ? 1 : threads > BP_MAX_PARTS ? BP_MAX_PARTS : threads;
    return __atomic_load_n(&scatter_trials[threads][0], __ATOMIC_RELAXED) +
           __atomic_load_n(&scatter_trials[threads][1], __ATOMIC_RELAXED);
}

int sb_bp_scatter_way(int threads, int64_t points) {
    threads = threads < 1 ? 1 : threads > BP_MAX_PARTS ? BP_MAX_PARTS : threads; /* as the builds do */
    return scatter_chosen(threads, points);
}

/* The two-digit sort's positions, from each part's counts by low digit: each part's first
 * record in each low bucket (bucket-major, part-minor: ascending ids within a bucket), and pass
 * 2's shares of whole buckets. */
static int two_digit_plan(sort_job *job, int parts) {
    const int64_t cells = job->t->cells, lows = (int64_t)1 << job->low_bits, highs = ((cells - 1) >> job->low_bits) + 1;
    job->high_fill = bp_alloc((size_t)parts * (size_t)part_stride(highs) * sizeof *job->high_fill);
    job->records = bp_alloc((size_t)(job->t->kept ? job->t->kept : 1) * sizeof *job->records);
    if (!job->high_fill || !job->records)
        return -1;
    const int64_t kept = job->t->kept;
    int64_t running = 0;
    int next = 1;
    job->first[0] = job->low[0] = 0;
    for (int64_t l = 0; l < lows; l++) {
        while (next < parts && running >= kept * next / parts) {
            job->first[next] = running;
            job->low[next++] = l;
        }
        for (int p = 0; p < parts; p++) {
            int32_t *fill = job->low_fill + (int64_t)p * lows + l;
            const int32_t count = *fill;
            *fill = (int32_t)running;
            running += count;
        }
    }
    for (; next <= parts; next++) {
        job->first[next] = running;
        job->low[next] = lows;
    }
    return 0;
}

/* The write-combined passes' buffers (1: ready); 0 where they cannot run: not on x86, lines
 * of the arrays not 64-byte aligned, or no memory (the plain passes need none).  With more
 * high buckets than fit L1 (keys of over 17 bits), pass 2 stays plain. */
static int combined_lines(sort_job *job, int threads) {
#if defined(SB_X86)
    const sb_bp_index *t = job->t;
    const int64_t lows = (int64_t)1 << job->low_bits, highs = ((t->cells - 1) >> job->low_bits) + 1;
    const uintptr_t any = (uintptr_t)job->records | (uintptr_t)t->xs | (uintptr_t)t->ys | (uintptr_t)t->ids;
    if (any & 63)
        return 0;
    job->combined_cells = highs <= ((int64_t)1 << BP_HIGH_BITS);
    const size_t records = (size_t)lows * (BP_BUFFER_RECORDS * sizeof(bp_record) + sizeof(int32_t));
    const size_t cells = job->combined_cells ? (size_t)highs * (sizeof(cell_lines) + sizeof(int32_t)) : 0;
    job->line_bytes = ((records > cells ? records : cells) + 63) & ~(size_t)63;
    char *block = bp_alloc((size_t)threads * job->line_bytes + 64);
    if (!block)
        return 0;
    job->lines_block = block;
    job->lines = (char *)(((uintptr_t)block + 63) & ~(uintptr_t)63);
    return 1;
#else
    (void)job, (void)threads;
    return 0;
#endif
}

int bp_index_sort(sb_bp_index *t, const float *px, const float *py, bp_key_fn key_of, int threads) {
    const int64_t cells = t->cells;
    sort_job job = {.t = t, .px = px, .py = py, .key_of = key_of};
    int key_bits = 0;
    while (((int64_t)1 << key_bits) < cells)
        key_bits++;
    job.low_bits = low_digit_bits(key_bits);
    job.key = bp_alloc((size_t)(t->m ? t->m : 1) * sizeof *job.key);
    job.hist = bp_alloc((size_t)threads * (size_t)part_stride(cells) * sizeof *job.hist);
    t->start = bp_alloc((size_t)(cells + 2) * sizeof *t->start);
    if (job.low_bits)
        job.low_fill = bp_calloc(((size_t)threads << job.low_bits) * sizeof *job.low_fill);
    if (!job.low_fill)
        job.low_bits = 0; /* the direct scatter, below, needs no more memory than the index */
    int failed = !job.key || !job.hist || !t->start;
    if (!failed)
        bp_parallel(threads, histogram_part, &job);
    if (!failed) {
        /* cell-major, part-minor: part p's points of cell c follow those of parts < p, whose
         * ids are smaller, so the order is the one-thread order whatever the thread count */
        int64_t running = 0;
        for (int64_t c = 0; c < cells; c++) {
            t->start[c] = (int32_t)running;
            for (int p = 0; p < threads; p++) {
                int32_t *h = job.hist + (int64_t)p * part_stride(cells) + c;
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
        failed = !t->xs || !t->ys || !t->ids;
    }
    if (!failed && job.low_bits && two_digit_plan(&job, threads)) {
        /* no room for the records (16 bytes a point): the direct scatter builds the same index
         * in the memory the index itself takes, only slower */
        bp_free(job.high_fill);
        bp_free(job.records);
        job.high_fill = NULL;
        job.records = NULL;
        job.low_bits = 0;
    }
    if (!failed && job.low_bits) {
        int trial = 0;
        const int combined = scatter_way(threads, t->kept, &trial) && combined_lines(&job, threads);
#if defined(SB_X86)
        const uint64_t before = __rdtsc();
        bp_parallel(threads, combined ? records_part_combined : records_part, &job);
        bp_parallel(threads, combined && job.combined_cells ? cells_part_combined : cells_part, &job);
        if (trial)
            scatter_timed(threads, combined, __rdtsc() - before, t->kept);
#else /* plain only: combined and trial are 0 */
        (void)combined;
        bp_parallel(threads, records_part, &job);
        bp_parallel(threads, cells_part, &job);
#endif
    } else if (!failed) {
        bp_parallel(threads, scatter_part, &job);
    }
    bp_free(job.key);
    bp_free(job.hist);
    bp_free(job.low_fill);
    bp_free(job.high_fill);
    bp_free(job.records);
    bp_free(job.lines_block);
    return failed ? -1 : 0;
}
