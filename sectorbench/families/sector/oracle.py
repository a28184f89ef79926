"""The exact point-in-sector predicate on float32 inputs.

inside ⟺ |p−c|² < r2 and (p−c)·u > |p−c|·cos_theta, evaluated exactly on the kernel's
own float32 inputs (see exact.py for the filter, the exact path and infinities).  For
the sector, an infinite p or c puts the point outside, r2 = ±inf passes/fails the radius
test, and u or cos_theta = ±inf decide the angle test unless they meet a zero (dx = 0,
dy = 0, or the apex).  The apex and both boundaries are outside.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...oracle import exact, reference
from ...oracle.exact import SCALE_BITS, UNDERFLOW_ERROR

# Fractional bits kept by the integer square root in exact angle margins.
_ROOT_BITS = 64
_isqrt = np.frompyfunc(math.isqrt, 1, 1)


@dataclass(frozen=True, eq=False)
class SectorExact:
    """Exact per-constraint truth and margins for sector rows."""

    radius_ok: np.ndarray  # s < r2
    angle_ok: np.ndarray  # a > sqrt(s)·cos_theta
    radius_margin: np.ndarray  # +inf if decided by an infinite term, NaN if undefined
    angle_margin: np.ndarray
    nan_rows: np.ndarray | None = None  # rows with a NaN input, if known

    @property
    def inside(self) -> np.ndarray:
        return self.radius_ok & self.angle_ok

    @property
    def mismatch_margin(self) -> np.ndarray:
        return sector_mismatch_margin(
            self.radius_ok,
            self.angle_ok,
            self.radius_margin,
            self.angle_margin,
            nan_rows=self.nan_rows,
        )


def _float_terms(cx, cy, ux, uy, r2, k, px, py):
    dx, dy = px - cx, py - cy
    s = dx * dx + dy * dy
    tx, ty = dx * ux, dy * uy
    t = np.sqrt(s) * k
    g = np.stack([r2 - s, tx + ty - t], axis=1)
    G = np.stack([np.abs(r2) + s, np.abs(tx) + np.abs(ty) + np.abs(t)], axis=1)
    return g, G


def _exact_terms(cx, cy, ux, uy, r2, k, px, py):
    dx, dy = px - cx, py - cy
    s = dx * dx + dy * dy  # scale 2^298, like r2, a and sqrt(s)·k below
    r2 = r2 * 2**SCALE_BITS
    radius_sign, radius_margin = exact.exact_signs_margins(r2 - s, np.abs(r2) + s)

    tx, ty = dx * ux, dy * uy
    a = tx + ty
    # a > sqrt(s)·k ⟺ a·|a| > s·k·|k|: squaring with the signs kept stays in integers.
    angle_sign = exact.sign(a * np.abs(a) - s * k * np.abs(k))
    # Magnitudes need sqrt(s): take it with _ROOT_BITS fractional bits.  A nonzero s is
    # ≥ 1 here, so the floor's relative error is below 2^-64.
    root_k = _isqrt(s * 2 ** (2 * _ROOT_BITS)) * np.abs(k)
    G = (np.abs(tx) + np.abs(ty)) * 2**_ROOT_BITS + root_k
    near = np.abs(a) * 2**_ROOT_BITS + root_k  # (|a| + sqrt(s)·|k|)·2^64
    # When a and k share a sign a − sqrt(s)·k cancels; (a² − s·k²) / (a + sqrt(s)·k) doesn't.
    cancels = ((a > 0) & (k > 0)) | ((a < 0) & (k < 0))
    num = np.where(cancels, np.abs(a * a - s * k * k) * 2 ** (2 * _ROOT_BITS), near)
    den = np.where(cancels, near * G, G)
    angle_margin = exact.ratio(num * 2**24, den)
    signs = np.stack([radius_sign, angle_sign], axis=1)
    return signs, np.stack([radius_margin, angle_margin], axis=1)


def _extended_terms(cx, cy, ux, uy, r2, k, px, py):
    """Extended-real constraint outcomes (1 true, -1 false, 0 undefined), and which have ±∞."""
    dx, dy = px - cx, py - cy
    s = dx * dx + dy * dy
    a = dx * ux + dy * uy
    t = np.sqrt(s) * k
    ok = np.stack([s < r2, a > t], axis=1)  # IEEE comparisons are the extended reals'
    defined = np.stack([~np.isnan(s), ~np.isnan(a) & ~np.isnan(t)], axis=1)
    involved = np.stack([~np.isfinite(s) | np.isinf(r2), ~np.isfinite(a) | ~np.isfinite(t)], axis=1)
    return np.where(ok, 1, np.where(defined, -1, 0)).astype(np.int8), involved


def _sector(columns, use_filter=True) -> SectorExact:
    nan_rows, signs, margins = exact.evaluate_constraints(
        columns, _float_terms, _exact_terms, _extended_terms, use_filter
    )
    return SectorExact(signs[:, 0] > 0, signs[:, 1] > 0, margins[:, 0].copy(), margins[:, 1].copy(), nan_rows)


def sector_exact(cx, cy, ux, uy, r2, cos_theta, px, py) -> SectorExact:
    """Exact sector evaluation: inside ⟺ |p−c|² < r2 and (p−c)·u > |p−c|·cos_theta."""
    return _sector(exact.float32_columns((cx, cy, ux, uy, r2, cos_theta, px, py)))


def sector_inside(cx, cy, ux, uy, r2, cos_theta, px, py) -> np.ndarray:
    """Exact inside flags; the apex and both boundaries are outside."""
    return sector_exact(cx, cy, ux, uy, r2, cos_theta, px, py).inside


def sector_constraints(cx, cy, ux, uy, r2, cos_theta, px, py) -> tuple[np.ndarray, np.ndarray]:
    """(radius_ok, angle_ok) exact boolean arrays."""
    result = sector_exact(cx, cy, ux, uy, r2, cos_theta, px, py)
    return result.radius_ok, result.angle_ok


def sector_margins(cx, cy, ux, uy, r2, cos_theta, px, py) -> tuple[np.ndarray, np.ndarray]:
    """(radius_margin, angle_margin) in float32 roundings; see exact.py for non-finite rows."""
    result = sector_exact(cx, cy, ux, uy, r2, cos_theta, px, py)
    return result.radius_margin, result.angle_margin


def sector_mismatch_margin(radius_ok, angle_ok, radius_margin, angle_margin, *, nan_rows=None) -> np.ndarray:
    """Margin explaining a wrong kernel answer: min of both if inside, else max of the violated.

    NaN margins (undefined forms) count as +inf; rows flagged in nan_rows get NaN.
    """
    margins = np.stack([radius_margin, angle_margin], axis=1).astype(np.float64)
    return exact.mismatch_margin(margins, [~np.stack([radius_ok, angle_ok], axis=1)], nan_rows)


def exactly_evaluable(columns: dict[str, np.ndarray], takes_theta: bool) -> tuple[np.ndarray, np.ndarray]:
    """(radius, angle): rows where float32 evaluates each constraint without any rounding.

    Kernels taking (r2, cos_theta): D = p − c, its squares and s, D·u's products and sum,
    a², cos²θ, s·cos²θ, and — for kernels that take sqrt(s) rather than squaring —
    sqrt(s) and sqrt(s)·cos θ must all be exact float32 values.  Kernels taking (r, theta)
    compare sqrt(s) with r and an angle with theta: their radius test is exact when D, s,
    sqrt(s) and r·r are; their angle test only at the apex (D = 0 exactly), since cos θ of
    a float32 θ is never a float32.
    """
    c = {name: v.astype(np.float64) for name, v in columns.items()}
    dx, dx_ok = exact.exact_sub(c["px"], c["cx"])
    dy, dy_ok = exact.exact_sub(c["py"], c["cy"])
    dx2, dx2_ok = exact.exact_mul(dx, dx)
    dy2, dy2_ok = exact.exact_mul(dy, dy)
    s, s_ok = exact.exact_add(dx2, dy2)
    root, root_ok = exact.exact_sqrt(s)
    d_ok = dx_ok & dy_ok & dx2_ok & dy2_ok & s_ok
    if takes_theta:
        rr, rr_ok = exact.exact_mul(c["r"], c["r"])
        radius = d_ok & root_ok & rr_ok & (rr == c["r2"])
        return radius, d_ok & (dx == 0) & (dy == 0)
    k = c["cos_theta"]
    tx, tx_ok = exact.exact_mul(dx, c["ux"])
    ty, ty_ok = exact.exact_mul(dy, c["uy"])
    a, a_ok = exact.exact_add(tx, ty)
    k2, k2_ok = exact.exact_mul(k, k)
    steps = (exact.exact_mul(a, a)[1], exact.exact_mul(s, k2)[1], exact.exact_mul(root, k)[1])
    angle = d_ok & tx_ok & ty_ok & a_ok & k2_ok & root_ok & np.logical_and.reduce(steps)
    # At the apex every product has a zero factor: 0 > 0 exactly, whatever cos²θ rounds to.
    apex = d_ok & (s == 0) & np.isfinite(k) & np.isfinite(c["ux"]) & np.isfinite(c["uy"])
    return d_ok & np.isfinite(c["r2"]), angle | apex


def judged_rows(columns: dict[str, np.ndarray], takes_theta: bool):
    """(inside, mismatch margin, exact, exact_evaluable) per row, for verify.

    Margins include float32 underflow's absolute error: |D|² and D·u underflow to
    2^-150 per product, and sqrt(s) turns s's absolute error into sqrt(2·2^-150) on |D|.
    A kernel taking theta works in angles: one rounding of an angle near theta moves
    the angle test by about |D|·|sin θ|·|θ|·2^-24, so that term joins the angle's scale.
    A constraint float32 evaluates exactly gets margin +inf; `exact` marks rows whose
    mismatch only such constraints could explain; `exact_evaluable` rows where both are.
    """
    names = ("cx", "cy", "ux", "uy", "r2", "cos_theta", "px", "py")
    result = sector_exact(*(columns[name] for name in names))
    c = {name: columns[name].astype(np.float64) for name in names}
    dx, dy, k = c["px"] - c["cx"], c["py"] - c["cy"], np.abs(c["cos_theta"])
    s = dx * dx + dy * dy
    radius = exact.with_underflow(result.radius_margin, np.abs(c["r2"]) + s, 2 * UNDERFLOW_ERROR)
    angle_scale = np.abs(dx * c["ux"]) + np.abs(dy * c["uy"]) + np.sqrt(s) * k
    angle_margin = result.angle_margin
    if takes_theta:  # |g| / (2^-24 G) becomes |g| / (2^-24 (G + |D| |sin θ| |θ|))
        theta = columns["theta"].astype(np.float64)
        angle_term = np.sqrt(s) * np.abs(np.sin(theta) * theta)
        with np.errstate(invalid="ignore", divide="ignore"):
            shrink = np.where(angle_scale > 0, angle_scale / (angle_scale + angle_term), 1.0)
        angle_margin, angle_scale = angle_margin * shrink, angle_scale + angle_term
    angle = exact.with_underflow(angle_margin, angle_scale, 3 * UNDERFLOW_ERROR + k * np.sqrt(2 * UNDERFLOW_ERROR))
    radius_exact, angle_exact = exactly_evaluable(columns, takes_theta)
    margins = np.stack([radius, angle], axis=1)
    violations = [~np.stack([result.radius_ok, result.angle_ok], axis=1)]
    margin, exact_rows = exact.exactness_margins(
        margins, np.stack([radius_exact, angle_exact], axis=1), violations, result.nan_rows
    )
    return result.inside, margin, exact_rows, radius_exact & angle_exact


def unit_u_band(columns: dict[str, np.ndarray]) -> np.ndarray:
    """Rows whose answer changes when u is taken as a unit vector: inside the radius, with
    D·u > |D|·cos_theta (the oracle) and D·u > |D|·|u|·cos_theta (the angle to u below θ,
    what a "unit u" kernel may test instead) of different truth, or the latter exactly on
    its boundary away from the apex.  Under the unit-u contract either answer is right there.

    The two slacks differ by |D|·|cos_theta|·||u| − 1|, so only rows whose oracle slack is
    within a few times that are redone in exact integers (a|a| against s·|u|²·k|k|, signs kept
    as in _exact_terms); the rest cannot change.  Rows with a non-finite input are never in it.
    """
    names = ("cx", "cy", "ux", "uy", "r2", "cos_theta", "px", "py")
    c = {name: columns[name].astype(np.float64) for name in names}
    band = np.zeros(len(c["cx"]), dtype=bool)
    with np.errstate(all="ignore"):
        finite = np.logical_and.reduce([np.isfinite(v) for v in c.values()])
        dx, dy = c["px"] - c["cx"], c["py"] - c["cy"]
        s = dx * dx + dy * dy
        root_k = np.sqrt(s) * np.abs(c["cos_theta"])
        slack = dx * c["ux"] + dy * c["uy"] - np.sqrt(s) * c["cos_theta"]
        scale = np.abs(dx * c["ux"]) + np.abs(dy * c["uy"]) + root_k
        shift = root_k * np.abs(np.hypot(c["ux"], c["uy"]) - 1)
        near = finite & (np.abs(slack) <= 4 * shift + 2.0**-40 * scale) & (s <= c["r2"] * (1 + 2.0**-40))
    rows = np.flatnonzero(near)
    if not rows.size:
        return band
    x = {name: exact.scaled_ints(columns[name][rows]) for name in names}
    dx, dy = x["px"] - x["cx"], x["py"] - x["cy"]
    s = dx * dx + dy * dy
    a = dx * x["ux"] + dy * x["uy"]
    k = x["cos_theta"]
    length2 = x["ux"] * x["ux"] + x["uy"] * x["uy"]  # |u|², scale 2^298
    lhs = a * np.abs(a)  # scale 2^596
    oracle = exact.sign(lhs - s * k * np.abs(k)) > 0
    angle = exact.sign(lhs * 2 ** (2 * SCALE_BITS) - s * length2 * k * np.abs(k))
    radius = exact.sign(x["r2"] * 2**SCALE_BITS - s) > 0
    band[rows] = radius & ((oracle != (angle > 0)) | ((angle == 0) & (s != 0)))  # the apex is outside for both
    return band


# ---------------------------------------------------------------- Fraction reference


def _reference(row):
    """(radius_ok, angle_ok, radius margin kind, angle margin kind), from the definition."""
    values = [reference.extended(v) for v in row]
    if any(v is None for v in values):
        return False, False, "undefined", "undefined"
    cx, cy, ux, uy, r2, k, px, py = values
    add, sub, mul = reference.add, reference.sub, reference.mul
    dx, dy = sub(px, cx), sub(py, cy)
    s = add(mul(dx, dx), mul(dy, dy))
    a = add(mul(dx, ux), mul(dy, uy))
    # a > sqrt(s)·k ⟺ a·|a| > s·k·|k|: x ↦ x·|x| is increasing on the extended reals, and
    # s·k·|k| is undefined just when sqrt(s)·k is (0·∞ with s = 0 or ∞ against k = ∞ or 0).
    lhs, rhs = mul(a, reference.absolute(a)), mul(mul(s, k), reference.absolute(k))
    return (
        reference.less(s, r2),
        reference.less(rhs, lhs),
        reference.margin_kind(s, r2),
        reference.margin_kind(rhs, lhs),
    )


def sector_inside_fraction(row) -> bool:
    """One row (cx, cy, ux, uy, r2, cos_theta, px, py) of float32 values, done with Fractions."""
    radius_ok, angle_ok, _, _ = _reference(row)
    return radius_ok and angle_ok


def self_check_sector(cx, cy, ux, uy, r2, cos_theta, px, py, *, rng: np.random.Generator, size: int = 256) -> None:
    """Re-derive a random sample of rows with Fractions; raise OracleSelfCheckError on disagreement.

    Each sampled row goes through both the filtered and the exact-only path; the outcomes
    and each margin's class (0, finite, +inf, NaN) must match the Fraction reference.
    """
    rows, sample = exact.sample_rows(exact.float32_columns((cx, cy, ux, uy, r2, cos_theta, px, py)), rng, size)
    results = {"filtered": _sector(sample), "exact": _sector(sample, use_filter=False)}
    for i, row in enumerate(zip(*sample)):
        want = _reference(row)
        for path, r in results.items():
            got = (
                bool(r.radius_ok[i]),
                bool(r.angle_ok[i]),
                exact.margin_class(r.radius_margin[i]),
                exact.margin_class(r.angle_margin[i]),
            )
            if got != want:
                raise exact.self_check_failure("sector", rows[i], row, path, got, want)
    filtered, exact_only = results.values()
    for name in ("radius_margin", "angle_margin"):
        exact.check_margins_agree("sector", rows, getattr(filtered, name), getattr(exact_only, name))
