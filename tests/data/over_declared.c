/* Test-only: kernels that are wrong by logic and declare a rounding bound or a tolerance
 * large enough to excuse it (a probe's three): verify caps what a row may declare. */
#include "aabr.h"

static inline int ignores_angle(float cx, float cy, float ux, float uy, float r, float theta, float px, float py) {
    (void)ux, (void)uy, (void)theta;
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s < r * r && s > 0;  /* the whole disc */
}
SB_KERNEL(ignores_angle, SCALAR, 1, (cx, cy, ux, uy, r, theta), .family = "sector", .known_bad = 1,
          .tolerance = 10, .contract = "unit u", .summary = "test only: no angle test, tolerance 10 rad");

static inline int always_inside(float ax, float ay, float bx, float by, float cx, float cy, float px, float py) {
    (void)ax, (void)ay, (void)bx, (void)by, (void)cx, (void)cy, (void)px, (void)py;
    return 1;
}
SB_KERNEL(always_inside, SCALAR, 1, (ax, ay, bx, by, cx, cy), .family = "triangle", .known_bad = 1,
          .tolerance = 1e30, .rounding_bound = 1e30, .summary = "test only: return 1, tolerance and bound 1e30");

static inline void vertex_zero(const aabr_poly *p, float a, float c, float s, int32_t *state, int32_t o[4]) {
    (void)p, (void)a, (void)c, (void)s, (void)state;
    o[0] = o[1] = o[2] = o[3] = 0;
}
AABR_KERNEL(vertex_zero, , "", "scalar", .known_bad = 1, .rounding_bound = 1e30,
            .summary = "test only: vertex 0 for every extreme, bound 1e30");

/* Declarations out of range: a negative bound (verify FAILed a correct kernel on 707 rows under
 * it), a NaN tolerance, a blocking factor whose block's hits overflow the 32-bit count. */
#define DECLARES_BADLY(name)                                                                             \
    static inline int name(float cx, float cy, float ux, float uy, float r, float theta, float px, float py) { \
        const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;                                   \
        return s < r * r && dx * ux + dy * uy > sqrtf(s) * cosf(theta);                                  \
    }
DECLARES_BADLY(declares_negative_bound)
DECLARES_BADLY(declares_nan_tolerance)
DECLARES_BADLY(declares_block_16)
SB_KERNEL(declares_negative_bound, SCALAR, 1, (cx, cy, ux, uy, r, theta), .family = "sector", .known_bad = 1,
          .rounding_bound = -5, .summary = "test only: rounding bound -5");
SB_KERNEL(declares_nan_tolerance, SCALAR, 1, (cx, cy, ux, uy, r, theta), .family = "sector", .known_bad = 1,
          .tolerance = 0.0 / 0.0, .summary = "test only: tolerance NaN");
SB_KERNEL(declares_block_16, SCALAR, 16, (cx, cy, ux, uy, r, theta), .family = "sector", .known_bad = 1,
          .summary = "test only: blocking factor 16");

/* A hand-made row declaring 65 lanes, one past the cap: 4096 (a loop tiled over 4096 points)
 * had verify check 8193 tail lengths and 4095 shifts, each a scene for every kernel beside it
 * (hours for basic). */
DECLARES_BADLY(declares_lanes_65)
SB_KERNEL_LOOPS(declares_lanes_65, SCALAR, 1, (cx, cy, ux, uy, r, theta))
static const sb_kernel declares_lanes_65_row = {
    .name = "declares_lanes_65", .family = "sector", .takes = "(cx, cy, ux, uy, r, theta)", .isa = "",
    .loop = "scalar b1", .summary = "test only: 65 lanes, one past the cap", .contract = "", .source = __FILE__,
    .line = __LINE__, .lanes = 65, .block = 1, .known_bad = 1,
    .count_inline = declares_lanes_65_count_inline, .count_call = declares_lanes_65_count_call,
    .noop_inline = declares_lanes_65_noop_inline, .noop_call = declares_lanes_65_noop_call,
    .eval_grid = declares_lanes_65_eval_grid, .eval_pairs = declares_lanes_65_eval_pairs};
SB_REGISTER(declares_lanes_65_row);
