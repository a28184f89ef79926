"""Exact arithmetic shared by every family's oracle.

Every finite float32 is m·2^e exactly, so a float32 predicate is a question about the
signs of polynomials ("constraints") in exact inputs.  A vectorised float64 filter
with a rigorous error bound settles rows far from every boundary; the others are redone
in exact integer arithmetic on the inputs scaled by 2^149.  A family supplies its
constraints (see `evaluate_constraints`); this module supplies the filter, the exact
fallback, the extended-real treatment of infinities, margins and the self-check
plumbing.  The independent Fraction reference the self-check compares against is
`reference.py`, which shares nothing with this module.

Non-finite inputs.  A row with a NaN is outside (every constraint false, margins NaN).
Infinities get extended-real semantics, as float32 kernels do: each constraint is the
same predicate evaluated exactly over the extended reals, and it is false wherever an
undefined form (∞ − ∞, 0·∞) arises in it.  Constraints with no infinite term are
decided exactly as for finite rows.  A constraint decided by an infinite term has
margin +inf (no rounding is near it); an undefined one has margin NaN, and a row with
an undefined step is outside.

Margins say how many float32 roundings a row is from a constraint's boundary:
margin = |g| / (2^-24·G), with g the constraint's slack and G the sum of the absolute
values of the terms that make up g.  It is 0 exactly on the boundary.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import SectorbenchError

#: Every finite float32 is an integer multiple of 2^-149.
SCALE_BITS = 149
ONE_ROUNDING = 2.0**24
SMALLEST_POSITIVE = math.ulp(0.0)
SMALLEST_NORMAL32 = 2.0**-126
#: Absolute error of one float32 product that underflows (gradual underflow: half the
#: smallest subnormal).  Sums and differences of subnormals are exact.
UNDERFLOW_ERROR = 2.0**-150

# Filter error bound.  Each slack g is a signed sum of products of exact input
# differences (such as (px − cx)·ux), and G is the sum of those products' absolute
# values.  In float64 every difference, product, sqrt and sum is rounded once with
# relative error ≤ u = 2^-53, and no path through the families' expressions has more
# than 7 roundings (sqrt halves the error of its argument), so |g_float − g| ≤ γ7·G
# with γ7 = 7u/(1 − 7u) < 2^-50 (Higham, Accuracy and Stability, §3.1; Shewchuk-style).
# That model needs every rounding to be relative, i.e. no overflow or underflow.
# Float32 magnitudes lie in [2^-149, 2^128], so nonzero products of two lie in
# [2^-298, 2^258], a nonzero difference of such float64 values is a multiple of
# 2^-350, and every nonzero intermediate here lies in [2^-499, 2^390]: inside
# float64's normal range, float32 denormals included.  (Infinite inputs are replaced
# by 0 before this path, see evaluate_constraints.)  A row is trusted only if
# |g_float| > 2^-28·G_float for every constraint, ~2^22 times the bound: its signs are
# then certain and its margins accurate to ~2^-22 relative.  Everything else goes to
# the exact path.  A family whose expressions need more than 7 roundings or a degree
# above 4 must say so and use a smaller TRUST.
TRUST = 2.0**-28

# Extended-real path.  A constraint with an infinite input in it is decided by its
# infinite terms alone: a finite value never beats ±∞ in a comparison, and it only
# matters whether it is zero (0·∞ is undefined) or, when it multiplies ±∞, its sign.
# The same float64 expressions as above, evaluated in IEEE arithmetic on the raw
# inputs, get exactly that right: differences and products of float32 values keep
# their sign and zero-ness in float64 (no overflow or underflow, see above; x − y is 0
# only if x = y), IEEE ±∞ arithmetic is the extended reals', and IEEE gives NaN exactly
# for the undefined forms ∞ − ∞ and 0·∞, after which NaN propagates and compares false.


class OracleSelfCheckError(RuntimeError):
    """An oracle's fast path disagreed with its plain Fraction re-derivation."""


def check_fp_environment() -> None:
    """Raise RuntimeError if flush-to-zero or denormals-are-zero is active here."""
    smallest, smallest_normal = float("5e-324"), float("2.2250738585072014e-308")
    # 2^-149 by its bits: the literal 1e-45 rounds to 0 under round-down or toward zero
    float32_denormal = np.array([1], dtype=np.uint32).view(np.float32)
    daz = smallest + 0.0 == 0.0 or float32_denormal.astype(np.float64)[0] == 0.0
    ftz = smallest_normal / 2.0 == 0.0 or (np.array([smallest_normal]) / 2.0)[0] == 0.0
    if daz or ftz:
        modes = " and ".join(mode for mode, on in (("denormals-are-zero", daz), ("flush-to-zero", ftz)) if on)
        raise RuntimeError(
            f"{modes} is active in this process (often set by a library built with "
            "-ffast-math); the oracle needs IEEE gradual underflow to decode float32 "
            "denormals and to keep its float64 error bounds valid"
        )


def has_special_input(*arrays) -> np.ndarray:
    """Rows with any NaN, ±inf, float32 subnormal (0 < |x| < 2^-126) or −0.0 input."""
    if not arrays:
        raise ValueError("has_special_input needs at least one array")
    columns = float32_columns(arrays)
    special = np.zeros(len(columns[0]), dtype=bool)
    for column in columns:
        x = column.astype(np.float64)
        zero = x == 0
        special |= ~np.isfinite(x) | (~zero & (np.abs(x) < SMALLEST_NORMAL32))
        special |= zero & np.signbit(x)
    return special


# ---------------------------------------------------------------- evaluation core


def float32_columns(arrays) -> list[np.ndarray]:
    """The arrays as a list of equally long 1-D float32 columns, or TypeError/ValueError."""
    columns = [np.asarray(a) for a in arrays]
    for c in columns:
        if c.dtype != np.float32 or c.ndim != 1:
            raise TypeError(f"oracle inputs must be 1-D float32 arrays, got {c.dtype} of shape {c.shape}")
    if len({len(c) for c in columns}) > 1:
        raise ValueError("oracle inputs must all have the same length")
    return columns


def scaled_ints(x: np.ndarray) -> np.ndarray:
    """Finite float32 values as exact Python ints x·2^149 (object array)."""
    # float64 holds every float32, and scaling by a power of two cannot round.
    values = x.astype(np.float64).tolist()
    return np.array([int(v * 2.0**SCALE_BITS) for v in values], dtype=object)


def sign(x: np.ndarray) -> np.ndarray:
    """-1, 0 or 1 as int8; 0 for NaN."""
    return (x > 0).astype(np.int8) - (x < 0).astype(np.int8)


def ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num/den as float64 for nonnegative exact ints; 0/0 is 0."""
    # Int true division is correctly rounded; a nonzero margin must never round to 0.0,
    # since 0 means "exactly on the boundary".
    flat = [max(n / d, SMALLEST_POSITIVE) if n else 0.0 for n, d in zip(num.ravel(), den.ravel())]
    return np.array(flat, dtype=np.float64).reshape(num.shape)


def exact_signs_margins(g: np.ndarray, G: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Signs and margins (in float32 roundings) of exact-int slacks g with scales G."""
    return sign(g), ratio(np.abs(g) * 2**24, G)


def evaluate_constraints(columns, float_terms, exact_terms, extended_terms, use_filter=True):
    """NaN-row mask, and the (rows, K) signs and margins of a family's constraint slacks.

    float_terms maps float64 columns to (g, G) arrays of shape (rows, K); exact_terms
    maps exact-int columns to (signs, margins); extended_terms maps the raw float64
    columns of rows with an infinity to (signs, involved): the constraints'
    extended-real signs (0 if undefined) and which constraints have an infinite term.
    NaN rows get sign 0 and margin NaN; an involved constraint gets margin +inf, or NaN
    if undefined.
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
    sure = np.all(np.abs(g) > TRUST * G, axis=1) if use_filter else np.zeros(len(rows), dtype=bool)
    signs = np.zeros((len(nan_rows), g.shape[1]), dtype=np.int8)
    margins = np.full(signs.shape, np.nan)
    easy, hard = rows[sure], rows[~sure]
    signs[easy] = np.sign(g[sure])
    margins[easy] = np.abs(g[sure]) / G[sure] * ONE_ROUNDING
    if len(hard):
        signs[hard], margins[hard] = exact_terms(*(scaled_ints(c[hard]) for c in columns_0))
    if len(inf_rows):
        with np.errstate(invalid="ignore"):
            ext_signs, involved = extended_terms(*(c[inf_rows].astype(np.float64) for c in columns))
        row_signs, row_margins = signs[inf_rows], margins[inf_rows]
        row_signs[involved] = ext_signs[involved]
        row_margins[involved] = np.where(ext_signs[involved] == 0, np.nan, np.inf)
        signs[inf_rows], margins[inf_rows] = row_signs, row_margins
    return nan_rows, signs, margins


def evaluate_polynomials(columns, terms, use_filter=True):
    """evaluate_constraints for constraints given by one function of the inputs.

    `terms(*columns)` returns the slacks g and scales G, shape (rows, K), and must work
    on float64 arrays and on object arrays of Python ints alike (only +, −, ·, abs);
    each constraint must be homogeneous in the inputs (every term of the same degree),
    so that scaling the inputs by 2^149 scales g and G alike.  Its IEEE evaluation on
    raw inputs gives the extended-real outcome (see the module doc).
    """

    check_homogeneous(columns, terms)

    def exact_terms(*ints):
        return exact_signs_margins(*terms(*ints))

    def extended_terms(*raw):
        g, G = terms(*raw)
        return sign(g), ~np.isfinite(G)

    return evaluate_constraints(columns, terms, exact_terms, extended_terms, use_filter)


#: Rows check_homogeneous evaluates a family's constraints on (twice: as given and doubled).
HOMOGENEITY_SAMPLE = 64


def check_homogeneous(columns, terms) -> None:
    """Raise SectorbenchError if a constraint of `terms` is not homogeneous on a sample of rows.

    The exact fallback scales every input by 2^149, which scales a constraint of degree d by
    2^(149 d) only if each of its terms has degree d; otherwise the fallback's signs are wrong
    with no error (a circle written r2 - dx*dx - dy*dy, r2 an input, had a point inside called
    outside).  Doubling every input is exact in float64 (no overflow or underflow, see above),
    so a homogeneous g and G of degree d come back multiplied by exactly 2^d, the same d on
    every row; anything else has terms of mixed degrees.
    """
    finite = np.flatnonzero(np.logical_and.reduce([np.isfinite(c) for c in columns]))
    if not len(finite):
        return
    rows = finite[np.linspace(0, len(finite) - 1, min(HOMOGENEITY_SAMPLE, len(finite))).astype(int)]
    sample = [c[rows].astype(np.float64) for c in columns]
    with np.errstate(all="ignore"):
        g, G = terms(*sample)
        g2, G2 = terms(*(2 * c for c in sample))
        for k in range(G.shape[1]):
            scaled = G[:, k] > 0  # (a constraint 0 on every sampled row says nothing)
            ratios = set((G2[scaled, k] / G[scaled, k]).tolist())
            if not ratios:
                continue
            power = next(iter(ratios)) if len(ratios) == 1 else None
            if power is None or math.frexp(power)[0] != 0.5 or np.any(g2[scaled, k] != power * g[scaled, k]):
                name = getattr(terms, "__qualname__", repr(terms))
                raise SectorbenchError(
                    f"the oracle's constraint {k} of {name} is not homogeneous (its terms are of different "
                    "degrees in the inputs), so its exact evaluation is wrong: write each term with the same "
                    "degree, e.g. take r and use r*r, not an input r2 (docs/extending.md)"
                )


def mismatch_margin(margins: np.ndarray, violations: list[np.ndarray], nan_rows=None) -> np.ndarray:
    """Smallest margin that explains a kernel disagreeing with the exact answer.

    violations: one (rows, K) mask per way of being inside, marking the constraints a
    row breaks for it.  Inside rows: misjudging any one constraint suffices.  Outside
    rows: the kernel must have misjudged every broken constraint of some way of being
    inside.  A NaN margin (undefined form) counts as +inf: a wrong answer there is not
    rounding.  Rows marked in nan_rows (a NaN input) get NaN.
    """
    margins = np.where(np.isnan(margins), np.inf, margins)
    inside = np.logical_or.reduce([~v.any(axis=1) for v in violations])
    needed = np.minimum.reduce([np.max(np.where(v, margins, -np.inf), axis=1) for v in violations])
    result = np.where(inside, margins.min(axis=1), needed)
    if nan_rows is not None:
        result = np.where(np.asarray(nan_rows, dtype=bool), np.nan, result)
    return result


def with_underflow(margins: np.ndarray, scales: np.ndarray, absolute: np.ndarray) -> np.ndarray:
    """Margins |g| / (2^-24 G + E): rounding measured with underflow's absolute error E too.

    The plain margin |g| / (2^-24 G) assumes every rounding is relative, which fails
    once a product underflows (e.g. a subnormal D squared is 0 in float32).
    """
    relative = scales * 2.0**-24
    with np.errstate(invalid="ignore", divide="ignore"):
        factor = np.where(np.isfinite(relative) & (relative > 0), relative / (relative + absolute), 1.0)
    return margins * factor


# ---------------------------------------------------------------- self-check plumbing


def sample_rows(columns, rng: np.random.Generator, size: int):
    """Sorted row indices of a random sample, and the sampled columns."""
    rows = np.sort(rng.choice(len(columns[0]), size=min(size, len(columns[0])), replace=False))
    return rows, [c[rows] for c in columns]


def self_check_failure(family, row_index, row, path, got, want) -> OracleSelfCheckError:
    values = [float(v) for v in row]
    return OracleSelfCheckError(f"{family} row {row_index} {values}: {path} path gives {got}, Fractions give {want}")


def margin_class(margin) -> str:
    """The class of a margin, as reference.margin_kind names it."""
    if math.isnan(margin):
        return "undefined"
    if math.isinf(margin):
        return "infinite"
    return "zero" if margin == 0 else "finite"


def check_margins_agree(family, rows, filtered, exact) -> None:
    close = np.isclose(filtered, exact, rtol=1e-6, atol=0.0, equal_nan=True)
    if not close.all():
        i = np.flatnonzero(~close.reshape(len(rows), -1).all(axis=1))[0]
        raise OracleSelfCheckError(f"{family} row {rows[i]}: filtered margins {filtered[i]} vs exact {exact[i]}")


# ---------------------------------------------------------------- exact-evaluable rows
#
# A row whose float32 evaluation rounds nowhere cannot be answered wrongly by rounding:
# any kernel that evaluates the predicate's expression in float32 gets it exactly
# right, so any mismatch there is a logic bug.  These helpers follow a float32
# computation in float64 and say, per row, whether each step was exact: its exact result
# is a float32 that is zero or normal (a subnormal result would be flushed by -ffast-math
# builds, so it does not count as exact).  Operands are always float32 values (each step
# is checked before the next uses it), so a float64 product of two is exact (24 + 24 bits)
# and TwoSum gives a float64 sum's exact rounding error.


def float32_exact(x: np.ndarray) -> np.ndarray:
    """Rows where float64 x is a float32 value that is zero or normal."""
    with np.errstate(all="ignore"):
        same = x.astype(np.float32).astype(np.float64) == x
        return np.isfinite(x) & same & ((x == 0) | (np.abs(x) >= SMALLEST_NORMAL32))


def exact_add(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """a + b, and the rows where float32 would compute it without rounding."""
    with np.errstate(all="ignore"):
        s = a + b
        bb = s - a
        error = (a - (s - bb)) + (b - bb)  # TwoSum (Knuth): the exact rounding error of s
    return s, (error == 0) & float32_exact(s)


def exact_sub(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return exact_add(a, -b)


def exact_mul(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(all="ignore"):
        p = a * b
    return p, float32_exact(p)


def exact_sqrt(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(all="ignore"):
        root = np.sqrt(a)
        return root, float32_exact(root) & (root * root == a)


def exactness_margins(margins: np.ndarray, exact: np.ndarray, violations: list[np.ndarray], nan_rows) -> tuple:
    """(mismatch margin, rows where rounding cannot explain a mismatch), exact constraints counted.

    margins, exact: (rows, K) per-constraint margins and exact-evaluability; a constraint
    evaluated exactly cannot be misjudged by rounding, so its margin becomes +inf.
    violations: as for mismatch_margin.  A row is "exact" when its mismatch margin is
    +inf only because of such constraints (not because of an infinite input, which the
    special-value class covers).
    """
    plain = mismatch_margin(margins, violations, nan_rows)
    counted = mismatch_margin(np.where(exact, np.inf, margins), violations, nan_rows)
    nan_rows = np.zeros(len(plain), dtype=bool) if nan_rows is None else np.asarray(nan_rows, dtype=bool)
    return counted, np.isinf(counted) & ~np.isinf(plain) & ~nan_rows
