/* Test-only: deliberately broken kernels that `verify` must catch as logic bugs. */
#include "sb_common.h"

/* <= instead of < on the radius: points exactly on the arc count as inside. */
static inline int radius_le(float cx, float cy, float ux, float uy, float r2,
                            float cos_theta, float px, float py) {
    const float dx = px - cx, dy = py - cy;
    const float squared_length = dx * dx + dy * dy;
    if (!(squared_length <= r2))
        return 0;
    return dx * ux + dy * uy > sqrtf(squared_length) * cos_theta;
}

/* The no-sqrt kernel without its both-negative case (squares compared as if
 * both sides were positive): wrong for wide sectors, far from any boundary. */
static inline int missing_sign_case(float cx, float cy, float ux, float uy, float r2,
                                    float cos_theta, float px, float py) {
    const float dx = px - cx, dy = py - cy;
    const float squared_length = dx * dx + dy * dy;
    if (!(squared_length < r2))
        return 0;
    const float d_dot_u = dx * ux + dy * uy;
    if (d_dot_u >= 0 && cos_theta >= 0)
        return d_dot_u * d_dot_u > squared_length * cos_theta * cos_theta;
    return d_dot_u >= 0 && squared_length > 0;
}

/* The article's unequal-sign branch: `return a >= 0` counts the apex inside. */
static inline int apex_inside(float cx, float cy, float ux, float uy, float r2,
                              float cos_theta, float px, float py) {
    const float dx = px - cx, dy = py - cy;
    const float squared_length = dx * dx + dy * dy;
    if (!(squared_length < r2))
        return 0;
    const float d_dot_u = dx * ux + dy * uy;
    if (d_dot_u >= 0 && cos_theta >= 0)
        return d_dot_u * d_dot_u > squared_length * cos_theta * cos_theta;
    if (d_dot_u < 0 && cos_theta < 0)
        return d_dot_u * d_dot_u < squared_length * cos_theta * cos_theta;
    return d_dot_u >= 0;
}

/* The article's naive kernel without the clamp: acosf(1.00000012) is NaN. */
static inline int naive_unclamped(float cx, float cy, float ux, float uy, float r,
                                  float theta, float px, float py) {
    float dx = px - cx, dy = py - cy;
    const float length = sqrtf(dx * dx + dy * dy);
    if (!(length < r) || length == 0.0f)
        return 0;
    dx /= length;
    dy /= length;
    return acosf(dx * ux + dy * uy) < theta;
}

SB_SECTOR_SCALAR_KERNEL(radius_le, radius_le, r2, cos_theta, "noop", 8, SB_NOT_DEFAULT, "broken: <= on the radius")
SB_SECTOR_SCALAR_KERNEL(missing_sign_case, missing_sign_case, r2, cos_theta, "noop", 8, SB_NOT_DEFAULT,
                        "broken: no both-negative case")
SB_SECTOR_SCALAR_KERNEL(apex_inside, apex_inside, r2, cos_theta, "noop", 8, SB_NOT_DEFAULT,
                        "broken: the article's apex rule")
SB_SECTOR_SCALAR_KERNEL(naive_unclamped, naive_unclamped, r, theta, "noop", 16, SB_NOT_DEFAULT,
                        "broken: acosf of a cosine above 1")
