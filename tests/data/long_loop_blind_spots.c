/* Test-only: count loops wrong only on scenes longer than verify's loop-check scenes (at most
 * 64 shapes and 4 096 points), each found by a probe: they passed verify while `run`'s default
 * 1 000 x 100 000 counted wrong.  Their predicates and evaluation loops are right. */
#include "sb_common.h"

static inline int long_basic(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s < r2 && dx * ux + dy * uy > sqrtf(s) * k;
}
#define LONG_TAKES (cx, cy, ux, uy, r2, cos_theta)
#define LONG_ROW(kname, text)                                                                           \
    static const sb_kernel kname##_row = {SB_ROW_FIELDS(kname, SCALAR, 1, LONG_TAKES),                  \
                                          .family = "sector",                                          \
                                          .known_bad = 1,                                              \
                                          .summary = text,                                             \
                                          .count_inline = kname##_long_count,                          \
                                          .count_call = kname##_long_count,                            \
                                          .noop_inline = kname##_noop_inline,                          \
                                          .noop_call = kname##_noop_call,                              \
                                          .eval_grid = kname##_eval_grid,                              \
                                          .eval_pairs = kname##_eval_pairs};                           \
    SB_REGISTER(kname##_row)
#define LONG_SHAPE(kname, q, x, y)                                                                     \
    kname(s->shape[0][q], s->shape[1][q], s->shape[2][q], s->shape[3][q], s->shape[4][q], s->shape[5][q], x, y)

/* Points in tiles of up to 8 192 (one tile when fewer): the partial last tile is dropped. */
static inline int tile_drop(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    return long_basic(cx, cy, ux, uy, r2, k, px, py);
}
SB_KERNEL_LOOPS(tile_drop, SCALAR, 1, LONG_TAKES)
static uint64_t tile_drop_long_count(const sb_scene *s) {
    uint64_t hits = 0;
    const int64_t tile = s->n_points < 8192 ? s->n_points : 8192;
    for (int64_t t = 0; t + tile <= s->n_points; t += tile) /* the bug: no partial tile */
        for (int64_t i = s->shape_begin; i < s->shape_end; i++)
            for (int64_t j = t; j < t + tile; j++)
                hits += (uint64_t)LONG_SHAPE(tile_drop, i, s->point[0][j], s->point[1][j]);
    return hits;
}
LONG_ROW(tile_drop, "test only: points in tiles of 8 192, the partial last tile dropped");

/* Shapes unrolled by 128 (the row declares block 1), with a typo in the unrolled body. */
static inline int unrolled_128(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    return long_basic(cx, cy, ux, uy, r2, k, px, py);
}
SB_KERNEL_LOOPS(unrolled_128, SCALAR, 1, LONG_TAKES)
static uint64_t unrolled_128_long_count(const sb_scene *s) {
    uint64_t hits = 0;
    int64_t i = s->shape_begin;
    for (; i + 128 <= s->shape_end; i += 128)
        for (int64_t j = 0; j < s->n_points; j++)
            for (int b = 0; b < 127; b++) /* the typo: 127, not 128 */
                hits += (uint64_t)LONG_SHAPE(unrolled_128, i + b, s->point[0][j], s->point[1][j]);
    for (; i < s->shape_end; i++)
        for (int64_t j = 0; j < s->n_points; j++)
            hits += (uint64_t)LONG_SHAPE(unrolled_128, i, s->point[0][j], s->point[1][j]);
    return hits;
}
LONG_ROW(unrolled_128, "test only: shapes unrolled by 128, the last of each 128 skipped");

/* A 16-bit point index: "M fits in 16 bits". */
static inline int short_index(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    return long_basic(cx, cy, ux, uy, r2, k, px, py);
}
SB_KERNEL_LOOPS(short_index, SCALAR, 1, LONG_TAKES)
static uint64_t short_index_long_count(const sb_scene *s) {
    uint64_t hits = 0;
    const uint16_t points = (uint16_t)s->n_points; /* the bug: M mod 65 536 */
    for (int64_t i = s->shape_begin; i < s->shape_end; i++)
        for (uint16_t j = 0; j < points; j++)
            hits += (uint64_t)LONG_SHAPE(short_index, i, s->point[0][j], s->point[1][j]);
    return hits;
}
LONG_ROW(short_index, "test only: a 16-bit point index");
