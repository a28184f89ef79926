/* Test-only: rows whose evaluation loops are right and whose timed loops are wrong only where
 * verify's small loop scenes never look (each found by a probe; verify passed them all):
 * a count loop over 8 shapes a load with a typo in that body (the row declares block 1), a
 * 16-bit hit counter, count loops that clamp the radius to 4, and NoOperation twins that
 * count hits; then, found by a later probe, count and grid loops that take the boundary for
 * inside (only the pairs loop met the cases' boundary points) and a count loop wrong from a
 * scene's second call on.  `run` times every one of these loops. */
#include "sb_common.h"

static inline int blind_basic(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s < r2 && dx * ux + dy * uy > sqrtf(s) * k;
}
#define BLIND_TAKES (cx, cy, ux, uy, r2, cos_theta)
#define BLIND_ROW(kname, count, noop, text)                                                            \
    static const sb_kernel kname##_row = {SB_ROW_FIELDS(kname, SCALAR, 1, BLIND_TAKES),                 \
                                          .family = "sector",                                          \
                                          .known_bad = 1,                                              \
                                          .summary = text,                                             \
                                          .count_inline = count,                                       \
                                          .count_call = count,                                         \
                                          .noop_inline = noop##_inline,                                \
                                          .noop_call = noop##_call,                                    \
                                          .eval_grid = kname##_eval_grid,                              \
                                          .eval_pairs = kname##_eval_pairs};                           \
    SB_REGISTER(kname##_row)
#define BLIND_SHAPE(kname, q, x, y)                                                                    \
    kname(s->shape[0][q], s->shape[1][q], s->shape[2][q], s->shape[3][q], s->shape[4][q], s->shape[5][q], x, y)

static inline int unrolled_typo(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    return blind_basic(cx, cy, ux, uy, r2, k, px, py);
}
SB_KERNEL_LOOPS(unrolled_typo, SCALAR, 1, BLIND_TAKES)
static uint64_t unrolled_typo_count(const sb_scene *s) {
    uint64_t hits = 0;
    const float *px = s->point[0], *py = s->point[1];
    int64_t i = s->shape_begin;
    for (; i + 8 <= s->shape_end; i += 8)
        for (int64_t j = 0; j < s->n_points; j++) {
            const float x = px[j], y = py[j];
            for (int b = 0; b < 7; b++)
                hits += (uint64_t)BLIND_SHAPE(unrolled_typo, i + b, x, y);
            hits += (uint64_t)BLIND_SHAPE(unrolled_typo, i + 6, x, y); /* the typo: i + 6, not i + 7 */
        }
    for (; i < s->shape_end; i++)
        for (int64_t j = 0; j < s->n_points; j++)
            hits += (uint64_t)BLIND_SHAPE(unrolled_typo, i, px[j], py[j]);
    return hits;
}
BLIND_ROW(unrolled_typo, unrolled_typo_count, unrolled_typo_noop, "test only: 8 shapes a load, a typo there");

static inline int narrow_counter(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    return blind_basic(cx, cy, ux, uy, r2, k, px, py);
}
SB_KERNEL_LOOPS(narrow_counter, SCALAR, 1, BLIND_TAKES)
static uint64_t narrow_counter_count(const sb_scene *s) {
    uint16_t hits = 0; /* wraps past 65 535 hits */
    for (int64_t i = s->shape_begin; i < s->shape_end; i++)
        for (int64_t j = 0; j < s->n_points; j++)
            hits = (uint16_t)(hits + BLIND_SHAPE(narrow_counter, i, s->point[0][j], s->point[1][j]));
    return hits;
}
BLIND_ROW(narrow_counter, narrow_counter_count, narrow_counter_noop, "test only: a 16-bit hit counter");

static inline int clamped_count(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    return blind_basic(cx, cy, ux, uy, r2, k, px, py);
}
static inline int clamped_timed(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    return blind_basic(cx, cy, ux, uy, fminf(r2, 16.0f), k, px, py); /* radius clamped to 4 */
}
SB_KERNEL_LOOPS(clamped_count, SCALAR, 1, BLIND_TAKES)
SB_DEFINE_COUNT(clamped_timed_count, SCALAR, 1, 6, clamped_timed, SB_SHAPE_VALUE)
BLIND_ROW(clamped_count, clamped_timed_count, clamped_count_noop, "test only: count loops clamp r2 to 16");

static inline int counting_twin(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    return blind_basic(cx, cy, ux, uy, r2, k, px, py);
}
SB_KERNEL_LOOPS(counting_twin, SCALAR, 1, BLIND_TAKES)
BLIND_ROW(counting_twin, counting_twin_count_inline, counting_twin_count, "test only: its NoOperation counts hits");

/* Count and grid loops that take the boundary for inside (<= on the radius, >= on the angle), the
 * pairs loop strict: only the pairs loop met the cases' boundary points, and verify passed it. */
static inline int boundary_count(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    return blind_basic(cx, cy, ux, uy, r2, k, px, py);
}
static inline int boundary_loose(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s <= r2 && dx * ux + dy * uy >= sqrtf(s) * k;
}
SB_KERNEL_LOOPS(boundary_count, SCALAR, 1, BLIND_TAKES)
SB_KERNEL_LOOPS(boundary_loose, SCALAR, 1, BLIND_TAKES)
static const sb_kernel boundary_count_row = {SB_ROW_FIELDS(boundary_count, SCALAR, 1, BLIND_TAKES),
                                             .family = "sector",
                                             .known_bad = 1,
                                             .summary = "test only: count and grid loops count the boundary",
                                             .count_inline = boundary_loose_count_inline,
                                             .count_call = boundary_loose_count_call,
                                             .noop_inline = boundary_count_noop_inline,
                                             .noop_call = boundary_count_noop_call,
                                             .eval_grid = boundary_loose_eval_grid,
                                             .eval_pairs = boundary_count_eval_pairs};
SB_REGISTER(boundary_count_row);

/* A count loop right on a scene's first call and one hit over on the next calls of the same
 * scene (a cache keyed on it, gone wrong): verify called each count loop once a scene, `run`
 * calls it hundreds of times. */
static inline int second_call(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    return blind_basic(cx, cy, ux, uy, r2, k, px, py);
}
SB_KERNEL_LOOPS(second_call, SCALAR, 1, BLIND_TAKES)
static uint64_t second_call_count(const sb_scene *s) {
    static _Thread_local const float *last_points;
    static _Thread_local int64_t last_points_n = -1, last_begin = -1, last_end = -1;
    const int again = s->point[0] == last_points && s->n_points == last_points_n && s->shape_begin == last_begin &&
                      s->shape_end == last_end;
    last_points = s->point[0];
    last_points_n = s->n_points;
    last_begin = s->shape_begin;
    last_end = s->shape_end;
    return second_call_count_inline(s) + (uint64_t)again;
}
BLIND_ROW(second_call, second_call_count, second_call_noop, "test only: one hit over from a scene's second call");

/* A count loop over 4 shapes a load (the row declares block 4) whose unrolled body restates the
 * predicate with <= on the radius, the shapes left over strict: verify counted each case row as
 * a scene of one shape, which only the left-over path met, and passed it. */
static inline int blocked_body(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    return blind_basic(cx, cy, ux, uy, r2, k, px, py);
}
static inline int blocked_loose(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s <= r2 && dx * ux + dy * uy > sqrtf(s) * k;
}
SB_KERNEL_LOOPS(blocked_body, SCALAR, 4, BLIND_TAKES)
static uint64_t blocked_body_count(const sb_scene *s) {
    uint64_t hits = 0;
    const float *px = s->point[0], *py = s->point[1];
    int64_t i = s->shape_begin;
    for (; i + 4 <= s->shape_end; i += 4)
        for (int64_t j = 0; j < s->n_points; j++)
            for (int b = 0; b < 4; b++)
                hits += (uint64_t)BLIND_SHAPE(blocked_loose, i + b, px[j], py[j]);
    for (; i < s->shape_end; i++)
        for (int64_t j = 0; j < s->n_points; j++)
            hits += (uint64_t)BLIND_SHAPE(blocked_body, i, px[j], py[j]);
    return hits;
}
static const sb_kernel blocked_body_row = {SB_ROW_FIELDS(blocked_body, SCALAR, 4, BLIND_TAKES),
                                           .family = "sector",
                                           .known_bad = 1,
                                           .summary = "test only: <= on the radius in its 4-shape body",
                                           .count_inline = blocked_body_count,
                                           .count_call = blocked_body_count,
                                           .noop_inline = blocked_body_noop_inline,
                                           .noop_call = blocked_body_noop_call,
                                           .eval_grid = blocked_body_eval_grid,
                                           .eval_pairs = blocked_body_eval_pairs};
SB_REGISTER(blocked_body_row);
