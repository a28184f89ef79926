/* Test-only: rows that change what they were given, after their own loop on their first call,
 * each found by a probe to cost other rows: the sb_scene struct written through its cast-away
 * const (one struct serves every row of a loop shape and their NoOperation twins: a halved
 * n_points halved every later row's hits, `never = -inf` made every NoOperation count), the
 * scene's pages unmapped or made unreadable (verify's next kernel in the worker crashed), and a
 * .release() that aborts from its third call, the first one made as the next scene is loaded
 * (verify died as a whole: "worker killed by signal 6"), and one that changes its process there
 * instead (the replaced worker reloaded the scene verify had already deleted: verify ended). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sb_common.h"

static inline int scene_basic(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s < r2 && dx * ux + dy * uy > sqrtf(s) * k;
}
SB_KERNEL_LOOPS(scene_basic, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta))

#define SCENE_CHANGER(kname, act)                                                                      \
    static int kname##_done;                                                                           \
    static void kname##_act(sb_scene *s) {                                                             \
        if (!kname##_done) {                                                                           \
            kname##_done = 1;                                                                          \
            act;                                                                                       \
        }                                                                                              \
    }                                                                                                  \
    static uint64_t kname##_count_inline(const sb_scene *s) {                                          \
        const uint64_t hits = scene_basic_count_inline(s);                                             \
        kname##_act((sb_scene *)s);                                                                    \
        return hits;                                                                                   \
    }                                                                                                  \
    static uint64_t kname##_count_call(const sb_scene *s) {                                            \
        const uint64_t hits = scene_basic_count_call(s);                                               \
        kname##_act((sb_scene *)s);                                                                    \
        return hits;                                                                                   \
    }                                                                                                  \
    static void kname##_eval_grid(const sb_scene *s, void *out) {                                      \
        scene_basic_eval_grid(s, out);                                                                 \
        kname##_act((sb_scene *)s);                                                                    \
    }                                                                                                  \
    static void kname##_eval_pairs(const sb_scene *s, void *out) {                                     \
        scene_basic_eval_pairs(s, out);                                                                \
        kname##_act((sb_scene *)s);                                                                    \
    }                                                                                                  \
    static const sb_kernel kname##_row = {SB_ROW_FIELDS(kname, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta)), \
                                          .family = "sector",                                          \
                                          .known_bad = 1,                                              \
                                          .summary = "test only: changes the scene it was given",      \
                                          .count_inline = kname##_count_inline,                        \
                                          .count_call = kname##_count_call,                            \
                                          .noop_inline = scene_basic_noop_inline,                      \
                                          .noop_call = scene_basic_noop_call,                          \
                                          .eval_grid = kname##_eval_grid,                              \
                                          .eval_pairs = kname##_eval_pairs};                           \
    SB_REGISTER(kname##_row)

/* The pages of the scene's first point array (a memfd mapping of its own). */
static void point_pages(const sb_scene *s, void **begin, size_t *length) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), start = (uintptr_t)s->point[0] & ~(page - 1);
    *begin = (void *)start;
    *length = (uintptr_t)(s->point[0] + s->stride) - start;
}
static void unmap_points(const sb_scene *s) {
    void *begin;
    size_t length;
    point_pages(s, &begin, &length);
    munmap(begin, length);
}
static void protect_points(const sb_scene *s) {
    void *begin;
    size_t length;
    point_pages(s, &begin, &length);
    mprotect(begin, length, PROT_NONE);
}

SCENE_CHANGER(halves_its_scene, s->n_points /= 2);
SCENE_CHANGER(moves_never, s->never = -s->never); /* +inf to -inf (no INFINITY: -ffast-math warns) */
SCENE_CHANGER(unmaps_its_scene, unmap_points(s));
SCENE_CHANGER(protects_its_scene, protect_points(s));

static void *kept_index(const sb_scene *s) {
    (void)s;
    return malloc(16);
}
static int releases;
static void release_from_the_third(void *index) {
    if (++releases >= 3)
        abort();
    free(index);
}
static inline int release_crashes(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    return scene_basic(cx, cy, ux, uy, r2, k, px, py);
}
SB_KERNEL(release_crashes, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .known_bad = 1,
          .summary = "test only: its .release() aborts from its third call", .prepare = kept_index,
          .release = release_from_the_third);

static int umask_releases;
static void release_changing_umask(void *index) {
    if (++umask_releases >= 3)
        umask(077);
    free(index);
}
static inline int release_changes_umask(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    return scene_basic(cx, cy, ux, uy, r2, k, px, py);
}
SB_KERNEL(release_changes_umask, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .known_bad = 1,
          .summary = "test only: its .release() changes the umask from its third call", .prepare = kept_index,
          .release = release_changing_umask);
