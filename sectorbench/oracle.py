"""Exact reference for float32 point-in-sector and point-in-triangle predicates.

Every finite float32 is m·2^e exactly, so each predicate is a question about the
sign of a polynomial in exact inputs.  A vectorised float64 filter with a rigorous
error bound settles rows far from every boundary; the others are redone in exact
integer arithmetic on the inputs scaled by 2^149.

Non-finite inputs.  A row with a NaN is outside (every constraint false, margins NaN).
Infinities get extended-real semantics, as the float32 kernels do: each constraint is
the same predicate evaluated exactly over the extended reals, and it is false wherever
an undefined form (∞ − ∞, 0·∞) arises in it.  Constraints with no infinite term are
decided exactly as for finite rows.  A constraint decided by an infinite term has
margin +inf (no rounding is near it); an undefined one has margin NaN, and a row with
an undefined step is outside.  Concretely, for the sector an infinite p or c puts the
point outside, r2 = ±inf passes/fails the radius test, and u or cos_theta = ±inf
decide the angle test unless they meet a zero (dx = 0, dy = 0, or the apex).

Margins say how many float32 roundings a row is from a constraint's boundary:
margin = |g| / (2^-24·G), with g the constraint's slack and G the sum of the absolute
values of the terms that make up g.  It is 0 exactly on the boundary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

__all__ = [
    "OracleSelfCheckError",
    "SectorExact",
    "TriangleExact",
    "check_fp_environment",
    "has_special_input",
    "sector_constraints",
    "sector_exact",
    "sector_inside",
    "sector_inside_fraction",
    "sector_margins",
    "sector_mismatch_margin",
    "self_check_sector",
    "self_check_triangle",
    "triangle_constraints",
    "triangle_exact",
    "triangle_inside",
    "triangle_inside_fraction",
    "triangle_margins",
    "triangle_mismatch_margin",
]

# Every finite float32 is an integer multiple of 2^-149.
_SCALE_BITS = 149
_ONE_ROUNDING = 2.0**24
# Fractional bits kept by the integer square root in exact angle margins.
_ROOT_BITS = 64
_SMALLEST_POSITIVE = math.ulp(0.0)

# Filter error bound.  Each slack g is a signed sum of products of exact input
# differences (such as (px − cx)·ux), and G is the sum of those products' absolute
# values.  In float64 every difference, product, sqrt and sum is rounded once with
# relative error ≤ u = 2^-53, and no path through these expressions has more than 7
# roundings (sqrt halves the error of its argument), so |g_float − g| ≤ γ7·G with
# γ7 = 7u/(1 − 7u) < 2^-50 (Higham, Accuracy and Stability, §3.1; Shewchuk-style).
# That model needs every rounding to be relative, i.e. no overflow or underflow.
# Float32 magnitudes lie in [2^-149, 2^128], so nonzero products of two lie in
# [2^-298, 2^258], a nonzero difference of such float64 values is a multiple of
# 2^-350, and every nonzero intermediate here lies in [2^-499, 2^390]: inside
# float64's normal range, float32 denormals included.  (Infinite inputs are replaced by
# 0 before this path, see _evaluate.)  A row is trusted only if |g_float| > 2^-28·G_float for every
# constraint, ~2^22 times the bound: its signs are then certain and its margins
# accurate to ~2^-22 relative.  Everything else goes to the exact path.
_TRUST = 2.0**-28

# Extended-real path.  A constraint with an infinite input in it is decided by its
# infinite terms alone: a finite value never beats ±∞ in a comparison, and it only
# matters whether it is zero (0·∞ is undefined) or, when it multiplies ±∞, its sign.
# The same float64 expressions as above, evaluated in IEEE arithmetic on the raw
# inputs, get exactly that right: differences and products of float32 values keep
# their sign and zero-ness in float64 (no overflow or underflow, see above; x − y is 0
# only if x = y), IEEE ±∞ arithmetic is the extended reals', and IEEE gives NaN exactly
# for the undefined forms ∞ − ∞ and 0·∞, after which NaN propagates and compares
# false.  The one finite sign that matters and comes from a sum, the triangle's Den
# (it decides the flip), is taken exactly instead.


class OracleSelfCheckError(RuntimeError):
    """The oracle's fast path disagreed with its plain Fraction re-derivation."""


def check_fp_environment() -> None:
    """Raise RuntimeError if flush-to-zero or denormals-are-zero is active here."""
    smallest, smallest_normal = float("5e-324"), float("2.2250738585072014e-308")
    float32_denormal = np.array([1e-45], dtype=np.float32)
    daz = smallest + 0.0 == 0.0 or float32_denormal.astype(np.float64)[0] == 0.0
    ftz = smallest_normal / 2.0 == 0.0 or (np.array([smallest_normal]) / 2.0)[0] == 0.0
    if daz or ftz:
        modes = " and ".join(
            mode for mode, on in (("denormals-are-zero", daz), ("flush-to-zero", ftz)) if on
        )
        raise RuntimeError(
            f"{modes} is active in this process (often set by a library built with "
            "-ffast-math); the oracle needs IEEE gradual underflow to decode float32 "
            "denormals and to keep its float64 error bounds valid"
        )


_SMALLEST_NORMAL32 = 2.0**-126


def has_special_input(*arrays) -> np.ndarray:
    """Rows with any NaN, ±inf, float32 subnormal (0 < |x| < 2^-126) or −0.0 input."""
    if not arrays:
        raise ValueError("has_special_input needs at least one array")
    special = np.zeros(len(_columns(arrays)[0]), dtype=bool)
    for column in _columns(arrays):
        x = column.astype(np.float64)
        zero = x == 0
        special |= ~np.isfinite(x) | (~zero & (np.abs(x) < _SMALLEST_NORMAL32))
        special |= zero & np.signbit(x)
    return special


# ---------------------------------------------------------------- evaluation core


def _columns(arrays) -> list[np.ndarray]:
    columns = [np.asarray(a) for a in arrays]
    for c in columns:
        if c.dtype != np.float32 or c.ndim != 1:
            raise TypeError(
                f"oracle inputs must be 1-D float32 arrays, got {c.dtype} of shape {c.shape}"
            )
    if len({len(c) for c in columns}) > 1:
        raise ValueError("oracle inputs must all have the same length")
    return columns


def _scaled_ints(x: np.ndarray) -> np.ndarray:
    """Finite float32 values as exact Python ints x·2^149 (object array)."""
    # float64 holds every float32, and scaling by a power of two cannot round.
    values = x.astype(np.float64).tolist()
    return np.array([int(v * 2.0**_SCALE_BITS) for v in values], dtype=object)


def _sign(x: np.ndarray) -> np.ndarray:
    return (x > 0).astype(np.int8) - (x < 0).astype(np.int8)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num/den as float64 for nonnegative exact ints; 0/0 is 0."""
    # Int true division is correctly rounded; a nonzero margin must never round to 0.0,
    # since 0 means "exactly on the boundary".
    flat = [max(n / d, _SMALLEST_POSITIVE) if n else 0.0 for n, d in zip(num.ravel(), den.ravel())]
    return np.array(flat, dtype=np.float64).reshape(num.shape)


def _exact_signs_margins(g: np.ndarray, G: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return _sign(g), _ratio(np.abs(g) * 2**24, G)


def _evaluate(columns, float_terms, exact_terms, extended_terms, use_filter=True):
    """NaN-row mask, and the (K, m) signs and margins of a family's constraint slacks.

    float_terms maps float64 columns to (g, G) arrays of shape (n, m); exact_terms maps
    exact-int columns to (signs, margins); extended_terms maps the raw float64 columns of
    rows with an infinity to (signs, involved): the constraints' extended-real signs (0
    if undefined) and which constraints have an infinite term.  NaN rows get sign 0 and
    margin NaN; an involved constraint gets margin +inf, or NaN if undefined.
    """
    check_fp_environment()
    nan_rows = np.logical_or.reduce([np.isnan(c) for c in columns])
    infinite = [np.isinf(c) for c in columns]
    inf_rows = np.flatnonzero(~nan_rows & np.logical_or.reduce(infinite))
    # Rows with an infinity go through the usual path with each infinity replaced by 0;
    # only their constraints without an infinite term keep that result.
    columns_0 = [np.where(i, np.float32(0), c) if i.any() else c for c, i in zip(columns, infinite)]
    rows = np.flatnonzero(~nan_rows)
    g, G = float_terms(*(c[rows].astype(np.float64) for c in columns_0))
    sure = np.all(np.abs(g) > _TRUST * G, axis=1) if use_filter else np.zeros(len(rows), dtype=bool)
    signs = np.zeros((len(nan_rows), g.shape[1]), dtype=np.int8)
    margins = np.full(signs.shape, np.nan)
    easy, hard = rows[sure], rows[~sure]
    signs[easy] = np.sign(g[sure])
    margins[easy] = np.abs(g[sure]) / G[sure] * _ONE_ROUNDING
    if len(hard):
        signs[hard], margins[hard] = exact_terms(*(_scaled_ints(c[hard]) for c in columns_0))
    if len(inf_rows):
        with np.errstate(invalid="ignore"):
            ext_signs, involved = extended_terms(*(c[inf_rows].astype(np.float64) for c in columns))
        row_signs, row_margins = signs[inf_rows], margins[inf_rows]
        row_signs[involved] = ext_signs[involved]
        row_margins[involved] = np.where(ext_signs[involved] == 0, np.nan, np.inf)
        signs[inf_rows], margins[inf_rows] = row_signs, row_margins
    return nan_rows, signs, margins


def _mismatch_margin(margins: np.ndarray, violations: list[np.ndarray], nan_rows=None) -> np.ndarray:
    """Smallest margin that explains a kernel disagreeing with the exact answer.

    violations: one (K, m) mask per way of being inside, marking the constraints a row
    breaks for it.  Inside rows: misjudging any one constraint suffices.  Outside rows:
    the kernel must have misjudged every broken constraint of some way of being inside.
    A NaN margin (undefined form) counts as +inf: a wrong answer there is not rounding.
    Rows marked in nan_rows (a NaN input) get NaN.
    """
    margins = np.where(np.isnan(margins), np.inf, margins)
    inside = np.logical_or.reduce([~v.any(axis=1) for v in violations])
    needed = np.minimum.reduce([np.max(np.where(v, margins, -np.inf), axis=1) for v in violations])
    result = np.where(inside, margins.min(axis=1), needed)
    if nan_rows is not None:
        result = np.where(np.asarray(nan_rows, dtype=bool), np.nan, result)
    return result


# ---------------------------------------------------------------- sector


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
            self.radius_ok, self.angle_ok, self.radius_margin, self.angle_margin,
            nan_rows=self.nan_rows,
        )


def _sector_float_terms(cx, cy, ux, uy, r2, k, px, py):
    dx, dy = px - cx, py - cy
    s = dx * dx + dy * dy
    tx, ty = dx * ux, dy * uy
    t = np.sqrt(s) * k
    g = np.stack([r2 - s, tx + ty - t], axis=1)
    G = np.stack([np.abs(r2) + s, np.abs(tx) + np.abs(ty) + np.abs(t)], axis=1)
    return g, G


_isqrt = np.frompyfunc(math.isqrt, 1, 1)


def _sector_exact_terms(cx, cy, ux, uy, r2, k, px, py):
    dx, dy = px - cx, py - cy
    s = dx * dx + dy * dy  # scale 2^298, like r2, a and sqrt(s)·k below
    r2 = r2 * 2**_SCALE_BITS
    radius_sign, radius_margin = _exact_signs_margins(r2 - s, np.abs(r2) + s)

    tx, ty = dx * ux, dy * uy
    a = tx + ty
    # a > sqrt(s)·k ⟺ a·|a| > s·k·|k|: squaring with the signs kept stays in integers.
    angle_sign = _sign(a * np.abs(a) - s * k * np.abs(k))
    # Magnitudes need sqrt(s): take it with _ROOT_BITS fractional bits.  A nonzero s is
    # ≥ 1 here, so the floor's relative error is below 2^-64.
    root_k = _isqrt(s * 2 ** (2 * _ROOT_BITS)) * np.abs(k)
    G = (np.abs(tx) + np.abs(ty)) * 2**_ROOT_BITS + root_k
    near = np.abs(a) * 2**_ROOT_BITS + root_k  # (|a| + sqrt(s)·|k|)·2^64
    # When a and k share a sign a − sqrt(s)·k cancels; (a² − s·k²) / (a + sqrt(s)·k) doesn't.
    cancels = ((a > 0) & (k > 0)) | ((a < 0) & (k < 0))
    num = np.where(cancels, np.abs(a * a - s * k * k) * 2 ** (2 * _ROOT_BITS), near)
    den = np.where(cancels, near * G, G)
    angle_margin = _ratio(num * 2**24, den)
    signs = np.stack([radius_sign, angle_sign], axis=1)
    return signs, np.stack([radius_margin, angle_margin], axis=1)


def _sector_extended_terms(cx, cy, ux, uy, r2, k, px, py):
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
    nan_rows, signs, margins = _evaluate(
        columns, _sector_float_terms, _sector_exact_terms, _sector_extended_terms, use_filter
    )
    return SectorExact(
        signs[:, 0] > 0, signs[:, 1] > 0, margins[:, 0].copy(), margins[:, 1].copy(), nan_rows
    )


def sector_exact(cx, cy, ux, uy, r2, cos_theta, px, py) -> SectorExact:
    """Exact sector evaluation: inside ⟺ |p−c|² < r2 and (p−c)·u > |p−c|·cos_theta."""
    return _sector(_columns((cx, cy, ux, uy, r2, cos_theta, px, py)))


def sector_inside(cx, cy, ux, uy, r2, cos_theta, px, py) -> np.ndarray:
    """Exact inside flags; the apex and both boundaries are outside."""
    return sector_exact(cx, cy, ux, uy, r2, cos_theta, px, py).inside


def sector_constraints(cx, cy, ux, uy, r2, cos_theta, px, py) -> tuple[np.ndarray, np.ndarray]:
    """(radius_ok, angle_ok) exact boolean arrays."""
    result = sector_exact(cx, cy, ux, uy, r2, cos_theta, px, py)
    return result.radius_ok, result.angle_ok


def sector_margins(cx, cy, ux, uy, r2, cos_theta, px, py) -> tuple[np.ndarray, np.ndarray]:
    """(radius_margin, angle_margin) in float32 roundings; see the module doc for non-finite rows."""
    result = sector_exact(cx, cy, ux, uy, r2, cos_theta, px, py)
    return result.radius_margin, result.angle_margin


def sector_mismatch_margin(
    radius_ok, angle_ok, radius_margin, angle_margin, *, nan_rows=None
) -> np.ndarray:
    """Margin explaining a wrong kernel answer: min of both if inside, else max of the violated.

    NaN margins (undefined forms) count as +inf; rows flagged in nan_rows get NaN.
    """
    margins = np.stack([radius_margin, angle_margin], axis=1).astype(np.float64)
    return _mismatch_margin(margins, [~np.stack([radius_ok, angle_ok], axis=1)], nan_rows)


# ---------------------------------------------------------------- triangle


@dataclass(frozen=True, eq=False)
class TriangleExact:
    """Exact truth and per-constraint signs and margins for triangle rows.

    Strict (tolerance 0): the constraints are orient(a,b,p), orient(b,c,p), orient(c,a,p),
    inside iff all > 0 or all < 0.  Tolerant: the slacks U + eps·Den, V + eps·Den and
    (1 + eps)·Den − U − V (Den made ≥ 0), inside iff all ≥ 0.
    """

    inside: np.ndarray  # (K,) bool
    signs: np.ndarray  # (K, 3) int8, sign of each constraint's value; 0 if NaN or undefined
    margins: np.ndarray  # (K, 3) float64; +inf if infinite, NaN if NaN or undefined
    tolerance: float  # exact eps; 0.0 selects the strict predicate
    nan_rows: np.ndarray | None = None  # rows with a NaN input, if known

    @property
    def mismatch_margin(self) -> np.ndarray:
        return triangle_mismatch_margin(
            self.signs, self.margins, self.tolerance, nan_rows=self.nan_rows
        )


def _cross(p, q, r, t):
    """p·q − r·t and |p·q| + |r·t|, on float64 or exact-int arrays alike."""
    left, right = p * q, r * t
    return left - right, np.abs(left) + np.abs(right)


def _orientation_terms(ax, ay, bx, by, cx, cy, px, py):
    edges = (((ax, ay), (bx, by)), ((bx, by), (cx, cy)), ((cx, cy), (ax, ay)))
    terms = [_cross(x1 - x0, py - y0, y1 - y0, px - x0) for (x0, y0), (x1, y1) in edges]
    return np.stack([g for g, _ in terms], axis=1), np.stack([G for _, G in terms], axis=1)


def _strict_exact_terms(*columns):
    return _exact_signs_margins(*_orientation_terms(*columns))


def _strict_extended_terms(ax, ay, bx, by, cx, cy, px, py):
    edges = (((ax, ay), (bx, by)), ((bx, by), (cx, cy)), ((cx, cy), (ax, ay)))
    values, involved = [], []
    for (x0, y0), (x1, y1) in edges:
        left, right = (x1 - x0) * (py - y0), (y1 - y0) * (px - x0)
        values.append(left - right)
        involved.append(~np.isfinite(left) | ~np.isfinite(right))
    return _sign(np.stack(values, axis=1)), np.stack(involved, axis=1)


def _barycentric_terms(ax, ay, bx, by, cx, cy, px, py, eps, one):
    """Tolerant slacks and bounds, plus Den and its bound; `one` is 1 in eps's units."""
    v0x, v0y, v1x, v1y, v2x, v2y = cx - ax, cy - ay, bx - ax, by - ay, px - ax, py - ay
    den, den_G = _cross(v0x, v1y, v0y, v1x)
    u, u_G = _cross(v1y, v2x, v1x, v2y)
    v, v_G = _cross(v0x, v2y, v0y, v2x)
    flip = den < 0  # kernels negate all three when Den < 0; Den == 0 stays literal
    den, u, v = (np.where(flip, -x, x) for x in (den, u, v))
    slack, slack_G = eps * den, abs(eps) * den_G
    g = np.stack([u * one + slack, v * one + slack, den * one + slack - u * one - v * one], axis=1)
    G = np.stack(
        [u_G * one + slack_G, v_G * one + slack_G, (den_G + u_G + v_G) * one + slack_G], axis=1
    )
    return g, G, den, den_G


def _tolerant_float_terms(eps):
    def terms(*columns):
        g, G, den, den_G = _barycentric_terms(*columns, eps=eps, one=1.0)
        # The flip is only right if Den's sign is certain; a zero g is never trusted.
        g[np.abs(den) <= _TRUST * den_G] = 0.0
        return g, G

    return terms


def _tolerant_exact_terms(eps):
    scaled_eps = int(eps * 2.0**_SCALE_BITS)

    def terms(*columns):
        g, G, _, _ = _barycentric_terms(*columns, eps=scaled_eps, one=2**_SCALE_BITS)
        return _exact_signs_margins(g, G)

    return terms


def _tolerant_extended_terms(eps):
    def terms(ax, ay, bx, by, cx, cy, px, py):
        v0x, v0y, v1x, v1y, v2x, v2y = cx - ax, cy - ay, bx - ax, by - ay, px - ax, py - ay
        den = v0x * v1y - v0y * v1x
        u = v1y * v2x - v1x * v2y
        v = v0x * v2y - v0y * v2x
        # A finite Den means finite a, b, c; its sign decides the flip, so take it exactly.
        den_sign = _sign(den)
        rows = np.flatnonzero(np.isfinite(den))
        if len(rows):
            iax, iay, ibx, iby, icx, icy = (_scaled_ints(x[rows]) for x in (ax, ay, bx, by, cx, cy))
            den_sign[rows] = _sign(_cross(icx - iax, iby - iay, icy - iay, ibx - iax)[0])
        flip = den_sign < 0
        den, u, v = (np.where(flip, -x, x) for x in (den, u, v))
        # (1 + eps)·Den as in the definition: 1 + eps keeps its sign and zero-ness in float64
        g = np.stack([u + eps * den, v + eps * den, (1.0 + eps) * den - u - v], axis=1)
        return _sign(g), ~np.isfinite(g)

    return terms


def _exact_tolerance(tolerance: float) -> float:
    eps = float(np.float32(tolerance))
    if not math.isfinite(eps):
        raise ValueError(f"tolerance must be a finite float32, got {tolerance!r}")
    return eps


def _triangle(columns, tolerance, use_filter=True) -> TriangleExact:
    eps = _exact_tolerance(tolerance)
    if eps == 0.0:
        nan_rows, signs, margins = _evaluate(
            columns, _orientation_terms, _strict_exact_terms, _strict_extended_terms, use_filter
        )
        inside = np.all(signs > 0, axis=1) | np.all(signs < 0, axis=1)
    else:
        nan_rows, signs, margins = _evaluate(
            columns, _tolerant_float_terms(eps), _tolerant_exact_terms(eps),
            _tolerant_extended_terms(eps), use_filter,
        )
        # sign 0 is a pass, so undefined (NaN-margin) constraints must be excluded here
        inside = np.all(signs >= 0, axis=1) & ~np.isnan(margins).any(axis=1)
    return TriangleExact(inside, signs, margins, eps, nan_rows)


def triangle_exact(ax, ay, bx, by, cx, cy, px, py, tolerance: float = 0.0) -> TriangleExact:
    """Exact triangle evaluation: tolerance 0 → strict, else barycentric with float32 eps."""
    return _triangle(_columns((ax, ay, bx, by, cx, cy, px, py)), tolerance)


def triangle_inside(ax, ay, bx, by, cx, cy, px, py, tolerance: float = 0.0) -> np.ndarray:
    """Exact inside flags.  Strict: edges, vertices and degenerate triangles are outside."""
    return triangle_exact(ax, ay, bx, by, cx, cy, px, py, tolerance).inside


def triangle_constraints(ax, ay, bx, by, cx, cy, px, py, tolerance: float = 0.0) -> np.ndarray:
    """(K, 3) int8 signs of the three constraint values (see TriangleExact)."""
    return triangle_exact(ax, ay, bx, by, cx, cy, px, py, tolerance).signs


def triangle_margins(ax, ay, bx, by, cx, cy, px, py, tolerance: float = 0.0) -> np.ndarray:
    """(K, 3) margins of the three constraints in float32 roundings (see the module doc)."""
    return triangle_exact(ax, ay, bx, by, cx, cy, px, py, tolerance).margins


def triangle_mismatch_margin(signs, margins, tolerance: float = 0.0, *, nan_rows=None) -> np.ndarray:
    """Margin explaining a wrong kernel answer (see _mismatch_margin).

    Strict rows are inside with all orientations positive or all negative, so an outside
    row is explained by the cheaper of flipping its non-positive or its non-negative ones.
    A NaN margin marks an undefined constraint: it is broken, and counts as +inf.  Rows
    flagged in nan_rows get NaN.
    """
    signs, margins = np.asarray(signs), np.asarray(margins, dtype=np.float64)
    if _exact_tolerance(tolerance) == 0.0:
        return _mismatch_margin(margins, [signs <= 0, signs >= 0], nan_rows)
    return _mismatch_margin(margins, [(signs < 0) | np.isnan(margins)], nan_rows)


# ---------------------------------------------------------------- Fraction reference
#
# The extended reals spelled out: a finite value is a Fraction, ±∞ is the float ±inf,
# and an undefined form (∞ − ∞, 0·∞) is None.


def _extended(value) -> Fraction | float | None:
    """Exact value of a float32 input: a Fraction, ±inf as a float, None for NaN."""
    x = float(value)
    if math.isnan(x):
        return None
    if math.isinf(x):
        return x
    with np.errstate(over="ignore"):
        if float(np.float32(x)) != x:
            raise ValueError(f"{value!r} is not a float32 value")
    return Fraction(x)


def _is_infinite(x) -> bool:
    return isinstance(x, float)


def _neg(x):
    return None if x is None else -x


def _abs(x):
    return None if x is None else abs(x)


def _add(x, y):
    if x is None or y is None:
        return None
    if _is_infinite(x) and _is_infinite(y) and x != y:
        return None  # ∞ − ∞
    if _is_infinite(x):
        return x
    if _is_infinite(y):
        return y
    return x + y


def _sub(x, y):
    return _add(x, _neg(y))


def _mul(x, y):
    if x is None or y is None:
        return None
    if _is_infinite(x) or _is_infinite(y):
        if x == 0 or y == 0:
            return None  # 0·∞
        return math.inf if (x > 0) == (y > 0) else -math.inf
    return x * y


def _less(x, y) -> bool:
    """x < y over the extended reals; false if either side is undefined."""
    return x is not None and y is not None and x < y


def _margin_kind(x, y) -> str:
    """The margin class of the constraint comparing x with y."""
    if x is None or y is None:
        return "undefined"  # margin NaN
    if _is_infinite(x) or _is_infinite(y):
        return "infinite"  # margin +inf
    return "zero" if x == y else "finite"


def _sector_reference(row):
    """(radius_ok, angle_ok, radius margin kind, angle margin kind), from the definition."""
    values = [_extended(v) for v in row]
    if any(v is None for v in values):
        return False, False, "undefined", "undefined"
    cx, cy, ux, uy, r2, k, px, py = values
    dx, dy = _sub(px, cx), _sub(py, cy)
    s = _add(_mul(dx, dx), _mul(dy, dy))
    a = _add(_mul(dx, ux), _mul(dy, uy))
    # a > sqrt(s)·k ⟺ a·|a| > s·k·|k|: x ↦ x·|x| is increasing on the extended reals, and
    # s·k·|k| is undefined just when sqrt(s)·k is (0·∞ with s = 0 or ∞ against k = ∞ or 0).
    lhs, rhs = _mul(a, _abs(a)), _mul(_mul(s, k), _abs(k))
    return _less(s, r2), _less(rhs, lhs), _margin_kind(s, r2), _margin_kind(rhs, lhs)


def sector_inside_fraction(row) -> bool:
    """One row (cx, cy, ux, uy, r2, cos_theta, px, py) of float32 values, done with Fractions."""
    radius_ok, angle_ok, _, _ = _sector_reference(row)
    return radius_ok and angle_ok


def _triangle_reference(row, tolerance):
    """(inside, the three constraint values, or None for a NaN row), from the definition.

    A constraint value is a Fraction, ±inf, or None where an undefined form arises in it;
    any undefined value makes the row outside.
    """
    values = [_extended(v) for v in row]
    if any(v is None for v in values):
        return False, None
    ax, ay, bx, by, cx, cy, px, py = values
    eps = Fraction(_exact_tolerance(tolerance))
    if eps == 0:
        o1 = _sub(_mul(_sub(bx, ax), _sub(py, ay)), _mul(_sub(by, ay), _sub(px, ax)))
        o2 = _sub(_mul(_sub(cx, bx), _sub(py, by)), _mul(_sub(cy, by), _sub(px, bx)))
        o3 = _sub(_mul(_sub(ax, cx), _sub(py, cy)), _mul(_sub(ay, cy), _sub(px, cx)))
        orientations = (o1, o2, o3)
        if any(o is None for o in orientations):
            return False, orientations
        return all(o > 0 for o in orientations) or all(o < 0 for o in orientations), orientations
    v0x, v0y = _sub(cx, ax), _sub(cy, ay)
    v1x, v1y = _sub(bx, ax), _sub(by, ay)
    v2x, v2y = _sub(px, ax), _sub(py, ay)
    den = _sub(_mul(v0x, v1y), _mul(v0y, v1x))
    u = _sub(_mul(v1y, v2x), _mul(v1x, v2y))
    v = _sub(_mul(v0x, v2y), _mul(v0y, v2x))
    if den is not None and den < 0:
        den, u, v = _neg(den), _neg(u), _neg(v)
    slacks = (
        _add(u, _mul(eps, den)),
        _add(v, _mul(eps, den)),
        _sub(_sub(_mul(1 + eps, den), u), v),
    )
    return all(g is not None and g >= 0 for g in slacks), slacks


def triangle_inside_fraction(row, tolerance: float = 0.0) -> bool:
    """One row (ax, ay, bx, by, cx, cy, px, py) of float32 values, done with Fractions."""
    return _triangle_reference(row, tolerance)[0]


# ---------------------------------------------------------------- self-check


def _sample(columns, rng: np.random.Generator, size: int):
    rows = np.sort(rng.choice(len(columns[0]), size=min(size, len(columns[0])), replace=False))
    return rows, [c[rows] for c in columns]


def _fail(family, row_index, row, path, got, want):
    values = [float(v) for v in row]
    raise OracleSelfCheckError(
        f"{family} row {row_index} {values}: {path} path gives {got}, Fractions give {want}"
    )


def _kind_of_margin(margin) -> str:
    if math.isnan(margin):
        return "undefined"
    if math.isinf(margin):
        return "infinite"
    return "zero" if margin == 0 else "finite"


def _check_margins_agree(family, rows, filtered, exact):
    close = np.isclose(filtered, exact, rtol=1e-6, atol=0.0, equal_nan=True)
    if not close.all():
        i = np.flatnonzero(~close.reshape(len(rows), -1).all(axis=1))[0]
        raise OracleSelfCheckError(
            f"{family} row {rows[i]}: filtered margins {filtered[i]} vs exact {exact[i]}"
        )


def self_check_sector(
    cx, cy, ux, uy, r2, cos_theta, px, py, *, rng: np.random.Generator, size: int = 256
) -> None:
    """Re-derive a random sample of rows with Fractions; raise OracleSelfCheckError on disagreement.

    Each sampled row goes through both the filtered and the exact-only path; the outcomes
    and each margin's class (0, finite, +inf, NaN) must match the Fraction reference.
    """
    rows, sample = _sample(_columns((cx, cy, ux, uy, r2, cos_theta, px, py)), rng, size)
    results = {"filtered": _sector(sample), "exact": _sector(sample, use_filter=False)}
    for i, row in enumerate(zip(*sample)):
        want = _sector_reference(row)
        for path, r in results.items():
            got = (
                bool(r.radius_ok[i]),
                bool(r.angle_ok[i]),
                _kind_of_margin(r.radius_margin[i]),
                _kind_of_margin(r.angle_margin[i]),
            )
            if got != want:
                _fail("sector", rows[i], row, path, got, want)
    filtered, exact = results.values()
    for name in ("radius_margin", "angle_margin"):
        _check_margins_agree("sector", rows, getattr(filtered, name), getattr(exact, name))


def self_check_triangle(
    ax, ay, bx, by, cx, cy, px, py, *, rng: np.random.Generator, tolerance: float = 0.0,
    size: int = 256,
) -> None:
    """Re-derive a random sample of rows with Fractions; raise OracleSelfCheckError on disagreement.

    Each sampled row goes through both the filtered and the exact-only path; the outcomes
    and each margin's class (0, finite, +inf, NaN) must match the Fraction reference.
    """
    rows, sample = _sample(_columns((ax, ay, bx, by, cx, cy, px, py)), rng, size)
    results = {
        "filtered": _triangle(sample, tolerance),
        "exact": _triangle(sample, tolerance, use_filter=False),
    }
    for i, row in enumerate(zip(*sample)):
        inside, values = _triangle_reference(row, tolerance)
        values = (None, None, None) if values is None else values
        want = (
            inside,
            tuple(0 if v is None else (v > 0) - (v < 0) for v in values),
            tuple(_margin_kind(v, 0) for v in values),
        )
        for path, r in results.items():
            got = (
                bool(r.inside[i]),
                tuple(int(s) for s in r.signs[i]),
                tuple(_kind_of_margin(m) for m in r.margins[i]),
            )
            if got != want:
                _fail("triangle", rows[i], row, path, got, want)
    filtered, exact = results.values()
    _check_margins_agree("triangle", rows, filtered.margins, exact.margins)
