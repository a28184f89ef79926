/* The broadphase's two phases timed from C, without Python: index build and query of a game
 * scene dumped by tools/dump_scene.py, wall and thread CPU time (median and min of R repetitions),
 * with a hash of the CSR so two builds (or two commits) can be checked for identical hits.
 *
 *   python tools/dump_scene.py /tmp/scene 10000 1000000       # game, seed 1
 *   cc -O2 -Ikernels_c/harness kernels_c/sector/broadphase/\*.c tools/broadphase_phases.c -o /tmp/phases -lm
 *   /tmp/phases /tmp/scene 21 1     # R repetitions, threads
 *   /tmp/phases /tmp/scene 21 1 combined    # the index's scatter forced: plain or combined
 *                                           # (by default it times both on its first builds)
 *
 * Built with -DSB_BP_OLD_API against the single-file broadphase of commit bfae5fd (no thread
 * arguments) it times that one the same way:
 *
 *   mkdir /tmp/old && for f in broadphase.c abi.h nosqrt.h; do
 *       git show bfae5fd:kernels_c/sector/$f > /tmp/old/$f; done
 *   cc -O2 -DSB_BP_OLD_API -Ikernels_c/harness /tmp/old/broadphase.c tools/broadphase_phases.c -o /tmp/phases_old -lm */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct sb_bp_sectors {
    int64_t n;
    const float *cx, *cy, *ux, *uy, *r2, *cos_theta;
} sb_bp_sectors;
typedef struct sb_bp_hits {
    int64_t n;
    int64_t *offsets;
    int32_t *indices;
    int64_t nhits, cap, candidates, runs;
} sb_bp_hits;
typedef struct sb_bp_index sb_bp_index;
void sb_bp_index_free(sb_bp_index *);
void sb_bp_hits_free(sb_bp_hits *);
#if defined(SB_BP_OLD_API)
sb_bp_index *sb_bp_grid_build(const float *px, const float *py, int64_t m, double cell);
int sb_bp_query(const sb_bp_index *, const sb_bp_sectors *, int64_t begin, int64_t end, int isa, sb_bp_hits *out);
#define BUILD(px, py, m, cell, threads) sb_bp_grid_build(px, py, m, cell)
#define QUERY(t, s, n, threads, out) sb_bp_query(t, s, 0, n, 0, out)
#else
sb_bp_index *sb_bp_grid_build(const float *px, const float *py, int64_t m, double cell, int threads);
int sb_bp_query(const sb_bp_index *, const sb_bp_sectors *, int64_t begin, int64_t end, int isa, int threads,
                int64_t max_candidates, sb_bp_hits *out);
#define BUILD(px, py, m, cell, threads) sb_bp_grid_build(px, py, m, cell, threads)
#define QUERY(t, s, n, threads, out) sb_bp_query(t, s, 0, n, 0, threads, 0, out)
#endif
/* weak: trees before the scatter's two ways lack them */
__attribute__((weak)) void sb_bp_scatter_force(int way);
__attribute__((weak)) int sb_bp_scatter_way(int threads, int64_t points);

static float *load(const char *dir, const char *name, int64_t *count) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.f32", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    *count = ftell(f) / 4;
    fseek(f, 0, SEEK_SET);
    float *a = aligned_alloc(64, (size_t)(*count * 4 + 127) / 64 * 64);
    if (fread(a, 4, (size_t)*count, f) != (size_t)*count)
        exit(2);
    fclose(f);
    return a;
}

static double now(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s SCENE_DIR [REPETITIONS] [THREADS]\n", argv[0]);
        return 2;
    }
    const int reps = argc > 2 ? atoi(argv[2]) : 21, threads = argc > 3 ? atoi(argv[3]) : 1;
    if (argc > 4) {
        const int way = !strcmp(argv[4], "plain") ? 1 : !strcmp(argv[4], "combined") ? 2 : 0;
        if (!way || !sb_bp_scatter_force) {
            fprintf(stderr, "%s: the scatter is plain or combined, in a tree that has both\n", argv[4]);
            return 2;
        }
        sb_bp_scatter_force(way);
    }
    int64_t n, m, unused;
    sb_bp_sectors s = {0};
    s.cx = load(argv[1], "cx", &n);
    s.cy = load(argv[1], "cy", &unused);
    s.ux = load(argv[1], "ux", &unused);
    s.uy = load(argv[1], "uy", &unused);
    s.r2 = load(argv[1], "r2", &unused);
    s.cos_theta = load(argv[1], "cos_theta", &unused);
    s.n = n;
    const float *px = load(argv[1], "px", &m), *py = load(argv[1], "py", &unused);
    /* the Python side's cell: CELL_PER_RADIUS (0.5) x the median radius */
    double *r = malloc((size_t)n * sizeof *r);
    for (int64_t i = 0; i < n; i++)
        r[i] = sqrt((double)s.r2[i]);
    qsort(r, (size_t)n, sizeof *r, by_value);
    const double cell = 0.5 * (n % 2 ? r[n / 2] : 0.5 * (r[n / 2 - 1] + r[n / 2]));
    double *t[4];
    for (int k = 0; k < 4; k++)
        t[k] = malloc((size_t)reps * sizeof(double));
    uint64_t hash = 0;
    int64_t hits = 0, candidates = 0, runs = 0;
    for (int k = 0; k < reps; k++) {
        const double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
        sb_bp_index *index = BUILD(px, py, m, cell, threads);
        const double w1 = now(CLOCK_MONOTONIC), c1 = now(CLOCK_THREAD_CPUTIME_ID);
        sb_bp_hits h;
        if (!index || QUERY(index, &s, n, threads, &h)) {
            fprintf(stderr, "the broadphase failed\n");
            return 2;
        }
        const double w2 = now(CLOCK_MONOTONIC), c2 = now(CLOCK_THREAD_CPUTIME_ID);
        t[0][k] = w1 - w0, t[1][k] = c1 - c0, t[2][k] = w2 - w1, t[3][k] = c2 - c1;
        /* FNV-1a over the CSR, every repetition: the index's scatter changes way after its
         * first builds (index.c), and every way must give the same hits */
        uint64_t csr = 1469598103934665603ull;
        for (int64_t i = 0; i <= n; i++)
            csr = (csr ^ (uint64_t)h.offsets[i]) * 1099511628211ull;
        for (int64_t i = 0; i < h.nhits; i++)
            csr = (csr ^ (uint32_t)h.indices[i]) * 1099511628211ull;
        if (k == 0) {
            hash = csr;
            hits = h.nhits, candidates = h.candidates, runs = h.runs;
        } else if (csr != hash) {
            fprintf(stderr, "repetition %d: the hits differ from the first's\n", k);
            return 1;
        }
        sb_bp_hits_free(&h);
        sb_bp_index_free(index);
    }
    for (int k = 0; k < 4; k++)
        qsort(t[k], (size_t)reps, sizeof(double), by_value);
    printf("build: wall %.2f ms (min %.2f), cpu of the calling thread %.2f ms | query: wall %.2f ms (min %.2f), "
           "cpu %.2f ms | %lld hits, %lld candidates in %lld runs, csr hash %016llx\n",
           t[0][reps / 2] * 1e3, t[0][0] * 1e3, t[1][reps / 2] * 1e3, t[2][reps / 2] * 1e3, t[2][0] * 1e3,
           t[3][reps / 2] * 1e3, (long long)hits, (long long)candidates, (long long)runs, (unsigned long long)hash);
    if (sb_bp_scatter_way) {
        const char *ways[] = {"not chosen yet", "plain", "combined"};
        printf("scatter: %s\n", ways[sb_bp_scatter_way(threads, m)]);
    }
    return 0;
}
