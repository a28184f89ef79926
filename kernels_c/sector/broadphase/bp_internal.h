/* The sector broadphase's private header: what its files share (not part of the cffi interface,
 * which is ../abi.h).  The broadphase answers "which points lie in which sectors" without testing
 * all N x M pairs; its files, by job:
 *
 *   box.c           the sector's box: every point the float32 kernel accepts lies in it
 *   narrow.c        the narrow phase per ISA (the brute-force kernels' own predicate)
 *   alloc.c         large buffers: huge pages where the kernel gives them, kept for the next call
 *   parallel.c      running one job on T threads (the caller is thread 0)
 *   sort.c          one sector's hits into ascending order
 *   index.c         the point index: bounds, the counting sort of points by cell, threads
 *   index_grid.c    the uniform grid: keys, the runs a box touches
 *   index_morton.c  the Morton (Z-order) table: keys, bit tricks, the runs a box touches
 *   query.c         per sector: box, runs, narrow phase, sort; CSR out; threads; brute force
 *
 * First written as a prototype by a colleague (its report measured 77-96x over brute force on
 * game 20k x 200k with identical hits); the box rule and the quantisation are its, unchanged. */
#ifndef SB_BP_INTERNAL_H
#define SB_BP_INTERNAL_H

#include <float.h>
#include <stdlib.h>

#include "sb_common.h"
#include "../nosqrt.h"
#include "../abi.h"

/* ---- float32 classified on the bits, not with isnan/isinf: a -ffast-math build may assume no
 * NaN or infinity in floating-point tests (clang warns that they are undefined there). */
static inline uint32_t bp_bits32(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}
static inline int bp_finite32(float f) { return (bp_bits32(f) & 0x7f800000u) != 0x7f800000u; }
static inline int bp_nan32(float f) { return (bp_bits32(f) & 0x7fffffffu) > 0x7f800000u; }
#define SB_BP_INF32 0x7f800000u

/* ---- box.c: the box (xmin, xmax, ymin, ymax) of the sector's float32 kernel; 0 when it accepts no point */
int bp_sector_box(float cx, float cy, float ux, float uy, float r2, float k, double *b);

/* ---- narrow.c: points [a, b) of (xs, ys); hit j writes ids ? ids[j] : j to out (room for
 * b - a + 16).  q = cx, cy, ux, uy, r2, cos_theta.  Returns the hits written. */
typedef int64_t (*bp_run_fn)(const float *xs, const float *ys, const int32_t *ids, int64_t a, int64_t b,
                             const float *q, int32_t *out);
bp_run_fn bp_pick_run(int isa);
/* Whether the caller allows BMI2's pdep (sb_bp_allow). */
int bp_bmi2_allowed(void);
/* AVX2's compress: bp_compress_lanes[mask] packs the lanes of mask's set bits, 3 bits each,
 * lowest first (fill it once with bp_compress_init before use). */
extern uint32_t bp_compress_lanes[256];
void bp_compress_init(void);

/* ---- alloc.c: blocks for the index and the hits.  Large ones come from a small pool of freed
 * blocks when one fits (fresh pages cost a fault each: ~2 us per 4 KiB page on this kind of VM,
 * more than the work on them), else new, asking for huge pages.  bp_free takes any of them. */
void *bp_alloc(size_t bytes);
void *bp_calloc(size_t bytes);
void bp_free(void *p);

/* ---- parallel.c: job(arg, part, parts) for part = 0 .. parts - 1, part 0 on the calling thread.
 * Returns 0, or -1 when a thread could not be started (then every part ran on the caller). */
typedef void (*bp_job)(void *arg, int part, int parts);
/* Threads at most (the entry points clamp to it; more would only add idle threads on any machine
 * this runs on, and fixed arrays of this size live on the stack). */
#define BP_MAX_PARTS 64
int bp_parallel(int parts, bp_job job, void *arg);
/* bp_hold(parts, 1) before a call's first phase on `parts` threads, bp_hold(parts, 0) after its
 * last: meanwhile the kept threads wait for the next phase spinning (up to ~1 ms), not asleep.
 * Nothing on one part. */
void bp_hold(int parts, int on);
/* [0, n) in `parts` contiguous shares, as model/split.py's shape_ranges cuts them. */
static inline int64_t bp_share(int64_t n, int part, int parts) { return n * part / parts; }

/* ---- sort.c: from[0 .. n) into to[0 .. n) ascending (ids of one sector: distinct; `to` the same
 * place as `from` or apart from it).  0, or -1 out of memory. */
typedef struct bp_scratch {
    int32_t *tmp, *cnt;
    int64_t cap;
} bp_scratch;
/* simd: 3 the AVX-512 sort, 2 the AVX2 one, else the portable bucket sort. */
int bp_sort_hits(const int32_t *from, int32_t *to, int64_t n, bp_scratch *sc, int simd);
void bp_scratch_free(bp_scratch *sc);

/* ---- index.c */
enum { BP_KIND_GRID = 1, BP_KIND_MORTON = 2 };

struct sb_bp_index {
    int kind;
    int q;              /* morton: bits per axis */
    int pdep;           /* morton: codes by BMI2 pdep */
    int64_t m, kept;    /* points, finite points (the others are never inside) */
    int64_t nx, ny;     /* grid: cells per axis */
    float x0, y0;       /* cell of v: bp_cell_of(v, origin, inv_x or inv_y, cells on the axis) */
    float inv_x, inv_y; /* 1 / the cell's width, height (the same for the Morton table) */
    int64_t cells;
    float *xs, *ys;     /* the finite points, sorted by cell (stable: ids ascend within a cell) */
    int32_t *ids;
    int32_t *start;     /* cells + 1: start[c] = first point of cell c (row-major or Z order) */
};

/* The cell of v on an axis of n cells (n <= 2^24: n - 1 is exact), in float32 arithmetic so
 * that the grid bins 16 points per AVX-512 subtraction, product and conversion (in double,
 * four at a time, the keys were a fifth of the index build).  Monotone non-decreasing in v (a
 * rounded subtraction, a rounded product by inv > 0, truncation and clamping all are), so a
 * point inside [lo, hi] lands in a cell within [cell(lo), cell(hi)]: no epsilon at cell
 * borders, the same function bins the points and the boxes (their edges first through
 * bp_to32). */
static inline int64_t bp_cell_of(float v, float o, float inv, int64_t n) {
    const float t = (v - o) * inv;
    if (!(t >= 0.0f))
        return 0; /* also -inf */
    if (t >= (float)(n - 1))
        return n - 1;
    return (int64_t)t;
}

/* 1 / the cell side as the index keeps it (beyond float32's range, its largest value). */
static inline float bp_inverse32(double inv) { return inv < FLT_MAX ? (float)inv : FLT_MAX; }

/* A box edge as float32: a float32 point p >= lo is >= both float32 neighbours of lo that the
 * conversion may round to (p >= lo means p >= the smallest float32 >= lo), so p inside [lo, hi]
 * lies inside [bp_to32(lo), bp_to32(hi)] and, by monotony, in the cells between theirs.  Beyond
 * float32's range, the largest finite one: no finite point lies further out. */
static inline float bp_to32(double v) {
    return v <= -FLT_MAX ? -FLT_MAX : v >= FLT_MAX ? FLT_MAX : (float)v;
}

/* Keys of points [begin, end): key[j] = the cell of point j, UINT32_MAX if it is not finite. */
typedef void (*bp_key_fn)(const sb_bp_index *t, const float *px, const float *py, int64_t begin, int64_t end,
                          uint32_t *key);
/* Fills t->xs, ys, ids, start, kept: a stable counting sort of the points by key on `threads`
 * threads (per-thread histograms over point shares, one prefix sum, a parallel scatter), the
 * same index for every thread count.  t->cells and the key's fields must be set.  0 or -1. */
int bp_index_sort(sb_bp_index *t, const float *px, const float *py, bp_key_fn key_of, int threads);
/* (xmin, xmax, ymin, ymax) of the finite points, on `threads` threads; *finite: their number. */
void bp_point_bounds(const float *px, const float *py, int64_t m, int threads, double *b, int64_t *finite);

/* A grid box's cells: columns g[0] .. g[1], rows g[2] .. g[3]; row gy's run of points is
 * [start[gy nx + g[0]], start[gy nx + g[1] + 1]). */
void bp_grid_box_cells(const sb_bp_index *t, const double *box, int64_t *g);
/* A Morton box's runs (at most 4, ascending, touching ones merged): [a[i], b[i]).  Returns their number. */
int bp_morton_runs(const sb_bp_index *t, const double *box, int64_t *a, int64_t *b);

#endif
