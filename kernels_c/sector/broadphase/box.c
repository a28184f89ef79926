/* The sector's box (see bp_internal.h for the broadphase's files). */
#include "bp_internal.h"

/* The box of the sector's float32 kernel, not of the real sector.  Proven (the prototype's
 * report, section 3): the kernel accepts p only if |D| < sqrt(r2)(1 + 8e) and
 * D.u > |D| (k - 8e(|k| + |u|)), e = 2^-24, or |D| < 2^-40 (underflow).  So the box of the real
 * sector of radius rho = sqrt(r2)(1 + 8e) and cosine k' = (k - 8e(|k| + |u|)) / |u| about
 * u / |u|, computed in double, padded by 2^-40 (1 + rho) + 2^-50 (|c| + rho), holds every point
 * the kernel accepts; double rounding only enlarges it next to those pads.  Its corners: the
 * apex, the two arc ends (u rotated by +-acos k', sin = sqrt(1 - k'^2): no trigonometry), and
 * each axis extreme of the circle whose direction lies inside the sector.  Returns 0 when the
 * kernel can accept no point (NaN input, r2 <= 0, an infinite apex, k = +inf).  Every value is
 * finite past the first tests, so a -ffast-math build computes the same box to within a few
 * double roundings, far inside the pads. */
int bp_sector_box(float cxf, float cyf, float uxf, float uyf, float r2f, float kf, double *b) {
    if (bp_nan32(uxf) || bp_nan32(uyf) || bp_nan32(r2f) || bp_nan32(kf) || !bp_finite32(cxf) || !bp_finite32(cyf))
        return 0; /* a NaN input, or an apex at infinity: p - c is never finite and inside */
    const uint32_t r2b = bp_bits32(r2f), kb = bp_bits32(kf);
    if ((r2b >> 31) || r2b == 0 || kb == SB_BP_INF32)
        return 0; /* r2 <= 0: s < r2 never holds; k = +inf: the angle test never holds */
    if (r2b == SB_BP_INF32) { /* every finite point may be inside */
        b[0] = b[2] = -DBL_MAX;
        b[1] = b[3] = DBL_MAX;
        return 1;
    }
    const double cx = cxf, cy = cyf, ux = uxf, uy = uyf, r2 = r2f, k = kf;
    const double E = 0x1p-24;
    const double rho = sqrt(r2) * (1.0 + 8 * E); /* finite: r2 < 2^128 */
    double xmin, xmax, ymin, ymax;
    /* |u| far from 1 (or k = -inf): keep the radius alone, always valid.  |u| in [2^-20, 2^20]
     * keeps the products from underflowing unless |D| < 2^-100, inside the apex pad. */
    int full = !bp_finite32(uxf) || !bp_finite32(uyf) || !bp_finite32(kf);
    const double un = full ? 1.0 : sqrt(ux * ux + uy * uy);
    full = full || un < 0x1p-20 || un > 0x1p20;
    double ke = 0;
    if (!full) {
        ke = (k - 8 * E * (fabs(k) + un)) / un;
        full = ke <= -1.0;
    }
    if (full) {
        xmin = ymin = -rho;
        xmax = ymax = rho;
    } else {
        if (ke > 1.0)
            ke = 1.0;
        const double hx = ux / un, hy = uy / un;
        const double cs = ke, sn = sqrt(1.0 - ke * ke);
        const double e1x = rho * (hx * cs - hy * sn), e1y = rho * (hy * cs + hx * sn);
        const double e2x = rho * (hx * cs + hy * sn), e2y = rho * (hy * cs - hx * sn);
        xmin = fmin(0.0, fmin(e1x, e2x));
        xmax = fmax(0.0, fmax(e1x, e2x));
        ymin = fmin(0.0, fmin(e1y, e2y));
        ymax = fmax(0.0, fmax(e1y, e2y));
        /* an axis direction inside the (relaxed) angle: the arc reaches the circle's extreme */
        if (hx >= cs)
            xmax = rho;
        if (-hx >= cs)
            xmin = -rho;
        if (hy >= cs)
            ymax = rho;
        if (-hy >= cs)
            ymin = -rho;
    }
    const double pad = 0x1p-40 * (1.0 + rho) + 0x1p-50 * (fabs(cx) + fabs(cy) + rho);
    b[0] = cx + xmin - pad;
    b[1] = cx + xmax + pad;
    b[2] = cy + ymin - pad;
    b[3] = cy + ymax + pad;
    return 1;
}

int sb_bp_box(const sb_bp_sectors *s, int64_t i, double *out4) {
    return bp_sector_box(s->cx[i], s->cy[i], s->ux[i], s->uy[i], s->r2[i], s->cos_theta[i], out4);
}
