/* C-only helpers shared by the kernel files: includes, registration, barriers,
 * and the loop templates every predicate kernel gets.
 *
 * A kernel of a boolean family (a predicate: is point p inside shape q?) is one
 * predicate function and one row:
 *
 *     static inline int basic(float cx, float cy, float ux, float uy, float r2,
 *                             float cos_theta, float px, float py) { ... }
 *     SB_KERNEL(basic, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta),
 *               .family = "<its family>", .rounding_bound = 8,
 *               .summary = "...");
 *
 * The positional arguments say how to generate the loops: the instruction set
 * (SCALAR, SSE2, AVX2, AVX2_FMA, AVX512: lanes, vector type, mask type), the
 * blocking factor (shapes tested per load of points: 1, 2, 4 or 8) and the shape
 * arrays the predicate takes, in its parameter order (the worker passes exactly
 * those, so the tuple must name arrays of the family).  Everything else is a named
 * field of the row (sb_abi.h); fields left out are 0, which means "the default".
 * The macro generates the six loops (count inline, count through a pointer, their
 * two NoOperation twins, evaluate a grid, evaluate pairs) and registers the row.
 * No Python or cdef change.
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
/* SB_ROWS_ONLY: kernel_index (native/build.py) preprocesses the files only to read their
 * kernel rows; the intrinsics' declarations are 2 MB of its output per file. */
#if !defined(SB_ROWS_ONLY)
#include <immintrin.h>
#endif
#endif

#define SB_CAT_(a, b) a##b
#define SB_CAT(a, b) SB_CAT_(a, b)
#define SB_STR_(x) #x
#define SB_STR(x) SB_STR_(x)

/* Registration: each row's address goes into the "sb_kernels" section; the
 * linker collects all of them (from any file, tests' extra files included)
 * between __start_sb_kernels and __stop_sb_kernels.  The pointer is writable
 * data so the shared object needs no text relocations. */
#define SB_REGISTER(row_ident)                                                 \
    __attribute__((used, section("sb_kernels"), aligned(sizeof(void *))))      \
    static const sb_kernel *row_ident##_entry = &row_ident

/* Hides a function pointer's target so calls through it stay indirect calls. */
#define SB_LAUNDER(p) __asm__("" : "+r"(p))

/* Pins a vector product so the compiler cannot fuse it into a multiply-add: gcc
 * contracts a*b + c into FMA (another rounding) wherever the target has FMA, even at
 * -O2 inside target("avx512f") functions.  Emits no instruction. */
#define SB_NO_CONTRACT(v) __asm__("" : "+v"(v))

/* A float the compiler cannot see through: each call is a distinct unknown value. */
static inline float sb_opaque(float x) {
    __asm__("" : "+x"(x));
    return x;
}

/* ------------------------------------------------------------------------ */
/* Arity: a kernel's `takes` tuple, e.g. (cx, cy, ux, uy, r2, cos_theta),    */
/* gives K, the number of shape values it receives before (px, py).          */

#define SB_NARGS_(_1, _2, _3, _4, _5, _6, _7, _8, N, ...) N
#define SB_NARGS(...) SB_NARGS_(__VA_ARGS__, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define SB_ARITY(takes) SB_NARGS takes

/* a[0], ..., a[K-1] */
#define SB_ITEMS_1(a) a[0]
#define SB_ITEMS_2(a) SB_ITEMS_1(a), a[1]
#define SB_ITEMS_3(a) SB_ITEMS_2(a), a[2]
#define SB_ITEMS_4(a) SB_ITEMS_3(a), a[3]
#define SB_ITEMS_5(a) SB_ITEMS_4(a), a[4]
#define SB_ITEMS_6(a) SB_ITEMS_5(a), a[5]
#define SB_ITEMS_7(a) SB_ITEMS_6(a), a[6]
#define SB_ITEMS_8(a) SB_ITEMS_7(a), a[7]
#define SB_ITEMS(K, a) SB_CAT(SB_ITEMS_, K)(a)

/* T q0, ..., T q(K-1): a NoOperation predicate's unused shape parameters */
#define SB_PARAMS_1(T) __attribute__((unused)) T q0
#define SB_PARAMS_2(T) SB_PARAMS_1(T), __attribute__((unused)) T q1
#define SB_PARAMS_3(T) SB_PARAMS_2(T), __attribute__((unused)) T q2
#define SB_PARAMS_4(T) SB_PARAMS_3(T), __attribute__((unused)) T q3
#define SB_PARAMS_5(T) SB_PARAMS_4(T), __attribute__((unused)) T q4
#define SB_PARAMS_6(T) SB_PARAMS_5(T), __attribute__((unused)) T q5
#define SB_PARAMS_7(T) SB_PARAMS_6(T), __attribute__((unused)) T q6
#define SB_PARAMS_8(T) SB_PARAMS_7(T), __attribute__((unused)) T q7
#define SB_PARAMS(K, T) SB_CAT(SB_PARAMS_, K)(T)

/* ------------------------------------------------------------------------ */
/* Instruction sets.  Each descriptor X gives:                               */
/*   SB_X_NAME      loop-shape label          SB_X_FEATURES  CPU features     */
/*   SB_X_ATTR      function attribute        SB_X_W         lanes            */
/*   SB_X_VEC       value type of one step    SB_X_RESULT    predicate result */
/*   SB_X_SET1(x)   broadcast a float         SB_X_LOAD(p)   load W floats    */
/*   SB_X_BITS(r)   result as lane bits       SB_X_COUNT(b)  set lanes        */
/*   SB_X_NOOP(never, px, py)  px + py > never, with never = +inf loaded at   */
/*                  run time: false for every input (a finite sum, one that    */
/*                  overflows to +inf, NaN), yet the compiler cannot fold it,  */
/*                  so the NoOperation loop keeps the kernel's loads and its   */
/*                  counting, and vectorises wherever the kernel's loop does.  */

#define SB_SCALAR_NAME "scalar"
#define SB_SCALAR_FEATURES ""
#define SB_SCALAR_ATTR
#define SB_SCALAR_W 1
#define SB_SCALAR_VEC float
#define SB_SCALAR_RESULT int
#define SB_SCALAR_SET1(x) (x)
#define SB_SCALAR_LOAD(p) (*(p))
#define SB_SCALAR_BITS(r) ((unsigned)((r) != 0))
#define SB_SCALAR_COUNT(bits) ((uint64_t)(bits))
#define SB_SCALAR_NOOP(never, px, py) ((px) + (py) > (never))

#if defined(SB_X86)
/* Set bits of a 4- or 8-bit lane mask: a nibble table in one 64-bit constant, since
 * SSE2 and AVX2 targets need not have popcnt (without it gcc calls libgcc, whose
 * call also spills every vector register). */
#define SB_NIBBLE_BITS(n) ((0x4332322132212110ull >> ((n) * 4)) & 0xFu)
#define SB_POPCOUNT4(bits) SB_NIBBLE_BITS((bits) & 0xFu)
#define SB_POPCOUNT8(bits) (SB_NIBBLE_BITS((bits) & 0xFu) + SB_NIBBLE_BITS(((bits) >> 4) & 0xFu))

#define SB_SSE2_NAME "sse2 x4"
#define SB_SSE2_FEATURES "sse2"
#define SB_SSE2_ATTR __attribute__((target("sse2")))
#define SB_SSE2_W 4
#define SB_SSE2_VEC __m128
#define SB_SSE2_RESULT __m128
#define SB_SSE2_SET1(x) _mm_set1_ps(x)
#define SB_SSE2_LOAD(p) _mm_load_ps(p)
#define SB_SSE2_BITS(r) ((unsigned)_mm_movemask_ps(r))
#define SB_SSE2_COUNT(bits) SB_POPCOUNT4(bits)
#define SB_SSE2_NOOP(never, px, py) _mm_cmpgt_ps(_mm_add_ps(px, py), never)

#define SB_AVX2_NAME "avx2 x8"
#define SB_AVX2_FEATURES "avx2"
#define SB_AVX2_ATTR __attribute__((target("avx2")))
#define SB_AVX2_W 8
#define SB_AVX2_VEC __m256
#define SB_AVX2_RESULT __m256
#define SB_AVX2_SET1(x) _mm256_set1_ps(x)
#define SB_AVX2_LOAD(p) _mm256_load_ps(p)
#define SB_AVX2_BITS(r) ((unsigned)_mm256_movemask_ps(r))
#define SB_AVX2_COUNT(bits) SB_POPCOUNT8(bits)
#define SB_AVX2_NOOP(never, px, py) _mm256_cmp_ps(_mm256_add_ps(px, py), never, _CMP_GT_OQ)

/* AVX2 with FMA: the same loop shape, for kernels that fuse on purpose. */
#define SB_AVX2_FMA_NAME "avx2+fma x8"
#define SB_AVX2_FMA_FEATURES "avx2,fma"
#define SB_AVX2_FMA_ATTR __attribute__((target("avx2,fma")))
#define SB_AVX2_FMA_W SB_AVX2_W
#define SB_AVX2_FMA_VEC SB_AVX2_VEC
#define SB_AVX2_FMA_RESULT SB_AVX2_RESULT
#define SB_AVX2_FMA_SET1 SB_AVX2_SET1
#define SB_AVX2_FMA_LOAD SB_AVX2_LOAD
#define SB_AVX2_FMA_BITS SB_AVX2_BITS
#define SB_AVX2_FMA_COUNT SB_AVX2_COUNT
#define SB_AVX2_FMA_NOOP SB_AVX2_NOOP

/* AVX-512: compares write a __mmask16 directly, so the predicate returns it. */
#define SB_AVX512_NAME "avx512 x16"
#define SB_AVX512_FEATURES "avx512f,avx512dq,popcnt"
#define SB_AVX512_ATTR __attribute__((target("avx512f,avx512dq,popcnt")))
#define SB_AVX512_W 16
#define SB_AVX512_VEC __m512
#define SB_AVX512_RESULT __mmask16
#define SB_AVX512_SET1(x) _mm512_set1_ps(x)
#define SB_AVX512_LOAD(p) _mm512_load_ps(p)
#define SB_AVX512_BITS(r) ((unsigned)(r))
#define SB_AVX512_COUNT(bits) ((uint64_t)__builtin_popcount(bits))
#define SB_AVX512_NOOP(never, px, py) _mm512_cmp_ps_mask(_mm512_add_ps(px, py), never, _CMP_GT_OQ)
#endif

#define SB_ISA(X, what) SB_CAT(SB_CAT(SB_, X), SB_CAT(_, what))

/* ------------------------------------------------------------------------ */
/* The loop template of boolean families.                                   */
/*                                                                          */
/* For each block of B shapes in [shape_begin, shape_end): their K values    */
/* broadcast once (SHAPE_VALUE(k, i) gives shape i's k-th value), then for   */
/* every step of W points: px, py loaded once and tested against the B       */
/* shapes.  `bits` holds one bit per lane, the lanes past n_points masked    */
/* off (padding never counts, whatever the flags do to NaN comparisons);     */
/* ON_STEP(X, i, j) consumes them.  Shapes left over after the last whole    */
/* block go one at a time through the same body.                             */

#define SB_LOOP(X, B, K, s, CALL, SHAPE_VALUE, ON_STEP, ON_BLOCK_END)           \
    const int64_t full_end_ = (s)->n_points - (s)->n_points % SB_ISA(X, W);     \
    const unsigned tail_bits_ = (1u << ((s)->n_points % SB_ISA(X, W))) - 1u;    \
    const float *const px_ = (s)->point[0], *const py_ = (s)->point[1];         \
    int64_t i = (s)->shape_begin;                                               \
    for (; i + (B) <= (s)->shape_end; i += (B))                                 \
        SB_BLOCK(X, B, K, s, CALL, SHAPE_VALUE, ON_STEP, ON_BLOCK_END)          \
    for (; i < (s)->shape_end; i++)                                             \
        SB_BLOCK(X, 1, K, s, CALL, SHAPE_VALUE, ON_STEP, ON_BLOCK_END)

/* block_hits_ counts one block's hits in 32 bits (B * M < 2^32, see MAX_POINTS in
 * scenes.py): a 64-bit counter would halve the lanes of a compiler-vectorised loop. */
#define SB_BLOCK(X, B, K, s, CALL, SHAPE_VALUE, ON_STEP, ON_BLOCK_END)          \
    {                                                                           \
        SB_ISA(X, VEC) q_[B][K];                                                \
        __attribute__((unused)) uint32_t block_hits_ = 0;                       \
        _Pragma("GCC unroll 8") for (int b_ = 0; b_ < (B); b_++)                \
            _Pragma("GCC unroll 8") for (int k_ = 0; k_ < (K); k_++)            \
                q_[b_][k_] = SB_ISA(X, SET1)(SHAPE_VALUE(k_, i + b_));          \
        int64_t j = 0;                                                          \
        for (; j < full_end_; j += SB_ISA(X, W)) {                              \
            const SB_ISA(X, VEC) px = SB_ISA(X, LOAD)(px_ + j);                 \
            const SB_ISA(X, VEC) py = SB_ISA(X, LOAD)(py_ + j);                 \
            _Pragma("GCC unroll 8") for (int b_ = 0; b_ < (B); b_++) {          \
                const unsigned bits = SB_ISA(X, BITS)(CALL(SB_ITEMS(K, q_[b_]), px, py)); \
                ON_STEP(X, i + b_, j);                                          \
            }                                                                   \
        }                                                                       \
        if (j < (s)->n_points) {                                                \
            const SB_ISA(X, VEC) px = SB_ISA(X, LOAD)(px_ + j);                 \
            const SB_ISA(X, VEC) py = SB_ISA(X, LOAD)(py_ + j);                 \
            for (int b_ = 0; b_ < (B); b_++) {                                  \
                const unsigned bits =                                           \
                    tail_bits_ & SB_ISA(X, BITS)(CALL(SB_ITEMS(K, q_[b_]), px, py)); \
                ON_STEP(X, i + b_, j);                                          \
            }                                                                   \
        }                                                                       \
        ON_BLOCK_END;                                                           \
    }

#define SB_SHAPE_VALUE(k, i) (s->shape[k][i])
/* Opaque per shape, so a blocked NoOperation keeps B compare-and-count chains (one
 * `never` for all B would be merged into one by common-subexpression elimination). */
#define SB_NEVER_VALUE(k, i) sb_opaque(s->never)
#define SB_COUNT_STEP(X, i_, j_) block_hits_ += (uint32_t)SB_ISA(X, COUNT)(bits)
#define SB_COUNT_BLOCK_END hits += block_hits_
/* lane k of a step is point j + k; a tail's masked lanes write 0 into the row's padding */
#define SB_STORE_STEP(X, i_, j_)                                                \
    for (int k_ = 0; k_ < SB_ISA(X, W); k_++)                                   \
        out[(i_) * s->stride + (j_) + k_] = (uint8_t)((bits >> k_) & 1u)

#define SB_DEFINE_COUNT(fname, X, B, K, PRED, SHAPE_VALUE)                      \
    SB_ISA(X, ATTR) __attribute__((unused)) static uint64_t fname(const sb_scene *s) { \
        uint64_t hits = 0;                                                      \
        SB_LOOP(X, B, K, s, PRED, SHAPE_VALUE, SB_COUNT_STEP, SB_COUNT_BLOCK_END)                   \
        return hits;                                                            \
    }

#define SB_DEFINE_COUNT_CALL(fname, X, B, K, PRED, SHAPE_VALUE)                 \
    SB_ISA(X, ATTR) __attribute__((unused)) static uint64_t fname(const sb_scene *s) { \
        uint64_t hits = 0;                                                      \
        __typeof__(&PRED) fn = PRED;                                            \
        SB_LAUNDER(fn);                                                         \
        SB_LOOP(X, B, K, s, fn, SHAPE_VALUE, SB_COUNT_STEP, SB_COUNT_BLOCK_END)                     \
        return hits;                                                            \
    }

/* The loops of a kernel, without its row: kname##_count_inline, _count_call,
 * _noop_inline, _noop_call, _eval_grid, _eval_pairs.  A row with a hand-written loop
 * (see tests/data/mutants.c) takes the generated ones it does not replace. */
#define SB_KERNEL_LOOPS(kname, X, B, TAKES)                                      \
    SB_ISA(X, ATTR) static inline SB_ISA(X, RESULT) kname##_noop_(              \
        SB_PARAMS(SB_ARITY(TAKES), SB_ISA(X, VEC)), SB_ISA(X, VEC) px, SB_ISA(X, VEC) py) { \
        return SB_ISA(X, NOOP)(q0, px, py);                                     \
    }                                                                           \
    SB_DEFINE_COUNT(kname##_count_inline, X, B, SB_ARITY(TAKES), kname, SB_SHAPE_VALUE) \
    SB_DEFINE_COUNT_CALL(kname##_count_call, X, B, SB_ARITY(TAKES), kname, SB_SHAPE_VALUE) \
    SB_DEFINE_COUNT(kname##_noop_inline, X, B, SB_ARITY(TAKES), kname##_noop_, SB_NEVER_VALUE) \
    SB_DEFINE_COUNT_CALL(kname##_noop_call, X, B, SB_ARITY(TAKES), kname##_noop_, SB_NEVER_VALUE) \
    SB_ISA(X, ATTR) __attribute__((unused)) static void kname##_eval_grid(const sb_scene *s, void *out_) { \
        uint8_t *const out = out_;                                              \
        SB_LOOP(X, B, SB_ARITY(TAKES), s, kname, SB_SHAPE_VALUE, SB_STORE_STEP, (void)0) \
    }                                                                           \
    SB_ISA(X, ATTR) __attribute__((unused)) static void kname##_eval_pairs(const sb_scene *s, void *out_) { \
        uint8_t *const out = out_;                                              \
        for (int64_t j = 0; j < s->n_points; j += SB_ISA(X, W)) {               \
            SB_ISA(X, VEC) q_[SB_ARITY(TAKES)];                                 \
            _Pragma("GCC unroll 8") for (int k_ = 0; k_ < SB_ARITY(TAKES); k_++) \
                q_[k_] = SB_ISA(X, LOAD)(s->shape[k_] + j);                     \
            const unsigned bits = SB_ISA(X, BITS)(kname(SB_ITEMS(SB_ARITY(TAKES), q_), \
                SB_ISA(X, LOAD)(s->point[0] + j), SB_ISA(X, LOAD)(s->point[1] + j))); \
            SB_STORE_STEP(X, 0, j);                                             \
        }                                                                       \
    }

/* The row's generated fields; a hand-made row lists them itself. */
#define SB_ROW_FIELDS(kname, X, B, TAKES)                                       \
    .name = #kname, .takes = SB_STR(TAKES), .isa = SB_ISA(X, FEATURES),         \
    .loop = SB_ISA(X, NAME) " b" #B, .lanes = SB_ISA(X, W), .block = (B),       \
    .source = __FILE__, .line = __LINE__

/* The kernel macro: see the top of this file. */
#define SB_KERNEL(kname, X, B, TAKES, ...)                                      \
    SB_KERNEL_LOOPS(kname, X, B, TAKES)                                         \
    static const sb_kernel kname##_row = {                                      \
        SB_ROW_FIELDS(kname, X, B, TAKES),                                      \
        .count_inline = kname##_count_inline, .count_call = kname##_count_call, \
        .noop_inline = kname##_noop_inline, .noop_call = kname##_noop_call,     \
        .eval_grid = kname##_eval_grid, .eval_pairs = kname##_eval_pairs,       \
        __VA_ARGS__};                                                           \
    SB_REGISTER(kname##_row)

#endif
