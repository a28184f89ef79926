/* The aabr family's C side: its data layout and its loop template.
 *
 * Question: for a convex polygon rotated about its centre by (a, c, s) — a float32 angle
 * in [0, 2pi), c = fl32(cos a), s = fl32(sin a); rotated vertex (c*x - s*y, s*x + c*y) —
 * which vertices are extreme along +x, +y, -x, -y?  Answer: int32[4] = (maxX, maxY,
 * minX, minY) vertex indices.  A scene is N polygons x M rotations.
 *
 * Data (sb_scene, filled by the worker from the family's declared arrays):
 *   shape[0]  "poly": float32 index of the polygon in each shape slot (a grid has
 *             poly[i] = i; verify's pairs point row j at any polygon);
 *   point[0..2] "angle", "c", "s": the rotations;
 *   extra[0]  "polygons": int32 [P, offset_0, n_0, offset_1, n_1, ...];
 *   extra[1], extra[2] "vx", "vy": float32 vertices, polygon p at offset_p (a multiple
 *             of 16), n_p vertices CCW about the centre, then copies of vertex 0 up to a
 *             multiple of 16 (at least one: x[n] == x[0]);
 *   prepared  the BCS of every polygon (aabr.c), for rows with .prepare.
 *
 * A kernel is a function
 *     static inline void k(const aabr_poly *p, float a, float c, float s,
 *                          int32_t *state, int32_t o[4]);
 * `state` is -1 at a polygon's first rotation and is the kernel's to keep between the
 * rotations of one polygon (bcs_coherent keeps its record there).  AABR_KERNEL
 * generates the row's loops: count (checksum = sum of the indices) inline and through a
 * pointer, their NoOperation twins, eval_grid and eval_pairs (int32[4] per test).
 */
#ifndef SB_AABR_H
#define SB_AABR_H

#include <float.h>

#include "sb_common.h"

typedef struct aabr_bcs aabr_bcs;

typedef struct {
    const float *x, *y;
    int32_t n;
    /* the polygon's BCS (NULL without a prepared index): R records, key[R+1] with
     * key[0] = 0 and key[R] = FLT_MAX, idx[4R] (maxX, maxY, minX, minY per record) */
    const float *key;
    const uint16_t *idx;
    int32_t R;
} aabr_poly;

/* The prepared index (aabr.c): per polygon its record count and offsets. */
struct aabr_bcs {
    int64_t bytes;   /* the records' memory: (R+1)*4 + R*8 bytes summed over polygons */
    int32_t P;
    int32_t *R;
    int64_t *koff, *ioff;
    float *key;
    uint16_t *idx;
};

void *aabr_bcs_prepare(const sb_scene *s);
void aabr_bcs_release(void *prepared);
int64_t aabr_bcs_bytes(const void *prepared);

static inline aabr_poly aabr_polygon(const sb_scene *s, int64_t slot) {
    const int32_t *info = (const int32_t *)s->extra[0];
    const int32_t p = (int32_t)s->shape[0][slot];
    aabr_poly q;
    q.x = (const float *)s->extra[1] + info[1 + 2 * p];
    q.y = (const float *)s->extra[2] + info[1 + 2 * p];
    q.n = info[2 + 2 * p];
    const aabr_bcs *b = (const aabr_bcs *)s->prepared;
    if (b) {
        q.key = b->key + b->koff[p];
        q.idx = b->idx + b->ioff[p];
        q.R = b->R[p];
    } else {
        q.key = NULL;
        q.idx = NULL;
        q.R = 0;
    }
    return q;
}

/* The NoOperation kernel: the same loads of the rotation, an answer that is always 0
 * (a + c > FLT_MAX holds for no rotation: |a + c| < 8), no work on the polygon. */
static inline void aabr_noop_(const aabr_poly *p, float a, float c, float s, int32_t *state,
                              int32_t o[4]) {
    (void)p, (void)s, (void)state;
    const int32_t v = (int32_t)(a + c > sb_opaque(FLT_MAX));
    o[0] = o[1] = o[2] = o[3] = v;
}

#define AABR_COUNT_LOOP(fname, ATTR, FN, LAUNDER)                               \
    ATTR __attribute__((unused)) static uint64_t fname(const sb_scene *s) {    \
        uint64_t sum = 0;                                                       \
        __typeof__(&FN) fn = FN;                                                \
        LAUNDER(fn);                                                            \
        const float *A = s->point[0], *C = s->point[1], *S = s->point[2];       \
        for (int64_t i = s->shape_begin; i < s->shape_end; i++) {               \
            const aabr_poly p = aabr_polygon(s, i);                             \
            int32_t state = -1, o[4];                                           \
            for (int64_t j = 0; j < s->n_points; j++) {                         \
                fn(&p, A[j], C[j], S[j], &state, o);                            \
                sum += (uint64_t)(uint32_t)(o[0] + o[1] + o[2] + o[3]);         \
            }                                                                   \
        }                                                                       \
        return sum;                                                             \
    }
#define AABR_NO_LAUNDER(fn) (void)(fn)

/* The loops of a kernel, for a row: ATTR is its target attribute (empty for scalar). */
#define AABR_KERNEL_LOOPS(kname, ATTR)                                          \
    AABR_COUNT_LOOP(kname##_count_inline, ATTR, kname, AABR_NO_LAUNDER)        \
    AABR_COUNT_LOOP(kname##_count_call, ATTR, kname, SB_LAUNDER)               \
    AABR_COUNT_LOOP(kname##_noop_inline, ATTR, aabr_noop_, AABR_NO_LAUNDER)    \
    AABR_COUNT_LOOP(kname##_noop_call, ATTR, aabr_noop_, SB_LAUNDER)           \
    ATTR __attribute__((unused)) static void kname##_eval_grid(const sb_scene *s, void *out_) { \
        int32_t *const out = out_;                                              \
        const float *A = s->point[0], *C = s->point[1], *S = s->point[2];       \
        for (int64_t i = s->shape_begin; i < s->shape_end; i++) {               \
            const aabr_poly p = aabr_polygon(s, i);                             \
            int32_t state = -1;                                                 \
            for (int64_t j = 0; j < s->n_points; j++)                           \
                kname(&p, A[j], C[j], S[j], &state, out + 4 * (i * s->stride + j)); \
        }                                                                       \
    }                                                                           \
    /* row j: polygon poly[j] at rotation j; the state carries over between rows of \
     * the same polygon (a coherent kernel's answer must not depend on it) */    \
    ATTR __attribute__((unused)) static void kname##_eval_pairs(const sb_scene *s, void *out_) { \
        int32_t *const out = out_;                                              \
        const float *A = s->point[0], *C = s->point[1], *S = s->point[2];       \
        int32_t state = -1;                                                     \
        float previous = -1.0f;                                                 \
        for (int64_t j = 0; j < s->n_points; j++) {                             \
            const aabr_poly p = aabr_polygon(s, j);                             \
            if (s->shape[0][j] != previous)                                     \
                state = -1;                                                     \
            previous = s->shape[0][j];                                          \
            kname(&p, A[j], C[j], S[j], &state, out + 4 * j);                   \
        }                                                                       \
    }

#define AABR_ROW_FIELDS(kname, FEATURES, LOOP)                                  \
    .name = #kname, .family = "aabr", .takes = "(poly)", .isa = FEATURES,       \
    .loop = LOOP, .lanes = 1, .block = 1, .source = __FILE__, .line = __LINE__, \
    .count_inline = kname##_count_inline, .count_call = kname##_count_call,     \
    .noop_inline = kname##_noop_inline, .noop_call = kname##_noop_call,         \
    .eval_grid = kname##_eval_grid, .eval_pairs = kname##_eval_pairs

/* A kernel row of the aabr family: AABR_KERNEL(name, ATTR, "features", "loop", fields).
 * A kernel reading the BCS adds .prepare = aabr_bcs_prepare, .release =
 * aabr_bcs_release, .prepared_bytes = aabr_bcs_bytes. */
#define AABR_KERNEL(kname, ATTR, FEATURES, LOOP, ...)                           \
    AABR_KERNEL_LOOPS(kname, ATTR)                                              \
    static const sb_kernel kname##_row = {AABR_ROW_FIELDS(kname, FEATURES, LOOP), __VA_ARGS__}; \
    SB_REGISTER(kname##_row)

#endif
