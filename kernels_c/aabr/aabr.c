/* The aabr family's kernels: extreme vertices (maxX, maxY, minX, minY) of a polygon
 * rotated about its centre, and the seed's "bounds caching structure" (BCS).
 * Layout, loop template and kernel signature: aabr.h.  Origin: the prototype in
 * /work/proto/bcs (REPORT.md there has the measurements and the error analysis).
 *
 * Tie rule of the scans: the lowest index among equal float32 values (strict compares in
 * index order; SIMD: per-lane strict compares, then the lowest index among the lanes
 * holding the best value; padding lanes copy vertex 0 with a higher index, so never win).
 * hill returns the first vertex of a flat run; the BCS kernels the vertex its record
 * holds.  verify accepts any exact extreme (families/aabr).
 */
#define _GNU_SOURCE
#include <float.h>
#include <stdlib.h>

#include "aabr.h"

#define PI_F 3.14159265f
#define TWO_PI 6.283185307179586476925

/* ------------------------------------------------------------------------ */
/* scan: rotate every vertex, keep the extremes (strict compares: lowest index) */

static inline void k_scan(const float *restrict x, const float *restrict y, int n,
                          float c, float s, int32_t o[4]) {
    float X = c * x[0] - s * y[0], Y = s * x[0] + c * y[0];
    float mxX = X, mxY = Y, mnX = X, mnY = Y;
    int32_t iMX = 0, iMY = 0, imX = 0, imY = 0;
    for (int i = 1; i < n; i++) {
        X = c * x[i] - s * y[i];
        Y = s * x[i] + c * y[i];
        if (X > mxX) { mxX = X; iMX = i; }
        if (Y > mxY) { mxY = Y; iMY = i; }
        if (X < mnX) { mnX = X; imX = i; }
        if (Y < mnY) { mnY = Y; imY = i; }
    }
    o[0] = iMX; o[1] = iMY; o[2] = imX; o[3] = imY;
}


#if defined(SB_X86)
/* SIMD scans.  Lanes past n hold copies of vertex 0 (same value, higher index). */
__attribute__((target("avx2"))) static inline __m256 hmax8(__m256 v) {
    v = _mm256_max_ps(v, _mm256_permute2f128_ps(v, v, 1));
    v = _mm256_max_ps(v, _mm256_shuffle_ps(v, v, 0x4E));
    return _mm256_max_ps(v, _mm256_shuffle_ps(v, v, 0xB1));
}
__attribute__((target("avx2"))) static inline __m256 hmin8(__m256 v) {
    v = _mm256_min_ps(v, _mm256_permute2f128_ps(v, v, 1));
    v = _mm256_min_ps(v, _mm256_shuffle_ps(v, v, 0x4E));
    return _mm256_min_ps(v, _mm256_shuffle_ps(v, v, 0xB1));
}
__attribute__((target("avx2"))) static inline int32_t argbest8(__m256 v, __m256 best,
                                                              __m256i idx) {
    __m256i big = _mm256_set1_epi32(INT32_MAX);
    __m256i m = _mm256_castps_si256(_mm256_cmp_ps(v, best, _CMP_EQ_OQ));
    __m256i t = _mm256_blendv_epi8(big, idx, m);
    t = _mm256_min_epi32(t, _mm256_permute2x128_si256(t, t, 1));
    t = _mm256_min_epi32(t, _mm256_shuffle_epi32(t, 0x4E));
    t = _mm256_min_epi32(t, _mm256_shuffle_epi32(t, 0xB1));
    return _mm256_cvtsi256_si32(t);
}

__attribute__((target("avx2"))) static void k_scan_avx2(const float *restrict x,
                                                        const float *restrict y, int n,
                                                        float c, float s, int32_t o[4]) {
    const __m256 vc = _mm256_set1_ps(c), vs = _mm256_set1_ps(s);
    /* the first 8 vertices (padding: copies of vertex 0) start every lane's best */
    __m256 bMX = _mm256_sub_ps(_mm256_mul_ps(vc, _mm256_loadu_ps(x)), _mm256_mul_ps(vs, _mm256_loadu_ps(y)));
    __m256 bMY = _mm256_add_ps(_mm256_mul_ps(vs, _mm256_loadu_ps(x)), _mm256_mul_ps(vc, _mm256_loadu_ps(y)));
    __m256 bmX = bMX, bmY = bMY;
    __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i iMX = idx, iMY = idx, imX = idx, imY = idx;
    const __m256i step = _mm256_set1_epi32(8);
    idx = _mm256_add_epi32(idx, step);
    for (int i = 8; i < n; i += 8) {
        __m256 vx = _mm256_loadu_ps(x + i), vy = _mm256_loadu_ps(y + i);
        __m256 X = _mm256_sub_ps(_mm256_mul_ps(vc, vx), _mm256_mul_ps(vs, vy));
        __m256 Y = _mm256_add_ps(_mm256_mul_ps(vs, vx), _mm256_mul_ps(vc, vy));
        __m256 m;
        m = _mm256_cmp_ps(X, bMX, _CMP_GT_OQ);
        bMX = _mm256_blendv_ps(bMX, X, m);
        iMX = _mm256_blendv_epi8(iMX, idx, _mm256_castps_si256(m));
        m = _mm256_cmp_ps(Y, bMY, _CMP_GT_OQ);
        bMY = _mm256_blendv_ps(bMY, Y, m);
        iMY = _mm256_blendv_epi8(iMY, idx, _mm256_castps_si256(m));
        m = _mm256_cmp_ps(X, bmX, _CMP_LT_OQ);
        bmX = _mm256_blendv_ps(bmX, X, m);
        imX = _mm256_blendv_epi8(imX, idx, _mm256_castps_si256(m));
        m = _mm256_cmp_ps(Y, bmY, _CMP_LT_OQ);
        bmY = _mm256_blendv_ps(bmY, Y, m);
        imY = _mm256_blendv_epi8(imY, idx, _mm256_castps_si256(m));
        idx = _mm256_add_epi32(idx, step);
    }
    o[0] = argbest8(bMX, hmax8(bMX), iMX);
    o[1] = argbest8(bMY, hmax8(bMY), iMY);
    o[2] = argbest8(bmX, hmin8(bmX), imX);
    o[3] = argbest8(bmY, hmin8(bmY), imY);
}

__attribute__((target("avx512f,avx512dq"))) static void k_scan_avx512(const float *restrict x,
                                                             const float *restrict y,
                                                             int n, float c, float s,
                                                             int32_t o[4]) {
    const __m512 vc = _mm512_set1_ps(c), vs = _mm512_set1_ps(s);
    /* the first 16 vertices (padding: copies of vertex 0) start every lane's best */
    __m512 cx0 = _mm512_mul_ps(vc, _mm512_loadu_ps(x)), sy0 = _mm512_mul_ps(vs, _mm512_loadu_ps(y));
    __m512 sx0 = _mm512_mul_ps(vs, _mm512_loadu_ps(x)), cy0 = _mm512_mul_ps(vc, _mm512_loadu_ps(y));
    SB_NO_CONTRACT(cx0);
    SB_NO_CONTRACT(sy0);
    SB_NO_CONTRACT(sx0);
    SB_NO_CONTRACT(cy0);
    __m512 bMX = _mm512_sub_ps(cx0, sy0), bMY = _mm512_add_ps(sx0, cy0);
    __m512 bmX = bMX, bmY = bMY;
    __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i iMX = idx, iMY = idx, imX = idx, imY = idx;
    const __m512i step = _mm512_set1_epi32(16);
    idx = _mm512_add_epi32(idx, step);
    for (int i = 16; i < n; i += 16) {
        __m512 vx = _mm512_loadu_ps(x + i), vy = _mm512_loadu_ps(y + i);
        __m512 cx = _mm512_mul_ps(vc, vx), sy = _mm512_mul_ps(vs, vy);
        __m512 sx = _mm512_mul_ps(vs, vx), cy = _mm512_mul_ps(vc, vy);
        SB_NO_CONTRACT(cx);
        SB_NO_CONTRACT(sy);
        SB_NO_CONTRACT(sx);
        SB_NO_CONTRACT(cy);
        __m512 X = _mm512_sub_ps(cx, sy), Y = _mm512_add_ps(sx, cy);
        __mmask16 m;
        m = _mm512_cmp_ps_mask(X, bMX, _CMP_GT_OQ);
        bMX = _mm512_mask_blend_ps(m, bMX, X);
        iMX = _mm512_mask_blend_epi32(m, iMX, idx);
        m = _mm512_cmp_ps_mask(Y, bMY, _CMP_GT_OQ);
        bMY = _mm512_mask_blend_ps(m, bMY, Y);
        iMY = _mm512_mask_blend_epi32(m, iMY, idx);
        m = _mm512_cmp_ps_mask(X, bmX, _CMP_LT_OQ);
        bmX = _mm512_mask_blend_ps(m, bmX, X);
        imX = _mm512_mask_blend_epi32(m, imX, idx);
        m = _mm512_cmp_ps_mask(Y, bmY, _CMP_LT_OQ);
        bmY = _mm512_mask_blend_ps(m, bmY, Y);
        imY = _mm512_mask_blend_epi32(m, imY, idx);
        idx = _mm512_add_epi32(idx, step);
    }
    float v;
    v = _mm512_reduce_max_ps(bMX);
    o[0] = _mm512_mask_reduce_min_epi32(_mm512_cmp_ps_mask(bMX, _mm512_set1_ps(v), _CMP_EQ_OQ), iMX);
    v = _mm512_reduce_max_ps(bMY);
    o[1] = _mm512_mask_reduce_min_epi32(_mm512_cmp_ps_mask(bMY, _mm512_set1_ps(v), _CMP_EQ_OQ), iMY);
    v = _mm512_reduce_min_ps(bmX);
    o[2] = _mm512_mask_reduce_min_epi32(_mm512_cmp_ps_mask(bmX, _mm512_set1_ps(v), _CMP_EQ_OQ), imX);
    v = _mm512_reduce_min_ps(bmY);
    o[3] = _mm512_mask_reduce_min_epi32(_mm512_cmp_ps_mask(bmY, _mm512_set1_ps(v), _CMP_EQ_OQ), imY);
}


#endif

/* hill */
/* a*b - c*d and a*b + c*d with both products rounded: a compiler allowed to contract
 * (FMA hardware, -march=native) would compute fma(a, b, -c*d), whose sign is not
 * antisymmetric — the cross product of e0 with itself comes out as +-tiny instead of 0,
 * so e0 lands in the wrong half-plane and the search goes to the far side of the polygon
 * (verify found margins of 1.7e7 at -O3 -march=native before the products were pinned).
 * Pinned only where the target has FMA: the pin also stops gcc from vectorising the four
 * lockstep searches, which made hill 1.5-2x slower at -O2, where nothing can contract. */
#if defined(__FP_FAST_FMAF) || defined(__FMA__)
#define AABR_PIN(v) SB_NO_CONTRACT(v)
#else
#define AABR_PIN(v) ((void)0)
#endif

static inline float diff_of_products(float a, float b, float c, float d) {
    float p = a * b, q = c * d;
    AABR_PIN(p);
    AABR_PIN(q);
    return p - q;
}

static inline float sum_of_products(float a, float b, float c, float d) {
    float p = a * b, q = c * d;
    AABR_PIN(p);
    AABR_PIN(q);
    return p + q;
}

static inline int half_of(float e0x, float e0y, float wx, float wy) {
    float cr = diff_of_products(e0x, wy, e0y, wx);
    float dt = sum_of_products(e0x, wx, e0y, wy);
    return (cr < 0.0f) | ((cr == 0.0f) & (dt < 0.0f));
}

/* psi(e) < T, where ht = half of t */
static inline int ang_less(float e0x, float e0y, float ex, float ey, float tx, float ty,
                           int ht) {
    int he = half_of(e0x, e0y, ex, ey);
    int same_less = diff_of_products(ex, ty, ey, tx) > 0.0f;
    return (he < ht) | ((he == ht) & same_less);
}

static inline void k_hill(const float *restrict x, const float *restrict y, int n,
                               float c, float s, int32_t o[4]) {
    const float e0x = x[1] - x[0], e0y = y[1] - y[0];
    const float tx[4] = {s, -c, -s, c}, ty[4] = {c, s, -c, -s};
    int ht[4], base[4];
    for (int k = 0; k < 4; k++) { ht[k] = half_of(e0x, e0y, tx[k], ty[k]); base[k] = 0; }
    int len = n;
    while (len > 1) {
        int h = len >> 1;
        for (int k = 0; k < 4; k++) {
            int i = base[k] + h - 1;
            float ex = x[i + 1] - x[i], ey = y[i + 1] - y[i];
            int l = ang_less(e0x, e0y, ex, ey, tx[k], ty[k], ht[k]);
            base[k] += l ? h : 0;
        }
        len -= h;
    }
    for (int k = 0; k < 4; k++) {
        int i = base[k];
        float ex = x[i + 1] - x[i], ey = y[i + 1] - y[i];
        i += ang_less(e0x, e0y, ex, ey, tx[k], ty[k], ht[k]);
        o[k] = (i == n) ? 0 : i;
    }
}



/* BCS lookups */
/* last r with key[r] <= a, branch-free */
static inline int bcs_find(const float *restrict key, int R, float a) {
    int base = 0, len = R;
    while (len > 1) {
        int h = len >> 1;
        base = (key[base + h] <= a) ? base + h : base;
        len -= h;
    }
    return base;
}

static inline void bcs_out(const uint16_t *restrict idx, int r, int32_t o[4]) {
    const uint16_t *q = idx + 4 * (size_t)r;
    o[0] = q[0]; o[1] = q[1]; o[2] = q[2]; o[3] = q[3];
}

/* walk from the previous record; a jump across 0/2pi restarts from the other end */
static inline int bcs_walk(const float *restrict key, int R, float a, int r) {
    if (fabsf(a - key[r]) > PI_F) r = (a < key[r]) ? 0 : R - 1;
    while (a < key[r]) r--;
    while (a >= key[r + 1]) r++;
    return r;
}



/* BCS build (see the prototype's REPORT.md, 3.3) */
static inline double orient_d(const float *x, const float *y, int i, int j, int k) {
    return ((double)x[j] - x[i]) * ((double)y[k] - y[i]) -
           ((double)y[j] - y[i]) * ((double)x[k] - x[i]);
}

static int cmp_xy(const void *pa, const void *pb, void *pc) {
    const float *x = ((const float *const *)pc)[0], *y = ((const float *const *)pc)[1];
    int a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    if (x[a] != x[b]) return x[a] < x[b] ? -1 : 1;
    if (y[a] != y[b]) return y[a] < y[b] ? -1 : 1;
    return a - b;
}

static inline double wrap2pi(double a) {
    a = fmod(a, TWO_PI);
    if (a < 0) a += TWO_PI;
    if (a >= TWO_PI) a -= TWO_PI;
    return a;
}

static int bcs_build(const float *x, const float *y, int n, float *key, uint16_t *idx, int32_t *h,
                     double *beta) {
    if (n < 3 || n > 65535) return -1;
    int32_t *ord = h + n + 2;              /* scratch: h = hull (n+2), ord = order (n) */
    for (int i = 0; i < n; i++) ord[i] = i;
    struct xy { const float *x, *y; } ctx = {x, y};
    qsort_r(ord, (size_t)n, sizeof *ord, cmp_xy, &ctx);
    int m = 0;
    for (int t = 0; t < n; t++) {          /* lower hull */
        int i = ord[t];
        while (m >= 2 && orient_d(x, y, h[m - 2], h[m - 1], i) <= 0) m--;
        h[m++] = i;
    }
    for (int t = n - 2, lo = m + 1; t >= 0; t--) {   /* upper hull */
        int i = ord[t];
        while (m >= lo && orient_d(x, y, h[m - 2], h[m - 1], i) <= 0) m--;
        h[m++] = i;
    }
    m--;                                   /* last point == first */
    if (m < 3) return -1;

    for (int j = 0; j < m; j++) {
        int a = h[j], bb = h[j + 1 == m ? 0 : j + 1];
        double ex = (double)x[bb] - x[a], ey = (double)y[bb] - y[a];
        beta[j] = atan2(-ex, ey);   /* outward normal (ey, -ex) */
    }

    int jk[4], tk[4];
    uint16_t cur[4];
    for (int k = 0; k < 4; k++) {
        double best = 10.0;
        jk[k] = 0;
        for (int j = 0; j < m; j++) {
            double A = wrap2pi(k * (M_PI / 2) - beta[j]);
            if (A < best) { best = A; jk[k] = j; }
        }
        tk[k] = 0;
        cur[k] = (uint16_t)h[jk[k] + 1 == m ? 0 : jk[k] + 1];
    }
    int R = 1;
    key[0] = 0.0f;
    memcpy(idx, cur, sizeof cur);
    for (;;) {
        int kb = -1, jb = 0;
        double Ab = 0;
        for (int k = 0; k < 4; k++) {
            if (tk[k] >= m) continue;
            int j = jk[k] - tk[k];
            if (j < 0) j += m;
            double A = wrap2pi(k * (M_PI / 2) - beta[j]);
            if (kb < 0 || A < Ab) { kb = k; jb = j; Ab = A; }
        }
        if (kb < 0) break;
        tk[kb]++;
        float f = (float)Ab;
        if (f <= key[R - 1]) {
            idx[4 * (R - 1) + kb] = (uint16_t)h[jb];
        } else {
            key[R] = f;
            memcpy(idx + 4 * R, idx + 4 * (R - 1), 4 * sizeof(uint16_t));
            idx[4 * R + kb] = (uint16_t)h[jb];
            R++;
        }
    }
    key[R] = FLT_MAX; /* the sentinel: above every angle (no infinity: fast-math builds) */
    return R;
}


static inline void scan(const aabr_poly *p, float a, float c, float s, int32_t *state, int32_t o[4]) {
    (void)a, (void)state;
    k_scan(p->x, p->y, p->n, c, s, o);
}
AABR_KERNEL(scan, , "", "aabr scalar", .summary = "rotate every vertex, keep the four extremes (plain method)");

#if defined(SB_X86)
__attribute__((target("avx2"))) static inline void scan_avx2(const aabr_poly *p, float a, float c, float s,
                                                             int32_t *state, int32_t o[4]) {
    (void)a, (void)state;
    k_scan_avx2(p->x, p->y, p->n, c, s, o);
}
AABR_KERNEL(scan_avx2, __attribute__((target("avx2"))), "avx2", "aabr avx2",
            .summary = "the scan, 8 vertices per step (blend on compare, lowest-index reduction)");

__attribute__((target("avx512f,avx512dq"))) static inline void scan_avx512(const aabr_poly *p, float a, float c,
                                                                           float s, int32_t *state, int32_t o[4]) {
    (void)a, (void)state;
    k_scan_avx512(p->x, p->y, p->n, c, s, o);
}
AABR_KERNEL(scan_avx512, __attribute__((target("avx512f,avx512dq"))), "avx512f,avx512dq", "aabr avx512",
            .summary = "the scan, 16 vertices per step (products kept apart: no FMA contraction)");
#endif

static inline void hill(const aabr_poly *p, float a, float c, float s, int32_t *state, int32_t o[4]) {
    (void)a, (void)state;
    k_hill(p->x, p->y, p->n, c, s, o);
}
AABR_KERNEL(hill, , "", "aabr scalar", .contract = "convex",
            .summary = "O(log n) binary search on edge directions, 4 directions in lockstep (no index)");

static inline void bcs_search(const aabr_poly *p, float a, float c, float s, int32_t *state, int32_t o[4]) {
    (void)c, (void)s, (void)state;
    bcs_out(p->idx, bcs_find(p->key, p->R, a), o);
}
AABR_KERNEL(bcs_search, , "", "aabr scalar", .prepare = aabr_bcs_prepare, .release = aabr_bcs_release,
            .prepared_bytes = aabr_bcs_bytes,
            .summary = "the seed's BCS: record found by binary search on the angle");

static inline void bcs_coherent(const aabr_poly *p, float a, float c, float s, int32_t *state, int32_t o[4]) {
    (void)c, (void)s;
    const int r = *state < 0 ? bcs_find(p->key, p->R, a) : bcs_walk(p->key, p->R, a, *state);
    *state = r;
    bcs_out(p->idx, r, o);
}
AABR_KERNEL(bcs_coherent, , "", "aabr scalar", .prepare = aabr_bcs_prepare, .release = aabr_bcs_release,
            .prepared_bytes = aabr_bcs_bytes,
            .summary = "the BCS, record found by walking from the previous rotation's record");

/* ------------------------------------------------------------------------ */
/* The prepare hook: every polygon's BCS, built before timing. */

void *aabr_bcs_prepare(const sb_scene *s) {
    const int32_t *info = (const int32_t *)s->extra[0];
    const float *vx = (const float *)s->extra[1], *vy = (const float *)s->extra[2];
    const int32_t P = info[0];
    int64_t keys = 0, quads = 0;
    int32_t nmax = 0;
    for (int32_t p = 0; p < P; p++) {
        const int32_t n = info[2 + 2 * p];
        keys += 4 * (int64_t)n + 2;
        quads += 16 * (int64_t)n + 8;
        nmax = n > nmax ? n : nmax;
    }
    aabr_bcs *b = calloc(1, sizeof *b);
    int32_t *h = malloc(sizeof(int32_t) * (2 * (size_t)nmax + 2));
    double *beta = malloc(sizeof(double) * ((size_t)nmax + 1));
    if (b) {
        b->P = P;
        b->R = malloc(sizeof(int32_t) * ((size_t)P + 1));
        b->koff = malloc(sizeof(int64_t) * ((size_t)P + 1));
        b->ioff = malloc(sizeof(int64_t) * ((size_t)P + 1));
        b->key = malloc(sizeof(float) * (size_t)keys);
        b->idx = malloc(sizeof(uint16_t) * (size_t)quads);
    }
    if (!b || !h || !beta || !b->R || !b->koff || !b->ioff || !b->key || !b->idx) {
        free(h), free(beta);
        aabr_bcs_release(b);
        return NULL;
    }
    int64_t k = 0, q = 0;
    for (int32_t p = 0; p < P; p++) {
        const int32_t offset = info[1 + 2 * p], n = info[2 + 2 * p];
        b->koff[p] = k, b->ioff[p] = q;
        int R = bcs_build(vx + offset, vy + offset, n, b->key + k, b->idx + q, h, beta);
        if (R < 0) { /* fewer than 3 hull vertices: one record, vertex 0 for every side */
            R = 1;
            b->key[k] = 0.0f, b->key[k + 1] = FLT_MAX;
            memset(b->idx + q, 0, 4 * sizeof(uint16_t));
        }
        b->R[p] = R;
        b->bytes += (int64_t)(R + 1) * 4 + (int64_t)R * 8;
        k += R + 1, q += 4 * (int64_t)R;
    }
    free(h), free(beta);
    return b;
}

void aabr_bcs_release(void *prepared) {
    aabr_bcs *b = prepared;
    if (!b)
        return;
    free(b->R), free(b->koff), free(b->ioff), free(b->key), free(b->idx);
    free(b);
}

int64_t aabr_bcs_bytes(const void *prepared) { return prepared ? ((const aabr_bcs *)prepared)->bytes : 0; }
