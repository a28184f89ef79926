/* The sector family's C interface beyond the kernel table: the broadphase.
 *
 * cffi's cdef() reads this file verbatim after harness/sb_abi.h (declarations only, no
 * preprocessor lines); broadphase.c includes it. */

/* ---- The sector broadphase (kernels_c/sector/broadphase/; Python: families/sector/broadphase.py). */

/* Sectors as the narrow phase reads them (the float32 columns of the sector family). */
typedef struct sb_bp_sectors {
    int64_t n;
    const float *cx, *cy, *ux, *uy, *r2, *cos_theta;
} sb_bp_sectors;

/* CSR hits of `n` sectors: sector i's points are indices[offsets[i] : offsets[i + 1]], ascending.
 * Both arrays are malloc'd by the query; release them with sb_bp_free (or sb_bp_hits_free). */
typedef struct sb_bp_hits {
    int64_t n;
    int64_t *offsets;       /* n + 1 */
    int32_t *indices;
    int64_t nhits, cap;
    int64_t candidates;     /* pairs the narrow phase tested */
    int64_t runs;           /* contiguous runs of points fed to it */
} sb_bp_hits;

/* A point index: a uniform grid (row-major cells) or a Morton (Z-order) table. */
typedef struct sb_bp_index sb_bp_index;

/* cell: the side of the square whose area a cell has (raised to about one point per cell; a cell
 * is twice as tall and half as wide); threads: the build's threads (the index is the same for
 * every count); NULL when out of memory. */
sb_bp_index *sb_bp_grid_build(const float *px, const float *py, int64_t m, double cell, int threads);
/* cell: the finest cell's wanted side; pdep: -1 where the CPU's is fast, 0 never, 1 if it has BMI2. */
sb_bp_index *sb_bp_morton_build(const float *px, const float *py, int64_t m, double cell, int pdep, int threads);
/* The same builds, the index also stored in *into before they return.  Python raises a Ctrl-C
 * that came during a build as soon as the call returns, before a returned pointer is held by
 * anything that frees it (each such interrupt lost the index, 12 bytes a point); *into is memory
 * the caller owns, with a finalizer, before the call. */
sb_bp_index *sb_bp_grid_build_into(const float *px, const float *py, int64_t m, double cell, int threads,
                                   sb_bp_index **into);
sb_bp_index *sb_bp_morton_build_into(const float *px, const float *py, int64_t m, double cell, int pdep,
                                     int threads, sb_bp_index **into);
/* Bits per axis of a Morton index (0 for a grid). */
int sb_bp_index_qbits(const sb_bp_index *index);
void sb_bp_index_free(sb_bp_index *index);
int64_t sb_bp_index_cells(const sb_bp_index *index);
/* The points it holds: those with both coordinates finite (the others are never inside). */
int64_t sb_bp_index_kept(const sb_bp_index *index);
/* Hits of sectors [begin, end) on `threads` C threads (the same CSR for every count); isa 0 = the
 * best here, 3 AVX-512, 2 AVX2, 1 SSE2.  max_candidates > 0: when the sectors' boxes touch more
 * candidates than that (an upper bound on their hits, the size of the buffers the answer needs),
 * return -3 before those buffers are allocated (cut the sectors with sb_bp_bounds and ask again).
 * Returns 0, -1 (isa not supported here), -2 (out of memory) or -3. */
int sb_bp_query(const sb_bp_index *index, const sb_bp_sectors *s, int64_t begin, int64_t end, int isa,
                int threads, int64_t max_candidates, sb_bp_hits *out);
/* Per sector of [begin, end), the candidates its box touches in the index (an upper bound on its
 * hits) into bound[i - begin]; returns their sum.  What sb_bp_query's first pass computes, so a
 * caller can cut the sectors into chunks whose answer fits its memory before any is allocated. */
int64_t sb_bp_bounds(const sb_bp_index *index, const sb_bp_sectors *s, int64_t begin, int64_t end, int64_t *bound);
/* The same narrow phase and output over all M points (no index). */
int sb_bp_none(const float *px, const float *py, int64_t m, const sb_bp_sectors *s, int64_t begin, int64_t end,
               int isa, int threads, sb_bp_hits *out);
/* The box of sector i (xmin, xmax, ymin, ymax): it holds every point the kernel accepts; 0 if none. */
int sb_bp_box(const sb_bp_sectors *s, int64_t i, double *out4);
/* What the broadphase may use, for the whole process: narrow phases up to `isa` (3 AVX-512,
 * 2 AVX2, 1 SSE2, 0 scalar; the sort, keys and bounds follow), pdep if `bmi2`.  Default 3, 1. */
void sb_bp_allow(int isa, int bmi2);
int sb_bp_isa_supported(int isa);
int sb_bp_best_isa(void);
int sb_bp_fast_pdep(void);
int64_t sb_bp_selftest_bits(int64_t count);
int sb_bp_selftest_sort(int simd, int64_t n, uint64_t seed);
int64_t sb_bp_selftest_grid(const float *px, const float *py, int64_t m, double cell, const double *boxes, int64_t n,
                            int64_t *pairs);
void sb_bp_hits_free(sb_bp_hits *hits);
void sb_bp_free(void *p);
/* How this process's index builds of `points` finite points on `threads` threads now write them
 * (builds of over 2^18 points measure each way on their first few; smaller ones store plain;
 * the index is the same either way): 0 not chosen yet, 1 plain stores, 2 write-combined lines.
 * threads is clamped as the builds clamp it. */
int sb_bp_scatter_way(int threads, int64_t points);
/* The builds on `threads` threads that timed a way so far (they stop once one is chosen). */
int sb_bp_scatter_trials(int threads);
/* From now on, every build scatters plain (1) or write-combined (2; plain where it cannot: not
 * on x86); 0 goes back to measuring.  For tests and A/B timings (tools/broadphase_phases.c). */
void sb_bp_scatter_force(int way);
/* Who runs the parts of a phase on several threads, from now on: 0 whoever claims each first
 * (the caller runs those no kept thread has started), 1 the caller one and the pool's kept
 * threads the others, 2 the caller all.  The answer is the same every way.  For tests. */
void sb_bp_parts_way(int way);
/* Gives back the freed index and hit buffers kept for the next call; returns their bytes. */
int64_t sb_bp_pool_release(void);
/* The floor: reads px, py once and writes nout int32 to out (a streaming loop); returns a checksum. */
uint32_t sb_bp_stream(const float *px, const float *py, int64_t m, int32_t *out, int64_t nout);
