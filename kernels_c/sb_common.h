/* C-only helpers shared by the kernel files: includes, the kernel registration
 * macro, optimisation barriers, and the loop templates every kernel gets.
 *
 * A kernel file writes a predicate and one SB_*_KERNEL(...) line; the macro
 * generates its four loops (count inline, count through a pointer, evaluate a
 * grid, evaluate pairs) and registers its table row.  No Python or cdef change.
 */
#ifndef SB_COMMON_H
#define SB_COMMON_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "sb_abi.h"

#if defined(__x86_64__) || defined(__i386__)
#define SB_X86 1
#include <immintrin.h>
#endif

#define SB_TARGET(features) __attribute__((target(features)))

/* Registration: each row's address goes into the "sb_kernels" section; the
 * linker collects all of them (from any file, tests' extra files included)
 * between __start_sb_kernels and __stop_sb_kernels.  The pointer is writable
 * data so the shared object needs no text relocations. */
#define SB_REGISTER(row_ident)                                                 \
    __attribute__((used, section("sb_kernels"), aligned(sizeof(void *))))      \
    static const sb_kernel *row_ident##_entry = &row_ident;

/* Barriers: the compiler must assume the value is used / may have changed.
 * They keep NoOperation loops from being optimised away at any flag set. */
#if defined(SB_X86)
#define SB_USE_FLOAT(x) __asm__ volatile("" : : "x"(x))
#elif defined(__aarch64__)
#define SB_USE_FLOAT(x) __asm__ volatile("" : : "w"(x))
#else
#define SB_USE_FLOAT(x) __asm__ volatile("" : : "g"(x))
#endif
#define SB_USE_VECTOR(v) __asm__ volatile("" : : "x"(v))
/* Hides a function pointer's target so calls through it stay indirect calls. */
#define SB_LAUNDER(p) __asm__("" : "+r"(p))

#define SB_POPCOUNT(mask) ((uint64_t)__builtin_popcount((unsigned)(mask)))

/* ------------------------------------------------------------------------ */
/* Scalar kernels of any family: int pred(q1..q6, px, py), where q1..q6 are  */
/* the six per-shape arrays FAM.F1..F6 the kernel takes.                     */

/* for every shape i and point j: hit = call(shape i's values, p_j); on_hit */
#define SB_SCALAR_LOOP(s, call, FAM, F1, F2, F3, F4, F5, F6, on_hit)          \
    for (int64_t i = 0; i < (s)->n_shapes; i++) {                              \
        const float q1 = (s)->FAM.F1[i], q2 = (s)->FAM.F2[i];                  \
        const float q3 = (s)->FAM.F3[i], q4 = (s)->FAM.F4[i];                  \
        const float q5 = (s)->FAM.F5[i], q6 = (s)->FAM.F6[i];                  \
        for (int64_t j = 0; j < (s)->n_points; j++) {                          \
            const int hit = call(q1, q2, q3, q4, q5, q6, (s)->px[j], (s)->py[j]); \
            on_hit;                                                            \
        }                                                                      \
    }

#define SB_SCALAR_KERNEL(kname, pred, family_, FAM, F1, F2, F3, F4, F5, F6,    \
                         params_, overhead_, bound, tolerance_, flags_,        \
                         summary_)                                             \
    static uint64_t kname##_count_inline(const sb_scene *s) {                  \
        uint64_t hits = 0;                                                     \
        SB_SCALAR_LOOP(s, pred, FAM, F1, F2, F3, F4, F5, F6, hits += (uint64_t)hit) \
        return hits;                                                           \
    }                                                                          \
    static uint64_t kname##_count_call(const sb_scene *s) {                    \
        uint64_t hits = 0;                                                     \
        __typeof__(&pred) fn = pred;                                           \
        SB_LAUNDER(fn);                                                        \
        SB_SCALAR_LOOP(s, fn, FAM, F1, F2, F3, F4, F5, F6, hits += (uint64_t)hit) \
        return hits;                                                           \
    }                                                                          \
    static void kname##_eval_grid(const sb_scene *s, uint8_t *out) {           \
        SB_SCALAR_LOOP(s, pred, FAM, F1, F2, F3, F4, F5, F6,                   \
                       out[i * s->stride + j] = (uint8_t)hit)                  \
    }                                                                          \
    static void kname##_eval_pairs(const sb_scene *s, uint8_t *out) {          \
        for (int64_t j = 0; j < s->n_points; j++)                              \
            out[j] = (uint8_t)pred(s->FAM.F1[j], s->FAM.F2[j], s->FAM.F3[j],   \
                                   s->FAM.F4[j], s->FAM.F5[j], s->FAM.F6[j],   \
                                   s->px[j], s->py[j]);                        \
    }                                                                          \
    static const sb_kernel kname##_row = {                                     \
        #kname, family_, "", overhead_, params_, summary_, __FILE__, __LINE__, \
        1, flags_, bound, tolerance_, kname##_count_inline,                    \
        kname##_count_call, kname##_eval_grid, kname##_eval_pairs};            \
    SB_REGISTER(kname##_row)

/* pred(cx, cy, ux, uy, R, T, px, py) with R, T = r, theta or r2, cos_theta */
#define SB_SECTOR_SCALAR_KERNEL(kname, pred, R, T, overhead_, bound, flags_,   \
                                summary_)                                      \
    SB_SCALAR_KERNEL(kname, pred, "sector", sector, cx, cy, ux, uy, R, T,      \
                     #R "," #T, overhead_, bound, 0.0, flags_, summary_)

/* pred(ax, ay, bx, by, cx, cy, px, py); tolerance 0 for a strict kernel */
#define SB_TRIANGLE_SCALAR_KERNEL(kname, pred, overhead_, bound, tolerance_,   \
                                  flags_, summary_)                            \
    SB_SCALAR_KERNEL(kname, pred, "triangle", triangle, ax, ay, bx, by, cx, cy, \
                     "a,b,c", overhead_, bound, tolerance_, flags_, summary_)

/* ------------------------------------------------------------------------ */
/* SIMD sector kernels (structure of arrays, W lanes):                       */
/* RESULT pred(VEC cx, cy, ux, uy, r2, cos_theta, px, py); MASK_OF(RESULT)    */
/* gives one bit per lane.  Lanes past n_points are masked off, so padding   */
/* can never count, whatever the flags do to NaN comparisons.                */

#define SB_SECTOR_SIMD_LOOP(s, call, VEC, W, SET1, LOAD, MASK_OF, on_block)    \
    const int64_t full_end = (s)->n_points - (s)->n_points % (W);              \
    const unsigned tail_mask = (1u << ((s)->n_points % (W))) - 1u;             \
    for (int64_t i = 0; i < (s)->n_shapes; i++) {                              \
        const VEC cx = SET1((s)->sector.cx[i]), cy = SET1((s)->sector.cy[i]);  \
        const VEC ux = SET1((s)->sector.ux[i]), uy = SET1((s)->sector.uy[i]);  \
        const VEC r2 = SET1((s)->sector.r2[i]);                                \
        const VEC ct = SET1((s)->sector.cos_theta[i]);                         \
        int64_t j = 0;                                                         \
        for (; j < full_end; j += (W)) {                                       \
            const unsigned mask = (unsigned)MASK_OF(call(                      \
                cx, cy, ux, uy, r2, ct, LOAD((s)->px + j), LOAD((s)->py + j)));\
            on_block;                                                          \
        }                                                                      \
        if (j < (s)->n_points) {                                               \
            const unsigned mask = tail_mask & (unsigned)MASK_OF(call(          \
                cx, cy, ux, uy, r2, ct, LOAD((s)->px + j), LOAD((s)->py + j)));\
            on_block;                                                          \
        }                                                                      \
    }

#define SB_STORE_MASK_BITS(dst, mask, W)                                       \
    for (int k = 0; k < (W); k++) (dst)[k] = (uint8_t)(((mask) >> k) & 1u)

#define SB_SECTOR_SIMD_KERNEL(kname, pred, isa_, VEC, W, SET1, LOAD, MASK_OF,  \
                              overhead_, bound, flags_, summary_)              \
    SB_TARGET(isa_) static uint64_t kname##_count_inline(const sb_scene *s) {  \
        uint64_t hits = 0;                                                     \
        SB_SECTOR_SIMD_LOOP(s, pred, VEC, W, SET1, LOAD, MASK_OF,              \
                            hits += SB_POPCOUNT(mask))                         \
        return hits;                                                           \
    }                                                                          \
    SB_TARGET(isa_) static uint64_t kname##_count_call(const sb_scene *s) {    \
        uint64_t hits = 0;                                                     \
        __typeof__(&pred) fn = pred;                                           \
        SB_LAUNDER(fn);                                                        \
        SB_SECTOR_SIMD_LOOP(s, fn, VEC, W, SET1, LOAD, MASK_OF,                \
                            hits += SB_POPCOUNT(mask))                         \
        return hits;                                                           \
    }                                                                          \
    SB_TARGET(isa_) static void kname##_eval_grid(const sb_scene *s,           \
                                                  uint8_t *out) {              \
        SB_SECTOR_SIMD_LOOP(s, pred, VEC, W, SET1, LOAD, MASK_OF,              \
                            SB_STORE_MASK_BITS(out + i * s->stride + j, mask, W)) \
    }                                                                          \
    SB_TARGET(isa_) static void kname##_eval_pairs(const sb_scene *s,          \
                                                   uint8_t *out) {             \
        const sb_sectors *sec = &s->sector;                                    \
        for (int64_t j = 0; j < s->n_points; j += (W)) {                       \
            const unsigned mask = (unsigned)MASK_OF(pred(                      \
                LOAD(sec->cx + j), LOAD(sec->cy + j), LOAD(sec->ux + j),       \
                LOAD(sec->uy + j), LOAD(sec->r2 + j),                          \
                LOAD(sec->cos_theta + j), LOAD(s->px + j), LOAD(s->py + j)));  \
            SB_STORE_MASK_BITS(out + j, mask, W);                              \
        }                                                                      \
    }                                                                          \
    static const sb_kernel kname##_row = {                                     \
        #kname, "sector", isa_, overhead_, "r2,cos_theta", summary_, __FILE__, __LINE__, W,        \
        flags_, bound, 0.0, kname##_count_inline, kname##_count_call,          \
        kname##_eval_grid, kname##_eval_pairs};                                \
    SB_REGISTER(kname##_row)

#endif
