/* sectorbench ABI: everything Python sees of the kernels.
 *
 * cffi's cdef() reads this file verbatim, so it holds declarations only: no
 * preprocessor lines, no inline code.  C sources include it through sb_common.h.
 *
 * Arrays are structure-of-arrays float32, 64-byte aligned, allocated to `stride`
 * elements (n_points rounded up to a multiple of 16 floats, the widest vector), so
 * SIMD loops may load whole vectors past n_points; they mask those lanes out.
 */

typedef struct sb_sectors {
    const float *cx, *cy;         /* apex c */
    const float *ux, *uy;         /* direction u (unit length in well-formed scenes) */
    const float *r, *theta;       /* radius and half-angle, for kernels that take them */
    const float *r2, *cos_theta;  /* precomputed r*r and cos(theta), rounded to float32 */
} sb_sectors;

typedef struct sb_triangles {
    const float *ax, *ay, *bx, *by, *cx, *cy;
} sb_triangles;

typedef struct sb_scene {
    int64_t n_shapes;   /* N: sectors or triangles */
    int64_t n_points;   /* M */
    int64_t stride;     /* allocated length of every array; row stride of eval_grid's output */
    const float *px, *py;
    sb_sectors sector;
    sb_triangles triangle;
} sb_scene;

/* Kernel flags. */
enum {
    SB_NOOP = 1,         /* a NoOperation kernel: the loop overhead of others */
    SB_NOT_DEFAULT = 2   /* known-bad reference: listed, never selected by default */
};

typedef struct sb_kernel {
    const char *name;
    const char *family;       /* "sector" or "triangle" */
    const char *isa;          /* comma-separated CPU features it needs, "" for none */
    const char *overhead;     /* the NoOperation kernel with the same loop shape */
    const char *params;       /* sector kernels: "r,theta" or "r2,cos_theta" */
    const char *summary;
    const char *source;       /* file and line of the row, which also give the listing order */
    int line;
    int lanes;                /* points tested per step */
    int flags;
    double rounding_bound;    /* verify: mismatches within this many float32 roundings are rounding-band */
    double tolerance;         /* triangle: declared tolerance of a tolerant kernel, 0 for strict */
    /* Hits over all n_shapes x n_points pairs, predicate inlined in the loop. */
    uint64_t (*count_inline)(const sb_scene *scene);
    /* The same, the predicate called through a function pointer for every step. */
    uint64_t (*count_call)(const sb_scene *scene);
    /* out[i * stride + j] = 1 if point j is inside shape i, else 0. */
    void (*eval_grid)(const sb_scene *scene, uint8_t *out);
    /* out[j] = 1 if point j is inside shape j (shape arrays hold `stride` shapes). */
    void (*eval_pairs)(const sb_scene *scene, uint8_t *out);
} sb_kernel;

/* Every kernel row linked into this library, in link order. */
const sb_kernel *const *sb_kernel_table(size_t *count);

/* 1 if the running CPU has every feature of a comma-separated list, else 0. */
int sb_cpu_supports(const char *features);

/* Runs `iterations` dependent integer additions (about one cycle each) to measure the clock. */
uint64_t sb_dependent_adds(uint64_t iterations);
