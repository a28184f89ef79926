/* The kernel table: every row registered with SB_REGISTER in any linked file,
 * plus the CPU checks, the clock loop and the hardware counters the harness needs. */
#define _GNU_SOURCE /* fegetexcept */
#include "sb_common.h"

#include <errno.h>
#include <fenv.h>
#if defined(__linux__)
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* Defined by the linker around the "sb_kernels" section. */
extern const sb_kernel *__start_sb_kernels[] __attribute__((visibility("hidden")));
extern const sb_kernel *__stop_sb_kernels[] __attribute__((visibility("hidden")));

const sb_kernel *const *sb_kernel_table(size_t *count) {
    *count = (size_t)(__stop_sb_kernels - __start_sb_kernels);
    return (const sb_kernel *const *)__start_sb_kernels;
}

/* Every CPU feature a kernel row may name in .isa (and --disable-isa may mask), listed
 * once: __builtin_cpu_supports needs each as a literal, and sb_cpu_features() names them. */
#if defined(SB_X86)
#define SB_CPU_FEATURES(X)                                                     \
    X("sse2") X("popcnt") X("sse4.1") X("avx") X("avx2") X("fma") X("bmi2")   \
    X("avx512f") X("avx512dq") X("avx512bw") X("avx512vl")
#else
#define SB_CPU_FEATURES(X)
#endif

static int supports_one(const char *feature, size_t length) {
#define SB_FEATURE(name)                                                       \
    if (length == sizeof(name) - 1 && memcmp(feature, name, length) == 0)      \
        return __builtin_cpu_supports(name) != 0;
#if defined(SB_X86)
    __builtin_cpu_init();
#endif
    SB_CPU_FEATURES(SB_FEATURE)
#undef SB_FEATURE
    (void)feature;
    (void)length;
    return 0; /* unknown to this build: never claim it */
}

const char *sb_cpu_features(void) {
#define SB_NAME(name) name ","
    return "" SB_CPU_FEATURES(SB_NAME);
#undef SB_NAME
}

int sb_cpu_supports(const char *features) {
    const char *start = features;
    while (*start) {
        const char *end = strchr(start, ',');
        const size_t length = end ? (size_t)(end - start) : strlen(start);
        if (length && !supports_one(start, length))
            return 0;
        start += length + (end != NULL);
    }
    return 1;
}

#define SB_COUNT_ROWS_MAX 64
/* A whole block of the widest a row may declare (8: families/base.py's MAX_BLOCK), and one more. */
#define SB_COUNT_ROWS_SHAPES_MAX 9

/* A quiet NaN from its bits: the NAN macro is undefined behaviour to clang under -ffast-math
 * (-Wnan-infinity-disabled), and these buffers are padding a kernel's loop compares, never
 * arithmetic of ours. */
static float sb_padding_nan(void) {
    const uint32_t bits = 0x7fc00000u;
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

int sb_count_rows(const sb_kernel *row, int call, const sb_scene *pairs, int64_t shapes, int64_t copies,
                  int64_t *out) {
    uint64_t (*count)(const sb_scene *) = call ? row->count_call : row->count_inline;
    if (copies < 1 || copies > SB_COUNT_ROWS_MAX || shapes < 1 || shapes > SB_COUNT_ROWS_SHAPES_MAX)
        return EINVAL;
    if (!count)
        return ENOSYS;
    /* Each row a scene of its own, as a scene is laid out: `shapes` copies of its shape (a
     * blocked loop's whole block and a shape left over) and `copies` of its point, 64-byte
     * aligned and NaN-padded (a loop reading past either end counts nothing). */
    enum { SHAPES_PADDED = 2 * SB_COUNT_ROWS_SHAPES_MAX, POINTS_PADDED = 2 * SB_COUNT_ROWS_MAX };
    float points[4][POINTS_PADDED] __attribute__((aligned(64)));
    float shape_copies[8][SHAPES_PADDED] __attribute__((aligned(64)));
    const float nan = sb_padding_nan();
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < POINTS_PADDED; j++)
            points[k][j] = nan;
    for (int k = 0; k < 8; k++)
        for (int j = 0; j < SHAPES_PADDED; j++)
            shape_copies[k][j] = nan;
    sb_scene one = *pairs;
    one.n_shapes = shapes;
    one.n_points = copies;
    one.stride = POINTS_PADDED;
    one.shape_begin = 0;
    one.shape_end = shapes;
    one.prepared = NULL;
    for (int k = 0; k < 4; k++)
        one.point[k] = pairs->point[k] ? points[k] : NULL;
    for (int k = 0; k < 8; k++)
        one.shape[k] = pairs->shape[k] ? shape_copies[k] : NULL;
    for (int64_t i = 0; i < pairs->n_points; i++) {
        for (int k = 0; k < 4; k++)
            if (pairs->point[k])
                for (int64_t j = 0; j < copies; j++)
                    points[k][j] = pairs->point[k][i];
        for (int k = 0; k < 8; k++)
            if (pairs->shape[k])
                for (int64_t s = 0; s < shapes; s++)
                    shape_copies[k][s] = pairs->shape[k][i];
        const uint64_t first = count(&one), again = count(&one);
        out[i] = first == again ? (int64_t)first : -1;
    }
    return 0;
}


/* Multiplications, not additions: a chain of `add $1` with its loop ran two iterations a cycle
 * on a Sapphire Rapids-class Xeon (its renamer folds small immediate adds; a clock of 8162 MHz
 * where the core ran at ~4.1 GHz), while no core folds a multiply: its latency is the cycles.
 * Eight to a block, so the loop's own branch and counter stay hidden behind the chain. */
uint32_t sb_dependent_multiplies(uint64_t iterations) {
    uint32_t product = 3;
    const uint32_t factor = 5;
    for (uint64_t i = 0; i < iterations; i += 8)
        __asm__ volatile("imul %1, %0\n\timul %1, %0\n\timul %1, %0\n\timul %1, %0\n\t"
                         "imul %1, %0\n\timul %1, %0\n\timul %1, %0\n\timul %1, %0"
                         : "+r"(product)
                         : "r"(factor));
    return product;
}

_Static_assert(sizeof(fenv_t) <= sizeof(((sb_fpenv *)0)->saved), "sb_fpenv.saved holds a fenv_t");

/* MXCSR: bits 0-5 are sticky exception flags, 6 DAZ, 7-12 exception masks, 13-14 rounding, 15 FTZ. */
#define SB_MXCSR_FLAGS 0x3fu
#define SB_MXCSR_DAZ (1u << 6)
#define SB_MXCSR_FTZ (1u << 15)

static int rounding_code(int mode) {
    switch (mode) {
#ifdef FE_TONEAREST
    case FE_TONEAREST: return 0;
#endif
#ifdef FE_DOWNWARD
    case FE_DOWNWARD: return 1;
#endif
#ifdef FE_UPWARD
    case FE_UPWARD: return 2;
#endif
#ifdef FE_TOWARDZERO
    case FE_TOWARDZERO: return 3;
#endif
    default: return -1;
    }
}

static int trap_codes(void) {
    int traps = 0;
#if defined(__GLIBC__)
    const int enabled = fegetexcept();
#ifdef FE_INVALID
    traps |= (enabled & FE_INVALID) ? 1 : 0;
#endif
#ifdef FE_DIVBYZERO
    traps |= (enabled & FE_DIVBYZERO) ? 2 : 0;
#endif
#ifdef FE_OVERFLOW
    traps |= (enabled & FE_OVERFLOW) ? 4 : 0;
#endif
#ifdef FE_UNDERFLOW
    traps |= (enabled & FE_UNDERFLOW) ? 8 : 0;
#endif
#ifdef FE_INEXACT
    traps |= (enabled & FE_INEXACT) ? 16 : 0;
#endif
#endif
    return traps;
}

void sb_fpenv_save(sb_fpenv *env) {
    memset(env, 0, sizeof *env);
    fegetenv((fenv_t *)env->saved);
    env->rounding = rounding_code(fegetround());
    env->traps = trap_codes();
#if defined(SB_X86)
    env->mxcsr = _mm_getcsr() & ~SB_MXCSR_FLAGS;
    env->flush_to_zero = (env->mxcsr & SB_MXCSR_FTZ) != 0;
    env->denormals_are_zero = (env->mxcsr & SB_MXCSR_DAZ) != 0;
#endif
}

void sb_fpenv_restore(const sb_fpenv *env) {
    fesetenv((const fenv_t *)env->saved);
    feclearexcept(FE_ALL_EXCEPT);
#if defined(SB_X86)
    _mm_setcsr(env->mxcsr); /* every MXCSR control bit, FTZ and DAZ included */
#endif
}

int sb_fpenv_changed(const sb_fpenv *env) {
    sb_fpenv now;
    sb_fpenv_save(&now);
    return now.rounding != env->rounding || now.traps != env->traps || now.mxcsr != env->mxcsr;
}

#if defined(__linux__)
static int sb_cycles_fd = -1, sb_instructions_fd = -1;

static int open_counter(uint64_t config) {
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.type = PERF_TYPE_HARDWARE;
    attr.size = sizeof attr;
    attr.config = config;
    attr.exclude_kernel = 1; /* user space only: what the kernel's loop costs */
    attr.exclude_hv = 1;
    return (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
}

int sb_counters_open(void) {
    if (sb_cycles_fd >= 0)
        return 0;
    sb_cycles_fd = open_counter(PERF_COUNT_HW_CPU_CYCLES);
    if (sb_cycles_fd < 0)
        return errno;
    sb_instructions_fd = open_counter(PERF_COUNT_HW_INSTRUCTIONS);
    if (sb_instructions_fd < 0) {
        const int error = errno;
        close(sb_cycles_fd);
        sb_cycles_fd = -1;
        return error;
    }
    return 0;
}

void sb_counters_read(uint64_t *cycles, uint64_t *instructions) {
    *cycles = *instructions = 0;
    if (sb_cycles_fd < 0 || read(sb_cycles_fd, cycles, sizeof *cycles) != sizeof *cycles ||
        read(sb_instructions_fd, instructions, sizeof *instructions) != sizeof *instructions)
        *cycles = *instructions = 0;
}
#else
int sb_counters_open(void) { return ENOSYS; }

void sb_counters_read(uint64_t *cycles, uint64_t *instructions) { *cycles = *instructions = 0; }
#endif
