/* The Morton (Z-order) table (see bp_internal.h): seed 003's method in 2-D.  Points quantised
 * to 2^q x 2^q, codes by bit separation with magic numbers (BMI2 pdep where the CPU has a fast
 * one: not on AMD before Zen 3, where it is microcoded), counting-sorted by code; a box picks
 * the level MSB(width) + 1 so that it touches at most 2 x 2 cells, whose Z-ranges are emitted
 * in sorted order (one compare-swap) and merged when they touch. */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "bp_internal.h"

/* magic-number bit separation (seed 003, in 2-D) */
static inline uint32_t part1by1(uint32_t x) {
    x &= 0x0000FFFFu;
    x = (x | (x << 8)) & 0x00FF00FFu;
    x = (x | (x << 4)) & 0x0F0F0F0Fu;
    x = (x | (x << 2)) & 0x33333333u;
    x = (x | (x << 1)) & 0x55555555u;
    return x;
}
static inline uint32_t morton2(uint32_t x, uint32_t y) { return part1by1(x) | (part1by1(y) << 1); }

#if defined(SB_X86)
__attribute__((target("bmi2"))) static inline uint32_t morton2_pdep(uint32_t x, uint32_t y) {
    return _pdep_u32(x, 0x55555555u) | _pdep_u32(y, 0xAAAAAAAAu);
}
#endif

/* pdep where it is fast: BMI2, and not an AMD core before Zen 3 (family 0x19), which
 * microcodes it at hundreds of cycles. */
int sb_bp_fast_pdep(void) {
#if defined(SB_X86)
    __builtin_cpu_init();
    if (!bp_bmi2_allowed() || !__builtin_cpu_supports("bmi2"))
        return 0;
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d))
        return 0;
    const int amd = b == 0x68747541u; /* "Auth"enticAMD */
    if (!amd)
        return 1;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    const unsigned family = ((a >> 8) & 0xF) + (((a >> 8) & 0xF) == 0xF ? ((a >> 20) & 0xFF) : 0);
    return family >= 0x19;
#else
    return 0;
#endif
}

static void morton_keys(const sb_bp_index *t, const float *px, const float *py, int64_t a, int64_t e,
                        uint32_t *key) {
    const int64_t side = 1ll << t->q;
#if defined(SB_X86)
    const int use_pdep = t->pdep;
#endif
    for (int64_t j = a; j < e; j++) {
        const float x = px[j], y = py[j];
        if (!(bp_finite32(x) && bp_finite32(y))) {
            key[j] = UINT32_MAX;
            continue;
        }
        const uint32_t qx = (uint32_t)bp_cell_of(x, t->x0, t->inv_x, side);
        const uint32_t qy = (uint32_t)bp_cell_of(y, t->y0, t->inv_y, side);
#if defined(SB_X86)
        key[j] = use_pdep ? morton2_pdep(qx, qy) : morton2(qx, qy);
#else
        key[j] = morton2(qx, qy);
#endif
    }
}

/* The finest cells: 2^q per axis over the points' square extent, with q the smallest whose
 * cell is at most `cell` (the grid's rule), at most SB_BP_MAX_QBITS (a 4^q + 1 table).
 * pdep: -1 = where fast (sb_bp_fast_pdep), 0 = magic numbers, 1 = pdep if the CPU has BMI2. */
#define SB_BP_MAX_QBITS 12

sb_bp_index *sb_bp_morton_build(const float *px, const float *py, int64_t m, double cell, int pdep, int threads) {
    if (!(cell > 0) || m > INT32_MAX)
        return NULL;
    threads = threads < 1 ? 1 : threads > BP_MAX_PARTS ? BP_MAX_PARTS : threads;
    sb_bp_index *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    double bd[4];
    int64_t finite;
    bp_hold(threads, 1);
    bp_point_bounds(px, py, m, threads, bd, &finite);
    double ext = fmax(bd[1] - bd[0], bd[3] - bd[2]);
    if (!(ext > 0))
        ext = 1.0;
    int qbits = 1;
    while (qbits < SB_BP_MAX_QBITS && ext / (double)(1ll << qbits) > cell)
        qbits++;
    t->kind = BP_KIND_MORTON;
    t->m = m;
    t->q = qbits;
    t->x0 = (float)bd[0]; /* exact: the bounds are float32 values */
    t->y0 = (float)bd[2];
    const int64_t side = 1ll << qbits;
    /* square cells; the maximum lands near `side`, clamped to side - 1 */
    t->inv_x = t->inv_y = bp_inverse32((double)side / ext);
    t->cells = side * side;
#if defined(SB_X86)
    t->pdep = pdep < 0 ? sb_bp_fast_pdep() : pdep && bp_bmi2_allowed() && __builtin_cpu_supports("bmi2");
#else
    (void)pdep;
#endif
    const int failed = bp_index_sort(t, px, py, morton_keys, threads);
    bp_hold(threads, 0);
    if (failed) {
        sb_bp_index_free(t);
        return NULL;
    }
    return t;
}

sb_bp_index *sb_bp_morton_build_into(const float *px, const float *py, int64_t m, double cell, int pdep,
                                     int threads, sb_bp_index **into) {
    return *into = sb_bp_morton_build(px, py, m, cell, pdep, threads);
}

/* seed 003's MSB: smear the bits right, count them (checked against 31 - clz in the tests) */
static inline int msb_smear(uint32_t v) {
    if (v == 0)
        return -1;
    v |= v >> 1;
    v |= v >> 2;
    v |= v >> 4;
    v |= v >> 8;
    v |= v >> 16;
    v = (v & 0x55555555u) + ((v >> 1) & 0x55555555u);
    v = (v & 0x33333333u) + ((v >> 2) & 0x33333333u);
    v = (v & 0x0f0f0f0fu) + ((v >> 4) & 0x0f0f0f0fu);
    v = (v & 0x00ff00ffu) + ((v >> 8) & 0x00ff00ffu);
    return (int)((v & 0x0000ffffu) + ((v >> 16) & 0x0000ffffu)) - 1;
}

/* Mismatches of the bit tricks against plain loops (magic numbers, pdep where the CPU has
 * BMI2, the smear MSB against clz) over `count` pseudo-random values: 0 when they agree. */
int64_t sb_bp_selftest_bits(int64_t count) {
    int64_t bad = 0;
    uint64_t st = 0x9E3779B97F4A7C15ull;
    for (int64_t t = 0; t < count; t++) {
        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        uint32_t v = (uint32_t)st >> (t & 31);
        if (t < 64)
            v = t < 32 ? (1u << t) : (1u << (t - 32)) - 1u;
        bad += msb_smear(v) != (v ? 31 - __builtin_clz(v) : -1);
        const uint32_t x = v & 0xFFFF, y = (uint32_t)(st >> 40) & 0xFFFF;
        uint32_t ref = 0;
        for (int bit = 0; bit < 16; bit++)
            ref |= ((x >> bit) & 1u) << (2 * bit) | ((y >> bit) & 1u) << (2 * bit + 1);
        bad += morton2(x, y) != ref;
#if defined(SB_X86)
        if (__builtin_cpu_supports("bmi2"))
            bad += morton2_pdep(x, y) != ref;
#endif
    }
    return bad;
}

int bp_morton_runs(const sb_bp_index *t, const double *b, int64_t *a, int64_t *e) {
    const int64_t side = 1ll << t->q;
    const uint32_t qx0 = (uint32_t)bp_cell_of(bp_to32(b[0]), t->x0, t->inv_x, side);
    const uint32_t qx1 = (uint32_t)bp_cell_of(bp_to32(b[1]), t->x0, t->inv_x, side);
    const uint32_t qy0 = (uint32_t)bp_cell_of(bp_to32(b[2]), t->y0, t->inv_y, side);
    const uint32_t qy1 = (uint32_t)bp_cell_of(bp_to32(b[3]), t->y0, t->inv_y, side);
    const uint32_t w = (qx1 - qx0) > (qy1 - qy0) ? qx1 - qx0 : qy1 - qy0;
    /* the level whose cells are wider than the box: at most 2 cells per axis */
    const int lv = msb_smear(w) + 1;
    const uint32_t X0 = qx0 >> lv, X1 = qx1 >> lv, Y0 = qy0 >> lv, Y1 = qy1 >> lv;
    uint32_t z[4];
    int nz = 0;
    /* z(X0, Y0) is the least, z(X1, Y1) the greatest; the middle two need one compare-swap */
    z[nz++] = morton2(X0, Y0);
    if (X1 != X0)
        z[nz++] = morton2(X1, Y0);
    if (Y1 != Y0)
        z[nz++] = morton2(X0, Y1);
    if (X1 != X0 && Y1 != Y0) {
        if (z[1] > z[2]) {
            const uint32_t tmp = z[1];
            z[1] = z[2];
            z[2] = tmp;
        }
        z[nz++] = morton2(X1, Y1);
    }
    /* cell Z at level lv holds codes [Z << 2lv, (Z + 1) << 2lv); touching ranges merge */
    int count = 0;
    for (int c = 0; c < nz;) {
        const uint64_t lo = (uint64_t)z[c] << (2 * lv);
        uint32_t last = z[c];
        while (c + 1 < nz && z[c + 1] == last + 1)
            last = z[++c];
        c++;
        const uint64_t hi = ((uint64_t)last + 1) << (2 * lv);
        a[count] = t->start[lo];
        e[count++] = t->start[hi];
    }
    return count;
}

