"""The exact point-in-triangle predicates on float32 inputs.

Strict (tolerance 0): the constraints are orient(a,b,p), orient(b,c,p), orient(c,a,p),
inside iff all > 0 or all < 0: edges, vertices and degenerate triangles are outside.
Tolerant (the recastnavigation kernels, eps = float32 tolerance): the slacks
U + eps·Den, V + eps·Den and (1 + eps)·Den − U − V (Den made ≥ 0), inside iff all ≥ 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ...oracle import exact, reference
from ...oracle.exact import SCALE_BITS, TRUST, UNDERFLOW_ERROR


@dataclass(frozen=True, eq=False)
class TriangleExact:
    """Exact truth and per-constraint signs and margins for triangle rows."""

    inside: np.ndarray  # (K,) bool
    signs: np.ndarray  # (K, 3) int8, sign of each constraint's value; 0 if NaN or undefined
    margins: np.ndarray  # (K, 3) float64; +inf if infinite, NaN if NaN or undefined
    tolerance: float  # exact eps; 0.0 selects the strict predicate
    nan_rows: np.ndarray | None = None  # rows with a NaN input, if known

    @property
    def mismatch_margin(self) -> np.ndarray:
        return triangle_mismatch_margin(self.signs, self.margins, self.tolerance, nan_rows=self.nan_rows)


def _cross(p, q, r, t):
    """p·q − r·t and |p·q| + |r·t|, on float64 or exact-int arrays alike."""
    left, right = p * q, r * t
    return left - right, np.abs(left) + np.abs(right)


EDGES = (("a", "b"), ("b", "c"), ("c", "a"))


def _orientation_terms(ax, ay, bx, by, cx, cy, px, py):
    edges = (((ax, ay), (bx, by)), ((bx, by), (cx, cy)), ((cx, cy), (ax, ay)))
    terms = [_cross(x1 - x0, py - y0, y1 - y0, px - x0) for (x0, y0), (x1, y1) in edges]
    return np.stack([g for g, _ in terms], axis=1), np.stack([G for _, G in terms], axis=1)


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
    G = np.stack([u_G * one + slack_G, v_G * one + slack_G, (den_G + u_G + v_G) * one + slack_G], axis=1)
    return g, G, den, den_G


def _tolerant_float_terms(eps):
    def terms(*columns):
        g, G, den, den_G = _barycentric_terms(*columns, eps=eps, one=1.0)
        # The flip is only right if Den's sign is certain; a zero g is never trusted.
        g[np.abs(den) <= TRUST * den_G] = 0.0
        return g, G

    return terms


def _tolerant_exact_terms(eps):
    scaled_eps = int(eps * 2.0**SCALE_BITS)

    def terms(*columns):
        g, G, _, _ = _barycentric_terms(*columns, eps=scaled_eps, one=2**SCALE_BITS)
        return exact.exact_signs_margins(g, G)

    return terms


def _tolerant_extended_terms(eps):
    def terms(ax, ay, bx, by, cx, cy, px, py):
        v0x, v0y, v1x, v1y, v2x, v2y = cx - ax, cy - ay, bx - ax, by - ay, px - ax, py - ay
        den = v0x * v1y - v0y * v1x
        u = v1y * v2x - v1x * v2y
        v = v0x * v2y - v0y * v2x
        # A finite Den means finite a, b, c; its sign decides the flip, so take it exactly.
        den_sign = exact.sign(den)
        rows = np.flatnonzero(np.isfinite(den))
        if len(rows):
            iax, iay, ibx, iby, icx, icy = (exact.scaled_ints(x[rows]) for x in (ax, ay, bx, by, cx, cy))
            den_sign[rows] = exact.sign(_cross(icx - iax, iby - iay, icy - iay, ibx - iax)[0])
        flip = den_sign < 0
        den, u, v = (np.where(flip, -x, x) for x in (den, u, v))
        # (1 + eps)·Den as in the definition: 1 + eps keeps its sign and zero-ness in float64
        g = np.stack([u + eps * den, v + eps * den, (1.0 + eps) * den - u - v], axis=1)
        return exact.sign(g), ~np.isfinite(g)

    return terms


def exact_tolerance(tolerance: float) -> float:
    eps = float(np.float32(tolerance))
    if not math.isfinite(eps):
        raise ValueError(f"tolerance must be a finite float32, got {tolerance!r}")
    return eps


def _triangle(columns, tolerance, use_filter=True) -> TriangleExact:
    eps = exact_tolerance(tolerance)
    if eps == 0.0:
        nan_rows, signs, margins = exact.evaluate_polynomials(columns, _orientation_terms, use_filter)
        inside = np.all(signs > 0, axis=1) | np.all(signs < 0, axis=1)
    else:
        nan_rows, signs, margins = exact.evaluate_constraints(
            columns,
            _tolerant_float_terms(eps),
            _tolerant_exact_terms(eps),
            _tolerant_extended_terms(eps),
            use_filter,
        )
        # sign 0 is a pass, so undefined (NaN-margin) constraints must be excluded here
        inside = np.all(signs >= 0, axis=1) & ~np.isnan(margins).any(axis=1)
    return TriangleExact(inside, signs, margins, eps, nan_rows)


def triangle_exact(ax, ay, bx, by, cx, cy, px, py, tolerance: float = 0.0) -> TriangleExact:
    """Exact triangle evaluation: tolerance 0 → strict, else barycentric with float32 eps."""
    return _triangle(exact.float32_columns((ax, ay, bx, by, cx, cy, px, py)), tolerance)


def triangle_inside(ax, ay, bx, by, cx, cy, px, py, tolerance: float = 0.0) -> np.ndarray:
    """Exact inside flags.  Strict: edges, vertices and degenerate triangles are outside."""
    return triangle_exact(ax, ay, bx, by, cx, cy, px, py, tolerance).inside


def triangle_margins(ax, ay, bx, by, cx, cy, px, py, tolerance: float = 0.0) -> np.ndarray:
    """(K, 3) margins of the three constraints in float32 roundings (see exact.py)."""
    return triangle_exact(ax, ay, bx, by, cx, cy, px, py, tolerance).margins


def triangle_mismatch_margin(signs, margins, tolerance: float = 0.0, *, nan_rows=None) -> np.ndarray:
    """Margin explaining a wrong kernel answer (see exact.mismatch_margin).

    Strict rows are inside with all orientations positive or all negative, so an outside
    row is explained by the cheaper of flipping its non-positive or its non-negative ones.
    A NaN margin marks an undefined constraint: it is broken, and counts as +inf.  Rows
    flagged in nan_rows get NaN.
    """
    signs, margins = np.asarray(signs), np.asarray(margins, dtype=np.float64)
    if exact_tolerance(tolerance) == 0.0:
        return exact.mismatch_margin(margins, [signs <= 0, signs >= 0], nan_rows)
    return exact.mismatch_margin(margins, [(signs < 0) | np.isnan(margins)], nan_rows)


def exactly_evaluable(columns: dict[str, np.ndarray]) -> np.ndarray:
    """(rows, 3): where float32 evaluates each orientation (x1−x0)(py−y0) − (y1−y0)(px−x0) exactly."""
    c = {name: v.astype(np.float64) for name, v in columns.items()}
    edges = []
    for p, q in EDGES:
        ex, ex_ok = exact.exact_sub(c[q + "x"], c[p + "x"])
        vy, vy_ok = exact.exact_sub(c["py"], c[p + "y"])
        ey, ey_ok = exact.exact_sub(c[q + "y"], c[p + "y"])
        vx, vx_ok = exact.exact_sub(c["px"], c[p + "x"])
        left, left_ok = exact.exact_mul(ex, vy)
        right, right_ok = exact.exact_mul(ey, vx)
        edges.append(ex_ok & vy_ok & ey_ok & vx_ok & left_ok & right_ok & exact.exact_sub(left, right)[1])
    return np.stack(edges, axis=1)


def judged_rows(columns: dict[str, np.ndarray], tolerance: float):
    """(inside, mismatch margin, exact, exact_evaluable) per row, for verify.

    Strict orientations count float32 underflow too: each is a difference of two
    products, each of which may underflow (2^-150 absolute each, plus the subtraction),
    and an orientation float32 evaluates exactly gets margin +inf.  The tolerant
    predicates keep their plain margins: the recastnavigation kernels reach them through
    other expressions, so exactness of the slacks says nothing about theirs.
    """
    names = ("ax", "ay", "bx", "by", "cx", "cy", "px", "py")
    result = triangle_exact(*(columns[name] for name in names), tolerance=tolerance)
    margins = result.margins.copy()
    evaluable = np.zeros(margins.shape, dtype=bool)
    if not tolerance:
        c = {name: columns[name].astype(np.float64) for name in names}
        for edge, (p, q) in enumerate(EDGES):
            scale = np.abs((c[q + "x"] - c[p + "x"]) * (c["py"] - c[p + "y"])) + np.abs(
                (c[q + "y"] - c[p + "y"]) * (c["px"] - c[p + "x"])
            )
            margins[:, edge] = exact.with_underflow(margins[:, edge], scale, 4 * UNDERFLOW_ERROR)
        evaluable = exactly_evaluable({name: columns[name] for name in names})
        violations = [result.signs <= 0, result.signs >= 0]
    else:
        violations = [(result.signs < 0) | np.isnan(margins)]
    margin, exact_rows = exact.exactness_margins(margins, evaluable, violations, result.nan_rows)
    return result.inside, margin, exact_rows, evaluable.all(axis=1)


# ---------------------------------------------------------------- Fraction reference


def _reference(row, tolerance):
    """(inside, the three constraint values, or None for a NaN row), from the definition.

    A constraint value is a Fraction, ±inf, or None where an undefined form arises in it;
    any undefined value makes the row outside.
    """
    values = [reference.extended(v) for v in row]
    if any(v is None for v in values):
        return False, None
    ax, ay, bx, by, cx, cy, px, py = values
    add, sub, mul, neg = reference.add, reference.sub, reference.mul, reference.neg
    eps = Fraction(exact_tolerance(tolerance))
    if eps == 0:
        o1 = sub(mul(sub(bx, ax), sub(py, ay)), mul(sub(by, ay), sub(px, ax)))
        o2 = sub(mul(sub(cx, bx), sub(py, by)), mul(sub(cy, by), sub(px, bx)))
        o3 = sub(mul(sub(ax, cx), sub(py, cy)), mul(sub(ay, cy), sub(px, cx)))
        orientations = (o1, o2, o3)
        if any(o is None for o in orientations):
            return False, orientations
        return all(o > 0 for o in orientations) or all(o < 0 for o in orientations), orientations
    v0x, v0y = sub(cx, ax), sub(cy, ay)
    v1x, v1y = sub(bx, ax), sub(by, ay)
    v2x, v2y = sub(px, ax), sub(py, ay)
    den = sub(mul(v0x, v1y), mul(v0y, v1x))
    u = sub(mul(v1y, v2x), mul(v1x, v2y))
    v = sub(mul(v0x, v2y), mul(v0y, v2x))
    if den is not None and den < 0:
        den, u, v = neg(den), neg(u), neg(v)
    slacks = (
        add(u, mul(eps, den)),
        add(v, mul(eps, den)),
        sub(sub(mul(1 + eps, den), u), v),
    )
    return all(g is not None and g >= 0 for g in slacks), slacks


def triangle_inside_fraction(row, tolerance: float = 0.0) -> bool:
    """One row (ax, ay, bx, by, cx, cy, px, py) of float32 values, done with Fractions."""
    return _reference(row, tolerance)[0]


def self_check_triangle(
    ax,
    ay,
    bx,
    by,
    cx,
    cy,
    px,
    py,
    *,
    rng: np.random.Generator,
    tolerance: float = 0.0,
    size: int = 256,
) -> None:
    """Re-derive a random sample of rows with Fractions; raise OracleSelfCheckError on disagreement.

    Each sampled row goes through both the filtered and the exact-only path; the outcomes
    and each margin's class (0, finite, +inf, NaN) must match the Fraction reference.
    """
    rows, sample = exact.sample_rows(exact.float32_columns((ax, ay, bx, by, cx, cy, px, py)), rng, size)
    results = {
        "filtered": _triangle(sample, tolerance),
        "exact": _triangle(sample, tolerance, use_filter=False),
    }
    for i, row in enumerate(zip(*sample)):
        inside, values = _reference(row, tolerance)
        values = (None, None, None) if values is None else values
        want = (
            inside,
            tuple(reference.sign_of(v) for v in values),
            tuple(reference.margin_kind(v, 0) for v in values),
        )
        for path, r in results.items():
            got = (
                bool(r.inside[i]),
                tuple(int(s) for s in r.signs[i]),
                tuple(exact.margin_class(m) for m in r.margins[i]),
            )
            if got != want:
                raise exact.self_check_failure("triangle", rows[i], row, path, got, want)
    filtered, exact_only = results.values()
    exact.check_margins_agree("triangle", rows, filtered.margins, exact_only.margins)
