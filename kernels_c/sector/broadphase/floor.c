/* The floor a broadphase is measured against: read the points once and write as many int32 as
 * the hits once, at this machine's memory bandwidth (see bp_internal.h for the broadphase's
 * files).  Integer xor, not a float sum, so that -O2 vectorises it without reassociation. */
#include "bp_internal.h"

uint32_t sb_bp_stream(const float *px, const float *py, int64_t m, int32_t *out, int64_t nout) {
    uint32_t acc = 0;
    for (int64_t j = 0; j < m; j++)
        acc ^= bp_bits32(px[j]) ^ bp_bits32(py[j]);
    for (int64_t j = 0; j < nout; j++)
        out[j] = (int32_t)((uint32_t)j ^ acc);
    return acc;
}
