/* Test-only: an aabr kernel that rotates its polygon in place (its `const` cast away), the
 * mistake a user's first try at the question makes.  Its input is the scene every kernel
 * after it reads. */
#include "aabr.h"

static inline void rotates_in_place(const aabr_poly *p, float a, float c, float s, int32_t *state,
                                    int32_t o[4]) {
    (void)a, (void)state;
    float *x = (float *)p->x, *y = (float *)p->y;
    for (int32_t i = 0; i < p->n; i++) {
        const float rx = c * x[i] - s * y[i], ry = s * x[i] + c * y[i];
        x[i] = rx;
        y[i] = ry;
    }
    int32_t max_x = 0, max_y = 0, min_x = 0, min_y = 0;
    for (int32_t i = 1; i < p->n; i++) {
        max_x = x[i] > x[max_x] ? i : max_x;
        max_y = y[i] > y[max_y] ? i : max_y;
        min_x = x[i] < x[min_x] ? i : min_x;
        min_y = y[i] < y[min_y] ? i : min_y;
    }
    o[0] = max_x, o[1] = max_y, o[2] = min_x, o[3] = min_y;
}
AABR_KERNEL(rotates_in_place, , "", "scalar", .summary = "test only: writes into its input");

/* The same, after making the read-only pages writable again, as a kernel "fixing" its
 * segmentation fault would. */
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

static void unprotect(const float *values, int32_t n) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t begin = (uintptr_t)values & ~(page - 1), end = (uintptr_t)(values + n);
    mprotect((void *)begin, end - begin, PROT_READ | PROT_WRITE);
}
static inline void unprotects_and_rotates(const aabr_poly *p, float a, float c, float s, int32_t *state,
                                          int32_t o[4]) {
    unprotect(p->x, p->n);
    unprotect(p->y, p->n);
    rotates_in_place(p, a, c, s, state, o);
}
AABR_KERNEL(unprotects_and_rotates, , "", "scalar", .summary = "test only: mprotect()s its input writable");
