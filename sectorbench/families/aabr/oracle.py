"""The aabr family's exact oracle.

The rotation is input, not under test: the oracle rotates with the float32 (c, s) the
kernel is given.  c*x, s*y, s*x, c*y are products of two float32 values (24-bit
significands, exponents >= -149): exact in float64 (48 bits, >= 2^-298, no underflow or
overflow).  X = c*x - s*y is then one float64 subtraction, and TwoSum gives its exact
error: X = hi + lo exactly, hi = fl64(X).  Round-to-nearest is monotone, so X_i < X_j
exactly iff (hi_i, lo_i) < (hi_j, lo_j) lexicographically: maxima, minima and ties are
exact.  A second, independent derivation with Fractions checks a sample (self_check).

Tie rule: the AABR is the same whichever tied vertex is reported, so any exact extreme
is right; the oracle's own answer is the lowest index among the exact extremes (the
scans' rule).  A wrong answer's margin is the angle error (in units of 2^-24 rad) that
would have made it right: (X_best - X_j) / (2^-24 (|v_best| + |v_j|)) — if j is extreme
for a direction at angle delta from the true one, X_best - X_j <= delta |v_best - v_j|.
It covers float32 projections compared (about 1-2 units) and lookups keyed on a float32
angle (record keys are within 2^-22 rad, 4 units, of the true event; see the
prototype's REPORT.md, section 4), so one bound (the family's, 8) judges every kernel.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ...oracle.exact import OracleSelfCheckError

SIDES = ("maxX", "maxY", "minX", "minY")
#: Rows x vertices evaluated at once (memory: about 15 float64 arrays of this size).
CHUNK = 1 << 20


def two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def rotated(x, y, c, s):
    """Exact rotated coordinates as (hi, lo) pairs: x, y (n,), c, s (q,) -> (q, n)."""
    x, y = x.astype(np.float64)[None, :], y.astype(np.float64)[None, :]
    c, s = c.astype(np.float64)[:, None], s.astype(np.float64)[:, None]
    return two_sum(c * x, -(s * y)), two_sum(s * x, c * y)


def extreme_sets(hi, lo, sign):
    """Per row, the mask of exact maxima (sign +1) or minima (sign -1)."""
    high, low = sign * hi, sign * lo
    on = high == high.max(axis=1, keepdims=True)
    best_low = np.where(on, low, -np.inf).max(axis=1, keepdims=True)
    return on & (low == best_low)


def judge_polygon(x, y, c, s, answer=None):
    """For one polygon at q rotations: the oracle's answer (q, 4) (lowest exact extreme),
    and, given the kernel's answers (q, 4), mismatch (q,) and margin (q,) (max over sides)."""
    (xh, xl), (yh, yl) = rotated(x, y, c, s)
    n, q = len(x), len(c)
    norm = np.hypot(x.astype(np.float64), y.astype(np.float64))
    rows = np.arange(q)
    oracle = np.zeros((q, 4), dtype=np.int64)
    mismatch, margin = np.zeros(q, dtype=bool), np.zeros(q)
    for k, (hi, lo, sign) in enumerate(((xh, xl, 1), (yh, yl, 1), (xh, xl, -1), (yh, yl, -1))):
        exact = extreme_sets(hi, lo, sign)
        best = exact.argmax(axis=1)
        oracle[:, k] = best
        if answer is None:
            continue
        j = answer[:, k].astype(np.int64)
        invalid = (j < 0) | (j >= n)
        j = np.where(invalid, 0, j)
        wrong = ~exact[rows, j] | invalid
        gap = sign * ((hi[rows, best] - hi[rows, j]) + (lo[rows, best] - lo[rows, j]))
        side = np.where(wrong, gap / (2.0**-24 * (norm[best] + norm[j]) + 1e-300), 0.0)
        side[invalid] = np.inf
        mismatch |= wrong
        margin = np.maximum(margin, side)
    return oracle, mismatch, margin


def judge_rows(polygons, poly, c, s, answer=None):
    """judge_polygon over rows that each name their polygon (poly: index per row)."""
    rows = len(poly)
    oracle = np.zeros((rows, 4), dtype=np.int64)
    mismatch, margin = np.zeros(rows, dtype=bool), np.zeros(rows)
    index = poly.astype(np.int64)
    for p in np.unique(index):
        mine = np.flatnonzero(index == p)
        x, y = polygons[p]
        step = max(1, CHUNK // max(len(x), 1))
        for start in range(0, len(mine), step):
            part = mine[start : start + step]
            got = None if answer is None else answer[part]
            oracle[part], mismatch[part], margin[part] = judge_polygon(x, y, c[part], s[part], got)
    return oracle, mismatch, margin


def fraction_extremes(x, y, c, s) -> list[tuple[frozenset, ...]]:
    """The exact extreme sets with Fractions only, per rotation (the independent check)."""
    xs, ys = [Fraction(float(v)) for v in x], [Fraction(float(v)) for v in y]
    out = []
    for cc, ss in zip(c, s):
        cc, ss = Fraction(float(cc)), Fraction(float(ss))
        X = [cc * a - ss * b for a, b in zip(xs, ys)]
        Y = [ss * a + cc * b for a, b in zip(xs, ys)]
        out.append(
            tuple(
                frozenset(i for i, v in enumerate(V) if v == f(V)) for V, f in ((X, max), (Y, max), (X, min), (Y, min))
            )
        )
    return out


def self_check(polygons, poly, c, s, rng, size: int, max_vertices: int = 1024) -> None:
    """The double-double oracle's extreme sets against Fractions on a sample of rows
    (at most max_vertices vertices in all, so large polygons stay affordable)."""
    if len(poly) == 0:
        return
    picked, budget = [], max_vertices
    for i in rng.permutation(len(poly))[:size]:
        n = len(polygons[int(poly[i])][0])
        if n <= budget:
            picked.append(int(i))
            budget -= n
    for i in picked:
        x, y = polygons[int(poly[i])]
        (xh, xl), (yh, yl) = rotated(x, y, c[i : i + 1], s[i : i + 1])
        fast = [
            frozenset(np.flatnonzero(extreme_sets(hi, lo, sign)[0]).tolist())
            for hi, lo, sign in ((xh, xl, 1), (yh, yl, 1), (xh, xl, -1), (yh, yl, -1))
        ]
        slow = fraction_extremes(x, y, c[i : i + 1], s[i : i + 1])[0]
        for side, a, b in zip(SIDES, fast, slow):
            if a != b:
                raise OracleSelfCheckError(f"aabr row {i} {side}: double-double {sorted(a)} != Fraction {sorted(b)}")
