/* Test-only: basic's predicate (kernels_c/sector/scalar.c), for the test kernels that wrap it
 * (unruly_kernels.c, fpenv_at_load.c): their answers are then a well-behaved kernel's. */
#ifndef TEST_BASIC_PREDICATE_H
#define TEST_BASIC_PREDICATE_H

static inline int basic_predicate(float cx, float cy, float ux, float uy, float r2, float cos_theta, float px,
                                  float py) {
    const float dx = px - cx, dy = py - cy;
    const float squared_length = dx * dx + dy * dy;
    if (!(squared_length < r2))
        return 0;
    return dx * ux + dy * uy > sqrtf(squared_length) * cos_theta;
}

#endif
