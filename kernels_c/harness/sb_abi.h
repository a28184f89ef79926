/* sectorbench ABI: everything Python sees of the kernels.
 *
 * cffi's cdef() reads this file verbatim, so it holds declarations only: no
 * preprocessor lines, no inline code.  C sources include it through sb_common.h.
 *
 * The ABI names no family.  A scene is N shapes x M points; a family (sector,
 * triangle, ...) says which arrays a shape and a point have, and each kernel row
 * says which of the shape arrays it reads (`takes`), in the order the worker puts
 * them in `shape[]`.  Arrays are float32, 64-byte aligned, allocated to `stride`
 * elements (rounded up to a multiple of 16 floats, the widest vector), so SIMD loops
 * may load whole vectors past the end; they mask those lanes out.
 */

typedef struct sb_scene {
    int64_t n_shapes;          /* N */
    int64_t n_points;          /* M */
    int64_t stride;            /* allocated length of the point arrays; row stride of eval_grid's output */
    int64_t shape_begin;       /* the loops test shapes [shape_begin, shape_end): threads split [0, N) */
    int64_t shape_end;
    const float *point[4];     /* the family's point arrays (e.g. px, py), in the family's order */
    const float *shape[8];     /* the kernel's shape arrays, in the order of its row's `takes` */
    const void *extra[4];      /* family data of other lengths or types (e.g. polygon vertices), or NULL */
    const void *prepared;      /* what the row's prepare() built for this scene, or NULL */
    float never;               /* +inf: NoOperation loops test px + py > never, which no input satisfies */
} sb_scene;

/* One kernel: a row with named fields (see SB_*_KERNEL in sb_common.h). */
typedef struct sb_kernel {
    const char *name;
    const char *family;        /* the family it belongs to (a name the Python registry knows) */
    const char *takes;         /* the shape arrays it reads, as a C tuple: "(cx, cy, ux, uy, r2, cos_theta)" */
    const char *isa;           /* comma-separated CPU features it needs, "" for none */
    const char *loop;          /* loop shape, e.g. "scalar", "sse2 x4", "avx512 x16 b4": kernels with the
                                  same loop shape and arity share one NoOperation measurement */
    const char *summary;
    const char *contract;      /* preconditions beyond the family's, e.g. "unit u": verify judges the
                                  kernel only on rows that meet them (the family says what they mean) */
    const char *source;        /* file and line of the row, which also give the listing order */
    int line;
    int lanes;                 /* points tested per step */
    int block;                 /* shapes tested per load of points */
    int known_bad;             /* 1: a known-bad reference, run only when named */
    double rounding_bound;     /* verify: mismatches within this many float32 roundings are rounding-band (0: default) */
    double tolerance;          /* declared tolerance of a tolerant kernel, 0 for strict */
    /* Answer summary over the scene's tests (hits, for a boolean family), predicate inlined in the loop. */
    uint64_t (*count_inline)(const sb_scene *scene);
    /* The same, the predicate called through a function pointer for every step. */
    uint64_t (*count_call)(const sb_scene *scene);
    /* The NoOperation twins of the two loops: same loop, same loads, an answer that never holds. */
    uint64_t (*noop_inline)(const sb_scene *scene);
    uint64_t (*noop_call)(const sb_scene *scene);
    /* Answers of every shape i against every point j, at out[i * stride + j] (the family's answer type). */
    void (*eval_grid)(const sb_scene *scene, void *out);
    /* Answers of shape j against point j (shape arrays hold `stride` shapes), at out[j]. */
    void (*eval_pairs)(const sb_scene *scene, void *out);
    /* Optional: an index built once per scene before timing (its time is reported apart), and its release. */
    void *(*prepare)(const sb_scene *scene);
    void (*release)(void *prepared);
    /* Optional: the memory of what prepare() built, in bytes (reported with its build time). */
    int64_t (*prepared_bytes)(const void *prepared);
} sb_kernel;

/* Every kernel row linked into this library, in link order. */
const sb_kernel *const *sb_kernel_table(size_t *count);

/* 1 if the running CPU has every feature of a comma-separated list, else 0. */
int sb_cpu_supports(const char *features);

/* The features sb_cpu_supports knows, each followed by a comma ("" off x86). */
const char *sb_cpu_features(void);

/* verify: each row i of a pairs scene (shape i against point i) as a scene of its own,
 * `shapes` copies of shape i (at most 9: a blocked loop's whole block and a shape left over)
 * against `copies` copies of point i (at most 64: whole vectors and a tail), counted twice by
 * the row's count loop (count_call if `call`, else count_inline): out[i] the count, or -1 where
 * the two calls differ.  0, or EINVAL (shapes or copies out of range) or ENOSYS (no such
 * loop).  So a count loop, its blocked body included, is judged on the cases' boundary points
 * as eval_pairs is.  (This header is cffi's declarations too, which take no preprocessor
 * lines: the limits, 9 and 64, are registry.c's SB_COUNT_ROWS_SHAPES_MAX and SB_COUNT_ROWS_MAX.) */
int sb_count_rows(const sb_kernel *row, int call, const sb_scene *pairs, int64_t shapes, int64_t copies,
                  int64_t *out);

/* Runs `iterations` dependent 32-bit integer multiplications (three cycles each on every x86-64
 * core since Nehalem and Zen) to measure the clock; `iterations` a multiple of 8. */
uint32_t sb_dependent_multiplies(uint64_t iterations);

/* Hardware counters of the calling thread (Linux perf_event_open): 0 when the cycles and
 * instructions counters are open, else the errno that refused them. */
int sb_counters_open(void);
/* Their running totals. */
void sb_counters_read(uint64_t *cycles, uint64_t *instructions);

/* The floating-point environment of the calling thread: the worker records the build's at
 * load, restores it before every kernel's samples and every verify batch, and compares it
 * after, so a kernel that changes it (fesetround, FTZ) is named and affects no other.
 * Fields are portable codes, filled by sb_fpenv_save; `saved` is the C fenv_t, opaque. */
typedef struct sb_fpenv {
    int rounding;              /* 0 to nearest, 1 downward, 2 upward, 3 toward zero, -1 unknown */
    int traps;                 /* enabled exception traps: 1 invalid, 2 divide-by-zero, 4 overflow,
                                  8 underflow, 16 inexact */
    int flush_to_zero;         /* MXCSR.FTZ (x86; 0 elsewhere) */
    int denormals_are_zero;    /* MXCSR.DAZ (x86; 0 elsewhere) */
    unsigned int mxcsr;        /* MXCSR with its sticky exception flags cleared (x86; 0 elsewhere) */
    unsigned char saved[128];  /* the C fenv_t */
} sb_fpenv;

/* The calling thread's environment into *env. */
void sb_fpenv_save(sb_fpenv *env);
/* Make the calling thread's environment *env (sticky exception flags cleared). */
void sb_fpenv_restore(const sb_fpenv *env);
/* 1 if the calling thread's environment differs from *env in what a kernel's answers depend
 * on (rounding, traps, MXCSR control bits), else 0; sticky exception flags never count. */
int sb_fpenv_changed(const sb_fpenv *env);

/* A family's own C interface (e.g. the sector broadphase) is declared in its folder's abi.h,
 * which cdef() reads after this file (build.cdef_source). */
