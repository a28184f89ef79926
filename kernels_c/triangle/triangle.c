/* Point strictly inside triangle abc (2D), the family of the point-in-triangle
 * precision article (recastnavigation's dtClosestHeightPointTriangle). */
#include <float.h>

#include "sb_common.h"

/* recastnavigation's test as quoted in the article: barycentric coordinates
 * from dot products and a divide, EPS = 1e-4.  dot00*dot11 - dot01*dot01 is a
 * difference of fourth powers, which float32 cannot resolve: kept as a
 * known-bad reference. */
static inline int recast_dot(float ax, float ay, float bx, float by, float cx,
                             float cy, float px, float py) {
    const float v0x = cx - ax, v0y = cy - ay;
    const float v1x = bx - ax, v1y = by - ay;
    const float v2x = px - ax, v2y = py - ay;
    const float dot00 = v0x * v0x + v0y * v0y;
    const float dot01 = v0x * v1x + v0y * v1y;
    const float dot02 = v0x * v2x + v0y * v2y;
    const float dot11 = v1x * v1x + v1y * v1y;
    const float dot12 = v1x * v2x + v1y * v2y;
    const float inverse_denominator = 1.0f / (dot00 * dot11 - dot01 * dot01);
    const float u = (dot11 * dot02 - dot01 * dot12) * inverse_denominator;
    const float v = (dot00 * dot12 - dot01 * dot02) * inverse_denominator;
    const float eps = 1e-4f;
    return u >= -eps && v >= -eps && (u + v) <= 1 + eps;
}

/* The article's final version: cross products (second powers), denominator
 * sign-normalised, the tolerance scaled by the denominator. */
static inline int recast_cross(float ax, float ay, float bx, float by, float cx,
                               float cy, float px, float py) {
    const float v0x = cx - ax, v0y = cy - ay;
    const float v1x = bx - ax, v1y = by - ay;
    const float v2x = px - ax, v2y = py - ay;
    float denominator = v0x * v1y - v0y * v1x;
    float u = v1y * v2x - v1x * v2y;
    float v = v0x * v2y - v0y * v2x;
    if (denominator < 0) {
        denominator = -denominator;
        u = -u;
        v = -v;
    }
    /* An infinite vertex makes the area infinite and eps = -inf, which would
     * accept points the exact (extended-real) test leaves undefined. */
    if (!(denominator <= FLT_MAX)) /* not INFINITY: clang -ffast-math warns on it (and so fails -Werror) */
        return 0;
    const float eps = -1e-4f * denominator;
    return u >= eps && v >= eps && (u + v) <= denominator - eps;
}

/* Strict: the three orientations of p against the edges share one sign.  A
 * point on an edge or vertex gives a zero and is outside; a degenerate
 * triangle contains nothing (the orientations sum to its zero area). */
static inline int orient(float ax, float ay, float bx, float by, float cx,
                         float cy, float px, float py) {
    const float o_ab = (bx - ax) * (py - ay) - (by - ay) * (px - ax);
    const float o_bc = (cx - bx) * (py - by) - (cy - by) * (px - bx);
    const float o_ca = (ax - cx) * (py - cy) - (ay - cy) * (px - cx);
    return ((o_ab > 0) & (o_bc > 0) & (o_ca > 0)) | ((o_ab < 0) & (o_bc < 0) & (o_ca < 0));
}

SB_KERNEL(recast_dot, SCALAR, 1, (ax, ay, bx, by, cx, cy), .family = "triangle",
          .rounding_bound = 8, .tolerance = (double)1e-4f, .known_bad = 1,
          .summary = "recastnavigation's dot-product barycentrics, EPS 1e-4");
SB_KERNEL(recast_cross, SCALAR, 1, (ax, ay, bx, by, cx, cy), .family = "triangle",
          .rounding_bound = 16, .tolerance = (double)1e-4f,
          .summary = "the article's fix: cross products, tolerance 1e-4 scaled by the area");
SB_KERNEL(orient, SCALAR, 1, (ax, ay, bx, by, cx, cy), .family = "triangle",
          .rounding_bound = 8, .summary = "three float32 orientations, strict");
