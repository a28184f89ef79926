/* Test-only: mutant kernels, each a bug seen in real point-in-sector or point-in-triangle
 * code, that `verify` must catch.  `make mutation` (tools/mutation.py) verifies every
 * `.known_bad` row of this file and of broken_kernels.c and prints the score; the test
 * suite asserts each is caught, at the default --cases and at five seeds.
 * D = p - c, s = |D|^2, a = D.u, k = cos(theta), as in kernels_c/sector_scalar.c. */
#include <float.h>

#include "sb_common.h"

#define SECTOR_R2 (cx, cy, ux, uy, r2, cos_theta)
#define SECTOR_R_THETA (cx, cy, ux, uy, r, theta)
#define TRIANGLE (ax, ay, bx, by, cx, cy)
#define MUTANT(name, X, TAKES, family_, bug) \
    SB_KERNEL(name, X, 1, TAKES, .family = family_, .known_bad = 1, .summary = bug)

/* ---------------------------------------------------------------- sector: comparisons */

static inline int m_angle_ge(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s < r2 && dx * ux + dy * uy >= sqrtf(s) * k;
}
MUTANT(m_angle_ge, SCALAR, SECTOR_R2, "sector", ">= on the angle: points on an edge ray, and the apex, inside");

static inline int m_naive_le(float cx, float cy, float ux, float uy, float r, float theta, float px, float py) {
    float dx = px - cx, dy = py - cy;
    const float length = sqrtf(dx * dx + dy * dy);
    if (!(length <= r) || length == 0.0f) return 0;
    float cosine = (dx * ux + dy * uy) / length;
    if (cosine > 1.0f) cosine = 1.0f;
    return acosf(cosine) < theta;
}
MUTANT(m_naive_le, SCALAR, SECTOR_R_THETA, "sector", "the naive kernel with <= on the length: the arc inside");

static inline int m_or_not_and(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return (s < r2) | (dx * ux + dy * uy > sqrtf(s) * k);
}
MUTANT(m_or_not_and, SCALAR, SECTOR_R2, "sector", "OR instead of AND of the two tests");

/* ---------------------------------------------------------------- sector: signs */

static inline int m_cos_sign_dropped(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy, a = dx * ux + dy * uy;
    return s < r2 && a >= 0 && a * a > s * k * k;  /* squares as if cos(theta) were never negative */
}
MUTANT(m_cos_sign_dropped, SCALAR, SECTOR_R2, "sector", "sign of cos(theta) dropped: half-angles over 90 degrees lose their back");

static inline int m_bittrick_lhs_only(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy, a = dx * ux + dy * uy;
    return s < r2 && a * fabsf(a) > s * k * k;  /* the sign carried on one side only */
}
MUTANT(m_bittrick_lhs_only, SCALAR, SECTOR_R2, "sector", "bit trick with the sign on a|a| only, not on s k|k|");

static inline int m_bittrick_rhs_only(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy, a = dx * ux + dy * uy;
    return s < r2 && a * a > s * k * fabsf(k);
}
MUTANT(m_bittrick_rhs_only, SCALAR, SECTOR_R2, "sector", "bit trick with the sign on s k|k| only, not on a|a|");

static inline int m_bits_as_ints(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy, a = dx * ux + dy * uy;
    const float lhs = a * fabsf(a), rhs = s * k * fabsf(k);
    int32_t l, r;
    memcpy(&l, &lhs, sizeof l);
    memcpy(&r, &rhs, sizeof r);
    return s < r2 && l > r;  /* sign-magnitude compared as two's complement: negatives in reverse */
}
MUTANT(m_bits_as_ints, SCALAR, SECTOR_R2, "sector", "floats compared as signed ints: two negatives in reverse order");

static inline int m_unsquared_cos(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy, a = dx * ux + dy * uy;
    return s < r2 && a * fabsf(a) > s * k;  /* forgot to square cos(theta) */
}
MUTANT(m_unsquared_cos, SCALAR, SECTOR_R2, "sector", "no-sqrt form with cos(theta) not squared");

/* ---------------------------------------------------------------- sector: apex, NaN */

static inline int m_apex_always(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    if (s == 0) return r2 > 0;  /* "the apex belongs to every sector" */
    return s < r2 && dx * ux + dy * uy > sqrtf(s) * k;
}
MUTANT(m_apex_always, SCALAR, SECTOR_R2, "sector", "the apex counted inside every sector");

static inline int m_nan_inside(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    if (s > r2) return 0;                          /* NaN passes */
    return !(dx * ux + dy * uy <= sqrtf(s) * k);  /* and NaN is "not outside" */
}
MUTANT(m_nan_inside, SCALAR, SECTOR_R2, "sector", "rejections written as > and <=: NaN counted inside");

/* ---------------------------------------------------------------- sector: tolerances, numerics */

static inline int m_abs_tolerance(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s < r2 + 1e-6f && dx * ux + dy * uy > sqrtf(s) * k;
}
MUTANT(m_abs_tolerance, SCALAR, SECTOR_R2, "sector", "an absolute tolerance: s < r2 + 1e-6");

static inline int m_rel_tolerance(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s < r2 * (1 + 1e-6f) && dx * ux + dy * uy > sqrtf(s) * k;
}
MUTANT(m_rel_tolerance, SCALAR, SECTOR_R2, "sector", "a relative tolerance: s < r2 (1 + 1e-6)");

static inline int m_angle_tolerance(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s < r2 && dx * ux + dy * uy > sqrtf(s) * k - 1e-6f;
}
MUTANT(m_angle_tolerance, SCALAR, SECTOR_R2, "sector", "an absolute tolerance on the angle test");

static inline int m_clamped(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    px = fminf(fmaxf(px, -1000.0f), 1000.0f);  /* "world coordinates never exceed 1000" */
    py = fminf(fmaxf(py, -1000.0f), 1000.0f);
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s < r2 && dx * ux + dy * uy > sqrtf(s) * k;
}
MUTANT(m_clamped, SCALAR, SECTOR_R2, "sector", "point coordinates clamped to [-1000, 1000]");

static inline int m_expanded(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    /* |p - c|^2 = |p|^2 - 2 p.c + |c|^2: fine in algebra, catastrophic cancellation in float32 */
    const float s = px * px + py * py - 2 * (px * cx + py * cy) + cx * cx + cy * cy;
    const float dx = px - cx, dy = py - cy;
    return s < r2 && dx * ux + dy * uy > sqrtf(fmaxf(s, 0)) * k;
}
MUTANT(m_expanded, SCALAR, SECTOR_R2, "sector", "|D|^2 expanded as |p|^2 - 2 p.c + |c|^2");

static inline int m_swapped_uv(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s < r2 && dx * uy + dy * ux > sqrtf(s) * k;
}
MUTANT(m_swapped_uv, SCALAR, SECTOR_R2, "sector", "components of u swapped in D.u");

/* ---------------------------------------------------------------- sector: away from cos(theta) = 0
 * Wrong only beside a boundary where no exact row used to be: an edge ray at a half-angle
 * other than 90 degrees, the arc of a tiny sector.  Only the coverage cells' exact rows
 * (docs/coverage.md) see them; everywhere else they are right or within rounding. */

static inline int m_edge_ge_wide(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy, a = dx * ux + dy * uy, t = sqrtf(s) * k;
    /* the wide-sector branch (theta > 90 degrees) written with >=; the apex kept out by s > 0 */
    return s < r2 && (k < 0 ? (a >= t) & (s > 0) : a > t);
}
MUTANT(m_edge_ge_wide, SCALAR, SECTOR_R2, "sector", ">= on the edge rays of wide sectors only (cos(theta) < 0)");

static inline int m_tiny_radius(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    /* "never compare with an exact 0": no effect above r2 ~ 2^-100, the arc inside below */
    return s < r2 + FLT_MIN && dx * ux + dy * uy > sqrtf(s) * k;
}
MUTANT(m_tiny_radius, SCALAR, SECTOR_R2, "sector", "s < r2 + FLT_MIN: the arc of tiny sectors inside");

/* ---------------------------------------------------------------- sector: signed zeros */

static inline int m_atan_quadrant(float cx, float cy, float ux, float uy, float r, float theta, float px, float py) {
    const float dx = px - cx, dy = py - cy;
    if (!(dx * dx + dy * dy < r * r) || (dx == 0 && dy == 0)) return 0;
    const float pi = 3.14159265f;
    /* atanf(dy/dx) plus a quadrant fix keyed on dx < 0: dx = -0.0 takes the wrong half */
    float phi = atanf(dy / dx);
    if (dx < 0) phi += dy >= 0 ? pi : -pi;
    float phi_u = atan2f(uy, ux), delta = fabsf(phi - phi_u);
    if (delta > pi) delta = 2 * pi - delta;
    return delta < theta;
}
SB_KERNEL(m_atan_quadrant, SCALAR, 1, SECTOR_R_THETA, .family = "sector", .known_bad = 1, .rounding_bound = 16,
          .summary = "atanf(dy/dx) with a quadrant fix on dx < 0: wrong when dx is -0.0");

/* ---------------------------------------------------------------- sector: SIMD */

SB_SSE2_ATTR
static inline __m128 m_rsqrt(__m128 cx, __m128 cy, __m128 ux, __m128 uy, __m128 r2, __m128 k, __m128 px, __m128 py) {
    const __m128 dx = _mm_sub_ps(px, cx), dy = _mm_sub_ps(py, cy);
    const __m128 s = _mm_add_ps(_mm_mul_ps(dx, dx), _mm_mul_ps(dy, dy));
    const __m128 a = _mm_add_ps(_mm_mul_ps(dx, ux), _mm_mul_ps(dy, uy));
    const __m128 length = _mm_mul_ps(s, _mm_rsqrt_ps(s));  /* sqrt(s) to 12 bits; 0 * inf at the apex */
    return _mm_and_ps(_mm_cmplt_ps(s, r2), _mm_cmpgt_ps(a, _mm_mul_ps(length, k)));
}
MUTANT(m_rsqrt, SSE2, SECTOR_R2, "sector", "sqrt(s) from _mm_rsqrt_ps: 12 bits");

SB_SSE2_ATTR
static inline __m128 m_lane_shuffle(__m128 cx, __m128 cy, __m128 ux, __m128 uy, __m128 r2, __m128 k, __m128 px,
                                    __m128 py) {
    const __m128 dx = _mm_sub_ps(px, cx), dy = _mm_sub_ps(py, cy);
    const __m128 s = _mm_add_ps(_mm_mul_ps(dx, dx), _mm_mul_ps(dy, dy));
    const __m128 a = _mm_add_ps(_mm_mul_ps(dx, ux), _mm_mul_ps(dy, uy));
    const __m128 inside = _mm_and_ps(_mm_cmplt_ps(s, r2), _mm_cmpgt_ps(a, _mm_mul_ps(_mm_sqrt_ps(s), k)));
    return _mm_shuffle_ps(inside, inside, _MM_SHUFFLE(2, 1, 0, 3));  /* a shuffle meant for an AoS layout */
}
MUTANT(m_lane_shuffle, SSE2, SECTOR_R2, "sector", "answers rotated by one lane");

/* The SSE2 kernel with the last partial vector of its count loops masked with
 * 1 << (M % 4) instead of (1 << (M % 4)) - 1: only the count loops are wrong (its pairs
 * and grid evaluations are the generated ones), so only the loop check sees it. */
SB_SSE2_ATTR
static inline __m128 m_tail_mask(__m128 cx, __m128 cy, __m128 ux, __m128 uy, __m128 r2, __m128 k, __m128 px, __m128 py) {
    const __m128 dx = _mm_sub_ps(px, cx), dy = _mm_sub_ps(py, cy);
    const __m128 s = _mm_add_ps(_mm_mul_ps(dx, dx), _mm_mul_ps(dy, dy));
    const __m128 a = _mm_add_ps(_mm_mul_ps(dx, ux), _mm_mul_ps(dy, uy));
    return _mm_and_ps(_mm_cmplt_ps(s, r2), _mm_cmpgt_ps(a, _mm_mul_ps(_mm_sqrt_ps(s), k)));
}
SB_KERNEL_LOOPS(m_tail_mask, SSE2, 1, SECTOR_R2)

SB_SSE2_ATTR static uint64_t m_tail_mask_count(const sb_scene *s) {
    uint64_t hits = 0;
    const float *px = s->point[0], *py = s->point[1];
    for (int64_t i = s->shape_begin; i < s->shape_end; i++) {
        const __m128 cx = _mm_set1_ps(s->shape[0][i]), cy = _mm_set1_ps(s->shape[1][i]);
        const __m128 ux = _mm_set1_ps(s->shape[2][i]), uy = _mm_set1_ps(s->shape[3][i]);
        const __m128 r2 = _mm_set1_ps(s->shape[4][i]), k = _mm_set1_ps(s->shape[5][i]);
        int64_t j = 0;
        for (; j + 4 <= s->n_points; j += 4)
            hits += SB_POPCOUNT4((unsigned)_mm_movemask_ps(m_tail_mask(cx, cy, ux, uy, r2, k, _mm_load_ps(px + j),
                                                                        _mm_load_ps(py + j))));
        if (j < s->n_points) {
            const unsigned tail = 1u << (s->n_points % 4); /* the bug */
            hits += SB_POPCOUNT4(tail & (unsigned)_mm_movemask_ps(
                m_tail_mask(cx, cy, ux, uy, r2, k, _mm_load_ps(px + j), _mm_load_ps(py + j))));
        }
    }
    return hits;
}

static const sb_kernel m_tail_mask_row = {
    SB_ROW_FIELDS(m_tail_mask, SSE2, 1, SECTOR_R2), .family = "sector", .known_bad = 1,
    .summary = "SSE2 count loops mask the tail with 1 << (M % 4), not (1 << (M % 4)) - 1",
    .count_inline = m_tail_mask_count, .count_call = m_tail_mask_count,
    .noop_inline = m_tail_mask_noop_inline, .noop_call = m_tail_mask_noop_call,
    .eval_grid = m_tail_mask_eval_grid, .eval_pairs = m_tail_mask_eval_pairs};
SB_REGISTER(m_tail_mask_row);

/* A count loop written by hand for one thread: it tests every shape [0, N), not its share
 * [shape_begin, shape_end), so `run --threads k` counts each hit k times.  Its predicate,
 * grid and pairs loops are right; only a check over split shape ranges sees it. */
static inline int m_ignores_range(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s < r2 && dx * ux + dy * uy > sqrtf(s) * k;
}
SB_KERNEL_LOOPS(m_ignores_range, SCALAR, 1, SECTOR_R2)

static uint64_t m_ignores_range_count(const sb_scene *s) {
    uint64_t hits = 0;
    const float *px = s->point[0], *py = s->point[1];
    for (int64_t i = 0; i < s->n_shapes; i++) /* the bug: not [shape_begin, shape_end) */
        for (int64_t j = 0; j < s->n_points; j++)
            hits += (uint64_t)m_ignores_range(s->shape[0][i], s->shape[1][i], s->shape[2][i], s->shape[3][i],
                                              s->shape[4][i], s->shape[5][i], px[j], py[j]);
    return hits;
}

static const sb_kernel m_ignores_range_row = {
    SB_ROW_FIELDS(m_ignores_range, SCALAR, 1, SECTOR_R2), .family = "sector", .known_bad = 1,
    .summary = "count loops over all shapes [0, N), not the thread's share [shape_begin, shape_end)",
    .count_inline = m_ignores_range_count, .count_call = m_ignores_range_count,
    .noop_inline = m_ignores_range_noop_inline, .noop_call = m_ignores_range_noop_call,
    .eval_grid = m_ignores_range_eval_grid, .eval_pairs = m_ignores_range_eval_pairs};
SB_REGISTER(m_ignores_range_row);

/* ---------------------------------------------------------------- triangle */

static inline float orient(float x0, float y0, float x1, float y1, float px, float py) {
    return (x1 - x0) * (py - y0) - (y1 - y0) * (px - x0);
}

static inline int t_one_winding(float ax, float ay, float bx, float by, float cx, float cy, float px, float py) {
    const float o1 = orient(ax, ay, bx, by, px, py), o2 = orient(bx, by, cx, cy, px, py),
                o3 = orient(cx, cy, ax, ay, px, py);
    return (o1 > 0) & (o2 > 0) & (o3 > 0);
}
MUTANT(t_one_winding, SCALAR, TRIANGLE, "triangle", "only counter-clockwise triangles contain anything");

static inline int t_nonstrict(float ax, float ay, float bx, float by, float cx, float cy, float px, float py) {
    const float o1 = orient(ax, ay, bx, by, px, py), o2 = orient(bx, by, cx, cy, px, py),
                o3 = orient(cx, cy, ax, ay, px, py);
    return ((o1 >= 0) & (o2 >= 0) & (o3 >= 0)) | ((o1 <= 0) & (o2 <= 0) & (o3 <= 0));
}
MUTANT(t_nonstrict, SCALAR, TRIANGLE, "triangle", "non-strict orientations: edges, vertices, degenerate triangles inside");

static inline int t_top_left(float ax, float ay, float bx, float by, float cx, float cy, float px, float py) {
    const float o1 = orient(ax, ay, bx, by, px, py), o2 = orient(bx, by, cx, cy, px, py),
                o3 = orient(cx, cy, ax, ay, px, py);
    /* a rasteriser's fill rule: the first edge is inclusive */
    return ((o1 >= 0) & (o2 > 0) & (o3 > 0)) | ((o1 <= 0) & (o2 < 0) & (o3 < 0));
}
MUTANT(t_top_left, SCALAR, TRIANGLE, "triangle", "one edge inclusive (a rasteriser's fill rule)");

static inline int t_any_edge(float ax, float ay, float bx, float by, float cx, float cy, float px, float py) {
    const float o1 = orient(ax, ay, bx, by, px, py), o2 = orient(bx, by, cx, cy, px, py),
                o3 = orient(cx, cy, ax, ay, px, py);
    const int mixed = ((o1 > 0) | (o2 > 0) | (o3 > 0)) && ((o1 < 0) | (o2 < 0) | (o3 < 0));
    return mixed ? 0 : (o1 != 0) | (o2 != 0);
}
MUTANT(t_any_edge, SCALAR, TRIANGLE, "triangle", "no mixed signs taken as inside: zeros let edge points in");

static inline int t_or_not_and(float ax, float ay, float bx, float by, float cx, float cy, float px, float py) {
    const float o1 = orient(ax, ay, bx, by, px, py), o2 = orient(bx, by, cx, cy, px, py),
                o3 = orient(cx, cy, ax, ay, px, py);
    return ((o1 > 0) & (o2 > 0)) | (o3 > 0 && o1 > 0) | ((o1 < 0) & (o2 < 0) & (o3 < 0));
}
MUTANT(t_or_not_and, SCALAR, TRIANGLE, "triangle", "OR where AND belongs between two orientation tests");

static inline int t_nan_inside(float ax, float ay, float bx, float by, float cx, float cy, float px, float py) {
    const float o1 = orient(ax, ay, bx, by, px, py), o2 = orient(bx, by, cx, cy, px, py),
                o3 = orient(cx, cy, ax, ay, px, py);
    return (!(o1 <= 0) & !(o2 <= 0) & !(o3 <= 0)) | (!(o1 >= 0) & !(o2 >= 0) & !(o3 >= 0));
}
MUTANT(t_nan_inside, SCALAR, TRIANGLE, "triangle", "tests written as !(o <= 0): NaN orientations inside");

static inline int t_expanded(float ax, float ay, float bx, float by, float cx, float cy, float px, float py) {
    /* orientation expanded without translating to a: bx*py - by*px - ... cancels at 1e3 */
#define EXPANDED(x0, y0, x1, y1) ((x1) * (py) - (y1) * (px) - (x0) * (py) + (y0) * (px) + (x0) * (y1) - (y0) * (x1))
    const float o1 = EXPANDED(ax, ay, bx, by), o2 = EXPANDED(bx, by, cx, cy), o3 = EXPANDED(cx, cy, ax, ay);
#undef EXPANDED
    return ((o1 > 0) & (o2 > 0) & (o3 > 0)) | ((o1 < 0) & (o2 < 0) & (o3 < 0));
}
MUTANT(t_expanded, SCALAR, TRIANGLE, "triangle", "orientations expanded without translating: cancellation");

static inline int t_swapped_vertex(float ax, float ay, float bx, float by, float cx, float cy, float px, float py) {
    const float o1 = orient(ax, ay, bx, by, px, py), o2 = orient(bx, by, cx, cy, px, py),
                o3 = orient(cx, cy, bx, by, px, py);  /* c -> b where c -> a was meant */
    return ((o1 > 0) & (o2 > 0) & (o3 > 0)) | ((o1 < 0) & (o2 < 0) & (o3 < 0));
}
MUTANT(t_swapped_vertex, SCALAR, TRIANGLE, "triangle", "the third edge runs c -> b instead of c -> a");

static inline int t_unscaled_tolerance(float ax, float ay, float bx, float by, float cx, float cy, float px, float py) {
    const float v0x = cx - ax, v0y = cy - ay, v1x = bx - ax, v1y = by - ay, v2x = px - ax, v2y = py - ay;
    float denominator = v0x * v1y - v0y * v1x, u = v1y * v2x - v1x * v2y, v = v0x * v2y - v0y * v2x;
    if (denominator < 0) denominator = -denominator, u = -u, v = -v;
    if (!(denominator <= FLT_MAX)) return 0;
    const float eps = -1e-4f; /* the article's tolerance, not scaled by the area */
    return u >= eps && v >= eps && (u + v) <= denominator - eps;
}
SB_KERNEL(t_unscaled_tolerance, SCALAR, 1, TRIANGLE, .family = "triangle", .known_bad = 1,
          .rounding_bound = 16, .tolerance = (double)1e-4f,
          .summary = "recast_cross with its tolerance not scaled by the area");

static inline int t_vertex_snap(float ax, float ay, float bx, float by, float cx, float cy, float px, float py) {
    /* "a point within 1/256 of an edge's length from a vertex is on it" (vertex snapping) */
    const float ex = bx - ax, ey = by - ay, snap = (ex * ex + ey * ey) * (1.0f / 65536.0f);
    const float da = (px - ax) * (px - ax) + (py - ay) * (py - ay), db = (px - bx) * (px - bx) + (py - by) * (py - by),
                dc = (px - cx) * (px - cx) + (py - cy) * (py - cy);
    if (da < snap || db < snap || dc < snap) return 0;
    const float o1 = orient(ax, ay, bx, by, px, py), o2 = orient(bx, by, cx, cy, px, py),
                o3 = orient(cx, cy, ax, ay, px, py);
    return ((o1 > 0) & (o2 > 0) & (o3 > 0)) | ((o1 < 0) & (o2 < 0) & (o3 < 0));
}
MUTANT(t_vertex_snap, SCALAR, TRIANGLE, "triangle", "points within |ab|/256 of a vertex snapped onto it: outside");

static inline int t_point_triangle(float ax, float ay, float bx, float by, float cx, float cy, float px, float py) {
    /* "a triangle shrunk to a point holds that point": a zero-area special case that is not outside */
    if (ax == bx && ay == by && bx == cx && by == cy) return px == ax && py == ay;
    const float o1 = orient(ax, ay, bx, by, px, py), o2 = orient(bx, by, cx, cy, px, py),
                o3 = orient(cx, cy, ax, ay, px, py);
    return ((o1 > 0) & (o2 > 0) & (o3 > 0)) | ((o1 < 0) & (o2 < 0) & (o3 < 0));
}
MUTANT(t_point_triangle, SCALAR, TRIANGLE, "triangle", "a triangle with a = b = c holds the point a");
