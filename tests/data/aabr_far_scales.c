/* Test-only: aabr kernels wrong only on polygons far from unit scale (smaller than 1e-12, or
 * beyond 1e12), where verify had no row: its polygons stopped at 1e-6 and at 2^20 x 100, and
 * both passed at every seed.  tests/test_coverage.py. */
#include "aabr.h"

static inline void far_scan(const aabr_poly *p, float c, float s, int32_t o[4]) {
    const float *x = p->x, *y = p->y;
    float X = c * x[0] - s * y[0], Y = s * x[0] + c * y[0];
    float mxX = X, mxY = Y, mnX = X, mnY = Y;
    o[0] = o[1] = o[2] = o[3] = 0;
    for (int i = 1; i < p->n; i++) {
        X = c * x[i] - s * y[i];
        Y = s * x[i] + c * y[i];
        if (X > mxX) { mxX = X; o[0] = i; }
        if (Y > mxY) { mxY = Y; o[1] = i; }
        if (X < mnX) { mnX = X; o[2] = i; }
        if (Y < mnY) { mnY = Y; o[3] = i; }
    }
}

static inline void tiny_is_a_point(const aabr_poly *p, float a, float c, float s, int32_t *state, int32_t o[4]) {
    (void)a, (void)state;
    if (fabsf(p->x[0]) + fabsf(p->y[0]) < 1e-12f) { /* "a polygon that small is a point" */
        o[0] = o[1] = o[2] = o[3] = 0;
        return;
    }
    far_scan(p, c, s, o);
}
AABR_KERNEL(tiny_is_a_point, , "", "aabr scalar", .known_bad = 1,
            .summary = "test only: vertex 0 for every side of a polygon below 1e-12");

static inline void huge_is_parked(const aabr_poly *p, float a, float c, float s, int32_t *state, int32_t o[4]) {
    (void)a, (void)state;
    if (fabsf(p->x[0]) + fabsf(p->y[0]) > 1e12f) { /* "that far out it is a parked object" */
        o[0] = o[1] = o[2] = o[3] = 0;
        return;
    }
    far_scan(p, c, s, o);
}
AABR_KERNEL(huge_is_parked, , "", "aabr scalar", .known_bad = 1,
            .summary = "test only: vertex 0 for every side of a polygon beyond 1e12");
