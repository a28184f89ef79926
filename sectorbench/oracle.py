"""Exact reference for float32 point-in-sector and point-in-triangle predicates.

Every finite float32 is m·2^e exactly, so each predicate is a question about the
sign of a polynomial in exact inputs.  A vectorised float64 filter with a rigorous
error bound settles rows far from every boundary; the others are redone in exact
integer arithmetic on the inputs scaled by 2^149.

Non-finite inputs: a row with any NaN or ±inf is outside (every constraint false,
margins NaN).  Infinities have no useful extended-real meaning in these predicates
(inf − inf, 0·inf appear at once), and one rule is easier to trust than a case list.

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
# float64's normal range, float32 denormals included.  (A NaN or inf would fail the
# test below anyway.)  A row is trusted only if |g_float| > 2^-28·G_float for every
# constraint, ~2^22 times the bound: its signs are then certain and its margins
# accurate to ~2^-22 relative.  Everything else goes to the exact path.
_TRUST = 2.0**-28


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


def _evaluate(columns, float_terms, exact_terms, use_filter=True):
    """Finite-row mask, and the (K, m) signs and margins of a family's constraint slacks.

    float_terms maps float64 columns to (g, G) arrays of shape (n, m); exact_terms maps
    exact-int columns to (signs, margins).  Non-finite rows get sign 0 and margin NaN.
    """
    check_fp_environment()
    finite = np.logical_and.reduce([np.isfinite(c) for c in columns])
    rows = np.flatnonzero(finite)
    g, G = float_terms(*(c[rows].astype(np.float64) for c in columns))
    sure = np.all(np.abs(g) > _TRUST * G, axis=1) if use_filter else np.zeros(len(rows), dtype=bool)
    signs = np.zeros((len(finite), g.shape[1]), dtype=np.int8)
    margins = np.full(signs.shape, np.nan)
    easy, hard = rows[sure], rows[~sure]
    signs[easy] = np.sign(g[sure])
    margins[easy] = np.abs(g[sure]) / G[sure] * _ONE_ROUNDING
    if len(hard):
        signs[hard], margins[hard] = exact_terms(*(_scaled_ints(c[hard]) for c in columns))
    return finite, signs, margins


def _mismatch_margin(margins: np.ndarray, violations: list[np.ndarray]) -> np.ndarray:
    """Smallest margin that explains a kernel disagreeing with the exact answer.

    violations: one (K, m) mask per way of being inside, marking the constraints a row
    breaks for it.  Inside rows: misjudging any one constraint suffices.  Outside rows:
    the kernel must have misjudged every broken constraint of some way of being inside.
    """
    inside = np.logical_or.reduce([~v.any(axis=1) for v in violations])
    needed = np.minimum.reduce([np.max(np.where(v, margins, -np.inf), axis=1) for v in violations])
    return np.where(inside, margins.min(axis=1), needed)


# ---------------------------------------------------------------- sector


@dataclass(frozen=True, eq=False)
class SectorExact:
    """Exact per-constraint truth and margins for sector rows."""

    radius_ok: np.ndarray  # s < r2
    angle_ok: np.ndarray  # a > sqrt(s)·cos_theta
    radius_margin: np.ndarray
    angle_margin: np.ndarray

    @property
    def inside(self) -> np.ndarray:
        return self.radius_ok & self.angle_ok

    @property
    def mismatch_margin(self) -> np.ndarray:
        return sector_mismatch_margin(
            self.radius_ok, self.angle_ok, self.radius_margin, self.angle_margin
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


def _sector(columns, use_filter=True) -> SectorExact:
    _, signs, margins = _evaluate(columns, _sector_float_terms, _sector_exact_terms, use_filter)
    return SectorExact(signs[:, 0] > 0, signs[:, 1] > 0, margins[:, 0].copy(), margins[:, 1].copy())


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
    """(radius_margin, angle_margin) in float32 roundings; NaN on non-finite rows."""
    result = sector_exact(cx, cy, ux, uy, r2, cos_theta, px, py)
    return result.radius_margin, result.angle_margin


def sector_mismatch_margin(radius_ok, angle_ok, radius_margin, angle_margin) -> np.ndarray:
    """Margin explaining a wrong kernel answer: min of both if inside, else max of the violated."""
    margins = np.stack([radius_margin, angle_margin], axis=1)
    return _mismatch_margin(margins, [~np.stack([radius_ok, angle_ok], axis=1)])


# ---------------------------------------------------------------- triangle


@dataclass(frozen=True, eq=False)
class TriangleExact:
    """Exact truth and per-constraint signs and margins for triangle rows.

    Strict (tolerance 0): the constraints are orient(a,b,p), orient(b,c,p), orient(c,a,p),
    inside iff all > 0 or all < 0.  Tolerant: the slacks U + eps·Den, V + eps·Den and
    (1 + eps)·Den − U − V (Den made ≥ 0), inside iff all ≥ 0.
    """

    inside: np.ndarray  # (K,) bool
    signs: np.ndarray  # (K, 3) int8, sign of each constraint's value; 0 on non-finite rows
    margins: np.ndarray  # (K, 3) float64, NaN on non-finite rows
    tolerance: float  # exact eps; 0.0 selects the strict predicate

    @property
    def mismatch_margin(self) -> np.ndarray:
        return triangle_mismatch_margin(self.signs, self.margins, self.tolerance)


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


def _exact_tolerance(tolerance: float) -> float:
    eps = float(np.float32(tolerance))
    if not math.isfinite(eps):
        raise ValueError(f"tolerance must be a finite float32, got {tolerance!r}")
    return eps


def _triangle(columns, tolerance, use_filter=True) -> TriangleExact:
    eps = _exact_tolerance(tolerance)
    if eps == 0.0:
        _, signs, margins = _evaluate(columns, _orientation_terms, _strict_exact_terms, use_filter)
        inside = np.all(signs > 0, axis=1) | np.all(signs < 0, axis=1)
    else:
        finite, signs, margins = _evaluate(
            columns, _tolerant_float_terms(eps), _tolerant_exact_terms(eps), use_filter
        )
        inside = finite & np.all(signs >= 0, axis=1)
    return TriangleExact(inside, signs, margins, eps)


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
    """(K, 3) margins of the three constraints in float32 roundings; NaN on non-finite rows."""
    return triangle_exact(ax, ay, bx, by, cx, cy, px, py, tolerance).margins


def triangle_mismatch_margin(signs, margins, tolerance: float = 0.0) -> np.ndarray:
    """Margin explaining a wrong kernel answer (see _mismatch_margin).

    Strict rows are inside with all orientations positive or all negative, so an outside
    row is explained by the cheaper of flipping its non-positive or its non-negative ones.
    """
    signs, margins = np.asarray(signs), np.asarray(margins, dtype=np.float64)
    if _exact_tolerance(tolerance) == 0.0:
        return _mismatch_margin(margins, [signs <= 0, signs >= 0])
    return _mismatch_margin(margins, [signs < 0])


# ---------------------------------------------------------------- Fraction reference


def _fraction(value) -> Fraction | None:
    """Exact value of a float32 input, None for NaN or ±inf."""
    x = float(value)
    if not math.isfinite(x):
        return None
    with np.errstate(over="ignore"):
        if float(np.float32(x)) != x:
            raise ValueError(f"{value!r} is not a float32 value")
    return Fraction(x)


def _sector_reference(row):
    """(radius_ok, angle_ok, on radius boundary, on angle boundary), from the definition."""
    values = [_fraction(v) for v in row]
    if any(v is None for v in values):
        return False, False, False, False
    cx, cy, ux, uy, r2, k, px, py = values
    dx, dy = px - cx, py - cy
    s = dx * dx + dy * dy
    a = dx * ux + dy * uy
    if s == 0:
        angle_ok = False  # apex: 0 > 0·k is false
    elif a >= 0 and k >= 0:
        angle_ok = a * a > s * k * k
    elif a < 0 and k < 0:
        angle_ok = a * a < s * k * k
    else:
        angle_ok = a >= 0
    on_angle = a * a == s * k * k and (a == 0 or (a > 0) == (k > 0))
    return s < r2, angle_ok, s == r2, on_angle


def sector_inside_fraction(row) -> bool:
    """One row (cx, cy, ux, uy, r2, cos_theta, px, py) of float32 values, done with Fractions."""
    radius_ok, angle_ok, _, _ = _sector_reference(row)
    return radius_ok and angle_ok


def _triangle_reference(row, tolerance):
    """(inside, the three constraint values or None), from the definition."""
    values = [_fraction(v) for v in row]
    if any(v is None for v in values):
        return False, None
    ax, ay, bx, by, cx, cy, px, py = values
    eps = Fraction(_exact_tolerance(tolerance))
    if eps == 0:
        o1 = (bx - ax) * (py - ay) - (by - ay) * (px - ax)
        o2 = (cx - bx) * (py - by) - (cy - by) * (px - bx)
        o3 = (ax - cx) * (py - cy) - (ay - cy) * (px - cx)
        return (o1 > 0 and o2 > 0 and o3 > 0) or (o1 < 0 and o2 < 0 and o3 < 0), (o1, o2, o3)
    v0x, v0y = cx - ax, cy - ay
    v1x, v1y = bx - ax, by - ay
    v2x, v2y = px - ax, py - ay
    den = v0x * v1y - v0y * v1x
    u = v1y * v2x - v1x * v2y
    v = v0x * v2y - v0y * v2x
    if den < 0:
        den, u, v = -den, -u, -v
    inside = u >= -eps * den and v >= -eps * den and u + v <= (1 + eps) * den
    return inside, (u + eps * den, v + eps * den, (1 + eps) * den - u - v)


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

    Each sampled row goes through both the filtered and the exact-only path.
    """
    rows, sample = _sample(_columns((cx, cy, ux, uy, r2, cos_theta, px, py)), rng, size)
    results = {"filtered": _sector(sample), "exact": _sector(sample, use_filter=False)}
    for i, row in enumerate(zip(*sample)):
        want = _sector_reference(row)
        for path, r in results.items():
            got = (r.radius_ok[i], r.angle_ok[i], r.radius_margin[i] == 0, r.angle_margin[i] == 0)
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

    Each sampled row goes through both the filtered and the exact-only path.
    """
    rows, sample = _sample(_columns((ax, ay, bx, by, cx, cy, px, py)), rng, size)
    results = {
        "filtered": _triangle(sample, tolerance),
        "exact": _triangle(sample, tolerance, use_filter=False),
    }
    for i, row in enumerate(zip(*sample)):
        inside, values = _triangle_reference(row, tolerance)
        want = (inside, (0, 0, 0) if values is None else tuple((v > 0) - (v < 0) for v in values))
        for path, r in results.items():
            got = (bool(r.inside[i]), tuple(int(s) for s in r.signs[i]))
            if got != want:
                _fail("triangle", rows[i], row, path, got, want)
    filtered, exact = results.values()
    _check_margins_agree("triangle", rows, filtered.margins, exact.margins)
