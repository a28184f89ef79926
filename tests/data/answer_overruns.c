/* Test-only: rows whose eval_grid and eval_pairs write their answers, then bytes past the end
 * of the buffer they were given (its size: N x stride answers for the grid, stride for the
 * pairs), as an off-by-a-vector store loop does.  In a heap buffer a few bytes went unnoticed
 * (the row passed verify) and a few dozen broke malloc's records, wherever that was met next. */
#include <stdint.h>
#include <string.h>

#include "sb_common.h"
#include "basic_predicate.h"

static inline int overrun_basic(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    return basic_predicate(cx, cy, ux, uy, r2, k, px, py);
}
SB_KERNEL_LOOPS(overrun_basic, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta))

#define OVERRUN(kname, bytes)                                                                          \
    static void kname##_grid(const sb_scene *s, void *out) {                                           \
        overrun_basic_eval_grid(s, out);                                                               \
        memset((uint8_t *)out + s->n_shapes * s->stride, 0x5a, (bytes));                               \
    }                                                                                                  \
    static void kname##_pairs(const sb_scene *s, void *out) {                                          \
        overrun_basic_eval_pairs(s, out);                                                              \
        memset((uint8_t *)out + s->stride, 0x5a, (bytes));                                             \
    }                                                                                                  \
    static const sb_kernel kname##_row = {SB_ROW_FIELDS(kname, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta)), \
                                          .family = "sector",                                          \
                                          .known_bad = 1,                                              \
                                          .summary = "test only: writes " #bytes " bytes past its answers", \
                                          .count_inline = overrun_basic_count_inline,                  \
                                          .count_call = overrun_basic_count_call,                      \
                                          .noop_inline = overrun_basic_noop_inline,                    \
                                          .noop_call = overrun_basic_noop_call,                        \
                                          .eval_grid = kname##_grid,                                   \
                                          .eval_pairs = kname##_pairs};                                \
    SB_REGISTER(kname##_row)

OVERRUN(overruns_by_8, 8);
OVERRUN(overruns_by_4k, 4096);
