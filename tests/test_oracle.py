import time
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from conftest import needs_gcc

from sectorbench.families.sector import oracle as sector_oracle
from sectorbench.families.sector.oracle import (
    sector_constraints,
    sector_exact,
    sector_inside,
    sector_inside_fraction,
    sector_margins,
    sector_mismatch_margin,
    self_check_sector,
)
from sectorbench.families.triangle import oracle as triangle_oracle
from sectorbench.families.triangle.oracle import (
    self_check_triangle,
    triangle_exact,
    triangle_inside,
    triangle_inside_fraction,
    triangle_margins,
    triangle_mismatch_margin,
)
from sectorbench.oracle.exact import OracleSelfCheckError, check_fp_environment, has_special_input

F32 = np.float32
NAN, INF = float("nan"), float("inf")


def columns(rows):
    """float32 columns from a list of row tuples."""
    return [np.array(c, dtype=F32) for c in zip(*rows)]


def steps(x, n):
    """float32 x moved n representable values up (n > 0) or down."""
    x = F32(x)
    target = F32(np.inf) if n > 0 else F32(-np.inf)
    for _ in range(abs(n)):
        x = np.nextafter(x, target)
    return x


def ulp_grid(x, y, half=32):
    """All (x', y') within `half` float32 steps of (x, y): a Kettner-style grid."""
    xs = [steps(x, i) for i in range(-half, half)]
    ys = [steps(y, j) for j in range(-half, half)]
    return [(gx, gy) for gx in xs for gy in ys]


def assert_sector_matches_fractions(cols):
    np.testing.assert_array_equal(sector_inside(*cols), [sector_inside_fraction(row) for row in zip(*cols)])
    self_check_sector(*cols, rng=np.random.default_rng(0), size=len(cols[0]))


def assert_triangle_matches_fractions(cols, tolerance=0.0):
    np.testing.assert_array_equal(
        triangle_inside(*cols, tolerance=tolerance),
        [triangle_inside_fraction(row, tolerance) for row in zip(*cols)],
    )
    self_check_triangle(*cols, rng=np.random.default_rng(0), tolerance=tolerance, size=len(cols[0]))


def random_bits(rng, n):
    return rng.integers(0, 2**32, size=n, dtype=np.uint32).view(F32)


def random_magnitudes(rng, n):
    """Random signs, mantissas and exponents over the whole float32 range, denormals included."""
    mantissa = rng.uniform(0.5, 1.0, n)
    exponent = rng.integers(-150, 129, n)
    with np.errstate(over="ignore"):
        return (rng.choice([-1.0, 1.0], n) * np.ldexp(mantissa, exponent)).astype(F32)


# ---------------------------------------------------------------- environment


@needs_gcc
def test_fp_environment_check_detects_a_fast_math_library():
    """Clean here; a process that loaded a gcc -ffast-math library (FTZ/DAZ on) is refused."""
    import subprocess
    import sys

    from sectorbench.native.build import BuildConfig, build

    check_fp_environment()  # this process never loads a fast-math build
    library = build(BuildConfig.parse("-O2 -ffast-math", cc="gcc"))  # FTZ/DAZ at load: gcc's crtfastmath
    script = (
        "import ctypes, sys\n"
        "from sectorbench.oracle.exact import check_fp_environment\n"
        f"ctypes.CDLL({str(library)!r})\n"
        "try:\n    check_fp_environment()\nexcept RuntimeError as exc:\n    print(exc); sys.exit(3)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "flush-to-zero" in result.stdout and "denormals-are-zero" in result.stdout


def test_inputs_must_be_float32():
    with pytest.raises(TypeError):
        sector_inside(*[np.zeros(2)] * 8)
    with pytest.raises(ValueError):
        sector_inside(*[np.zeros(2, F32)] * 7, np.zeros(3, F32))


def test_empty_input():
    assert sector_inside(*[np.zeros(0, F32)] * 8).shape == (0,)
    assert triangle_margins(*[np.zeros(0, F32)] * 8, tolerance=1e-4).shape == (0, 3)


# ---------------------------------------------------------------- sector, hand-built


U = (0.6, 0.8)


def test_point_on_arc_is_outside_with_zero_radius_margin():
    cols = columns([(0, 0, *U, 25, 0.5, 3, 4)])
    assert not sector_inside(*cols)[0]
    radius_margin, angle_margin = sector_margins(*cols)
    assert radius_margin[0] == 0 and angle_margin[0] > 1e6


def test_point_just_inside_arc():
    below_four = steps(4, -1)
    assert below_four == F32(3.99999976)
    cols = columns([(0, 0, *U, 25, 0.5, 3, below_four)])
    assert sector_inside(*cols)[0]
    # g = 25 − (9 + (4 − 2^-22)²) = 2^-19 − 2^-44, G = 25 + s
    s = 9 + (4 - Fraction(1, 2**22)) ** 2
    want = float((25 - s) / (25 + s) * 2**24)
    assert sector_margins(*cols)[0][0] == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("zero", [0.0, -0.0])
def test_apex_is_outside_even_for_reflex_angles(zero):
    rows = [(zero, -zero, 1, 0, 1, -0.5, -zero, zero), (0, 0, 1, 0, 1, -1, zero, zero)]
    cols = columns(rows)
    assert not sector_inside(*cols).any()
    radius_ok, angle_ok = sector_constraints(*cols)
    assert radius_ok.all() and not angle_ok.any()
    assert (sector_margins(*cols)[1] == 0).all()


@pytest.mark.parametrize("k", [0.0, -0.0])
def test_perpendicular_edge_of_half_plane(k):
    tiny = F32(1e-45)
    cols = columns([(0, 0, 1, 0, 100, k, x, 3) for x in (0, tiny, -tiny)])
    np.testing.assert_array_equal(sector_inside(*cols), [False, True, False])
    assert sector_margins(*cols)[1][0] == 0


def test_straight_along_u_is_inside():
    cols = columns([(1, 2, 1, 0, 100, k, 5, 2) for k in (0.5, steps(1, -1), 1)])
    # cos_theta = 1 makes the cone a ray, which is all boundary
    np.testing.assert_array_equal(sector_inside(*cols), [True, True, False])


def test_u_is_not_renormalised():
    # |u| = 1.25: a = 1.25·3 = 3.75 = |p|·0.75 puts p = (3, 4) exactly on the edge
    cols = columns([(0, 0, 1.25, 0, 30, 0.75, 3, 4), (0, 0, 1.25, 0, 30, steps(0.75, -1), 3, 4)])
    np.testing.assert_array_equal(sector_inside(*cols), [False, True])
    assert sector_margins(*cols)[1][0] == 0


@pytest.mark.parametrize("position", range(8))
def test_nan_rows_are_outside(position):
    row = [0, 0, 1, 0, 100, 0, 3, 0]
    row[position] = NAN
    cols = columns([row, (0, 0, 1, 0, 100, 0, 3, 0)])
    result = sector_exact(*cols)
    np.testing.assert_array_equal(result.inside, [False, True])
    assert np.isnan(result.radius_margin[0]) and np.isnan(result.angle_margin[0])
    assert np.isnan(result.mismatch_margin[0])
    assert not sector_inside_fraction(row)


def margin_kind(m):
    return "nan" if np.isnan(m) else "inf" if np.isinf(m) else "fin"


# Base row (c = 0, u = (1, 0), r2 = 100, cos_theta = 0, p = (3, 0)) with one slot set to
# ±inf: (slot, value, radius_ok, angle_ok, radius margin, angle margin), worked by hand.
# s = 9, a = dx·ux + dy·uy = 3 + 0·0, sqrt(s)·k = 3·0.
INF_SECTOR_CASES = [
    (0, INF, False, False, "inf", "nan"),  # dx = −∞: s = ∞; sqrt(∞)·0 undefined
    (0, -INF, False, False, "inf", "nan"),
    (1, INF, False, False, "inf", "nan"),  # dy = −∞: s = ∞; dy·uy = ∞·0 undefined
    (1, -INF, False, False, "inf", "nan"),
    (2, INF, True, True, "fin", "inf"),  # a = 3·∞ = ∞ > 0
    (2, -INF, True, False, "fin", "inf"),  # a = −∞
    (3, INF, True, False, "fin", "nan"),  # dy·uy = 0·∞ undefined
    (3, -INF, True, False, "fin", "nan"),
    (4, INF, True, True, "inf", "fin"),  # 9 < ∞
    (4, -INF, False, True, "inf", "fin"),
    (5, INF, True, False, "fin", "inf"),  # 3 > 3·∞ is false
    (5, -INF, True, True, "fin", "inf"),  # 3 > −∞
    (6, INF, False, False, "inf", "nan"),  # dx = ∞: s = ∞, sqrt(∞)·0 undefined
    (6, -INF, False, False, "inf", "nan"),
    (7, INF, False, False, "inf", "nan"),  # dy = ∞: dy·uy = ∞·0 undefined
    (7, -INF, False, False, "inf", "nan"),
]


@pytest.mark.parametrize("position, bad, radius_ok, angle_ok, radius_kind, angle_kind", INF_SECTOR_CASES)
def test_infinite_slots_follow_extended_reals(position, bad, radius_ok, angle_ok, radius_kind, angle_kind):
    row = [0, 0, 1, 0, 100, 0, 3, 0]
    row[position] = bad
    cols = columns([row, (0, 0, 1, 0, 100, 0, 3, 0)])
    result = sector_exact(*cols)
    assert (result.radius_ok[0], result.angle_ok[0]) == (radius_ok, angle_ok)
    assert margin_kind(result.radius_margin[0]) == radius_kind
    assert margin_kind(result.angle_margin[0]) == angle_kind
    np.testing.assert_array_equal(result.inside, [radius_ok and angle_ok, True])
    assert sector_inside_fraction(row) == (radius_ok and angle_ok)
    assert_sector_matches_fractions(cols)
    # an infinite decision or an undefined form is never a rounding error
    if not (radius_ok and angle_ok):
        assert result.mismatch_margin[0] == INF


# (cx, cy, ux, uy, r2, cos_theta, px, py), inside, radius margin, angle margin
SECTOR_HAND_CASES = {
    # dx = 3, dy = 4, a = 5 > 5·0.5: inside the angle
    "r2=+inf": ((1, 2, *U, INF, 0.5, 4, 6), True, "inf", "fin"),
    "r2=-inf": ((1, 2, *U, -INF, 0.5, 4, 6), False, "inf", "fin"),
    "u=+inf,dx>0": ((0, 0, INF, 0, 100, 0.5, 3, 1), True, "fin", "inf"),
    "u=+inf,dx<0": ((0, 0, INF, 0, 100, 0.5, -3, 1), False, "fin", "inf"),
    "u=+inf,dx=0": ((0, 0, INF, 0, 100, 0.5, 0, 3), False, "fin", "nan"),  # 0·∞
    "u=+inf,dx=-0": ((0, 0, INF, 0, 100, -0.5, -0.0, 3), False, "fin", "nan"),
    "u=-inf,dx<0": ((0, 0, -INF, 0, 100, 0.5, -3, 1), True, "fin", "inf"),
    "u=(inf,inf)": ((0, 0, INF, INF, 100, 0.5, 3, 1), True, "fin", "inf"),
    "u=(inf,-inf)": ((0, 0, INF, -INF, 100, 0.5, 3, 1), False, "fin", "nan"),  # ∞ − ∞
    "k=-inf": ((0, 0, 1, 0, 100, -INF, -3, 0), True, "fin", "inf"),  # −3 > −∞
    "k=-inf,apex": ((1, 1, 1, 0, 100, -INF, 1, 1), False, "fin", "nan"),  # sqrt(0)·∞
    "k=+inf": ((0, 0, 1, 0, 100, INF, 3, 0), False, "fin", "inf"),
    "k=+inf,u=+inf": ((0, 0, INF, 0, 100, INF, 3, 0), False, "fin", "inf"),  # ∞ > ∞ false
    "k=-inf,u=+inf": ((0, 0, INF, 0, 100, -INF, 3, 0), True, "fin", "inf"),
    "k=-inf,u=-inf": ((0, 0, -INF, 0, 100, -INF, 3, 0), False, "fin", "inf"),  # −∞ > −∞
    "r2=+inf,k=-inf": ((0, 0, 1, 0, INF, -INF, 3, 0), True, "inf", "inf"),
}


@pytest.mark.parametrize("case", SECTOR_HAND_CASES.values(), ids=SECTOR_HAND_CASES.keys())
def test_sector_infinity_hand_cases(case):
    row, inside, radius_kind, angle_kind = case
    cols = columns([row])
    result = sector_exact(*cols)
    assert result.inside[0] == inside
    assert sector_inside_fraction([c[0] for c in cols]) == inside
    assert margin_kind(result.radius_margin[0]) == radius_kind
    assert margin_kind(result.angle_margin[0]) == angle_kind
    self_check_sector(*cols, rng=np.random.default_rng(0))


def test_finite_constraint_of_an_infinite_row_keeps_its_exact_margin():
    rows = [
        (1, 2, *U, INF, 0.5, 4, 6),
        (1, 2, *U, 100, 0.5, 4, 6),
        (0, 0, INF, 0, 25, 0.5, 3, 4),
        (0, 0, 1, 0, 25, 0.5, 3, 4),
    ]
    radius_margin, angle_margin = sector_margins(*columns(rows))
    assert angle_margin[0] == angle_margin[1] and np.isfinite(angle_margin[0])
    assert radius_margin[2] == radius_margin[3] == 0  # p on the arc; u = (∞, 0) is irrelevant


@pytest.mark.parametrize("slot", [0, 1, 6, 7])
@pytest.mark.parametrize("bad", [INF, -INF])
@pytest.mark.parametrize(
    "base",
    [(0, 0, 1, 0, 100, 0, 3, 0), (0, 0, 1, 0, INF, -INF, 3, 0), (5, 5, INF, INF, INF, -1, 6, 6)],
    ids=["plain", "everything-passes", "infinite-u"],
)
def test_infinite_p_or_c_is_outside(slot, bad, base):
    row = list(base)
    assert sector_inside(*columns([row]))[0]
    row[slot] = bad
    result = sector_exact(*columns([row]))
    assert not result.inside[0] and not result.radius_ok[0]
    assert not sector_inside_fraction(row)
    assert result.mismatch_margin[0] == INF
    self_check_sector(*columns([row]), rng=np.random.default_rng(0))


def test_mismatch_margin_treats_undefined_as_infinite():
    radius_ok, angle_ok = np.array([False, False, False]), np.array([False, False, True])
    radius_margin, angle_margin = np.array([NAN, 2.0, NAN]), np.array([NAN, NAN, 3.0])
    got = sector_mismatch_margin(radius_ok, angle_ok, radius_margin, angle_margin)
    np.testing.assert_array_equal(got, [INF, INF, INF])
    got = sector_mismatch_margin(radius_ok, angle_ok, radius_margin, angle_margin, nan_rows=[True, False, False])
    np.testing.assert_array_equal(got, [NAN, INF, INF])
    # tolerant triangles: an undefined constraint (sign 0, margin NaN) is broken
    signs, margins = np.array([[1, 1, 0]]), np.array([[1.0, 2.0, NAN]])
    assert triangle_mismatch_margin(signs, margins, 1e-4)[0] == INF
    assert triangle_mismatch_margin(signs, margins)[0] == INF


def test_sector_mismatch_margin():
    radius_ok = np.array([True, True, False, False])
    angle_ok = np.array([True, False, True, False])
    radius_margin = np.array([1.0, 2.0, 3.0, 4.0])
    angle_margin = np.array([5.0, 6.0, 0.5, 0.25])
    got = sector_mismatch_margin(radius_ok, angle_ok, radius_margin, angle_margin)
    np.testing.assert_array_equal(got, [1.0, 6.0, 3.0, 4.0])


def test_margins_grow_away_from_both_boundaries():
    arc = columns([(0, 0, 1.25, 0, 25, 0.5, steps(3, n), 4) for n in range(6)])
    edge = columns([(0, 0, 1.25, 0, 30, 0.75, steps(3, n), 4) for n in range(6)])
    radius_margin = sector_margins(*arc)[0]
    angle_margin = sector_margins(*edge)[1]
    for m in (radius_margin, angle_margin):
        assert m[0] == 0 and (np.diff(m) > 0).all()
    np.testing.assert_allclose(angle_margin[1:] / angle_margin[1], np.arange(1, 6), rtol=1e-5)


# ---------------------------------------------------------------- sector, against Fractions


def test_sector_grid_around_arc_point():
    rows = [(0, 0, *U, 25, 0.5, x, y) for x, y in ulp_grid(3, 4)]
    assert_sector_matches_fractions(columns(rows))


def test_sector_grid_around_edge_point():
    rows = [(0, 0, 1.25, 0, 30, 0.75, x, y) for x, y in ulp_grid(3, 4)]
    assert_sector_matches_fractions(columns(rows))


def test_sector_grid_around_perpendicular_edge():
    rows = [(0, 0, 0.75, 1, 1e4, 0, x, y) for x, y in ulp_grid(4, -3)]
    assert_sector_matches_fractions(columns(rows))


@pytest.mark.parametrize("offset", [1e3, 1e5])
def test_sector_random_rows_near_boundaries_at_offset(offset):
    rng = np.random.default_rng(int(offset))
    n = 1500
    c = offset + rng.uniform(-1, 1, (2, n))
    phi_u, phi_p = rng.uniform(0, 2 * np.pi, (2, n))
    radius = rng.uniform(0.1, 10, n)
    k = rng.uniform(-1, 1, n)
    # p lands near the arc or near an edge ray, after rounding to float32
    on_edge = rng.random(n) < 0.5
    phi_p = np.where(on_edge, phi_u + rng.choice([-1, 1], n) * np.arccos(k), phi_p)
    scale = np.where(on_edge, rng.uniform(0.1, 1, n), 1.0) * radius
    cols = [
        c[0],
        c[1],
        np.cos(phi_u),
        np.sin(phi_u),
        radius**2,
        k,
        c[0] + scale * np.cos(phi_p),
        c[1] + scale * np.sin(phi_p),
    ]
    assert_sector_matches_fractions([x.astype(F32) for x in cols])


def test_sector_random_bit_patterns():
    rng = np.random.default_rng(1)
    n = 1500
    assert_sector_matches_fractions([random_bits(rng, n) for _ in range(8)])
    assert_sector_matches_fractions([random_magnitudes(rng, n) for _ in range(8)])


def _decimal(q: Fraction) -> Decimal:
    return Decimal(q.numerator) / Decimal(q.denominator)


def sector_margins_decimal(row):
    """Both margins at 80 significant digits, straight from the definitions."""
    if not np.isfinite(row).all():
        return NAN, NAN
    cx, cy, ux, uy, r2, k, px, py = (Fraction(float(v)) for v in row)
    dx, dy = px - cx, py - cy
    s = dx * dx + dy * dy
    with localcontext() as ctx:
        ctx.prec = 80
        root_k = _decimal(s).sqrt() * _decimal(k)
        angle_g = _decimal(dx * ux + dy * uy) - root_k
        angle_G = _decimal(abs(dx * ux) + abs(dy * uy)) + abs(root_k)
        radius = abs(r2 - s) / (abs(r2) + s) * 2**24 if r2 or s else 0
        angle = abs(angle_g) / angle_G * 2**24 if angle_G else 0
        return float(radius), float(angle)


@pytest.mark.parametrize("near_boundary", [False, True])
def test_sector_margins_are_accurate(near_boundary):
    rng = np.random.default_rng(2)
    if near_boundary:
        rows = [(0, 0, 1.25, 0, 25, 0.75, x, y) for x, y in ulp_grid(3, 4, half=8)]
        cols = columns(rows)
    else:
        cols = [random_magnitudes(rng, 400) for _ in range(8)]
    got = np.stack(sector_margins(*cols), axis=1)
    want = np.array([sector_margins_decimal(row) for row in zip(*cols)])
    finite = np.isfinite(want).all(axis=1) & np.isfinite(got).all(axis=1)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6, atol=0)
    np.testing.assert_array_equal(got[finite] == 0, want[finite] == 0)


def test_self_check_catches_a_disagreement(monkeypatch):
    cols = columns([(0, 0, *U, 25, 0.5, 3, 4)])
    monkeypatch.setattr(sector_oracle, "_reference", lambda row: (True, True, False, False))
    with pytest.raises(OracleSelfCheckError):
        self_check_sector(*cols, rng=np.random.default_rng(0))


# ---------------------------------------------------------------- triangle

A, B, C = (261.137939, 8.13000488), (73.6379318, 8.13000488), (76.9379349, 10.2300053)


def test_recast_regression_point_is_inside_and_its_typo_twin_outside():
    cols = columns([(*A, *B, *C, 74.4069519, 8.6093819), (*A, *B, *C, 74.4069519, 8.6193819)])
    np.testing.assert_array_equal(triangle_inside(*cols), [True, False])
    assert [triangle_inside_fraction(row) for row in zip(*cols)] == [True, False]
    # the twin misses edge bc by ~3e-6 of the triangle's size, well within eps = 1e-4
    np.testing.assert_array_equal(triangle_inside(*cols, tolerance=1e-4), [True, True])


def test_edge_and_vertex_points_are_outside_unless_tolerant():
    rows = [(*A, *B, *C, 100, A[1]), (*A, *B, *C, *B), (*A, *B, *C, *A)]
    cols = columns(rows)
    assert not triangle_inside(*cols).any()
    assert triangle_inside(*cols, tolerance=1e-4).all()
    margins = triangle_margins(*cols)
    assert margins[0, 0] == 0 and (margins[0, 1:] > 0).all()


def test_degenerate_triangle():
    collinear = (0, 0, 2, 2, 4, 4)
    cols = columns([(*collinear, 1, 1), (*collinear, 3, 3), (*collinear, 1, 2), (*collinear, 5, 5)])
    assert not triangle_inside(*cols).any()
    # Den == 0 is evaluated literally: U ≥ 0, V ≥ 0, U + V ≤ 0 holds on the line only
    np.testing.assert_array_equal(triangle_inside(*cols, tolerance=1e-4), [True, True, False, True])
    assert_triangle_matches_fractions(cols, 1e-4)


def test_tolerance_is_taken_as_float32():
    result = triangle_exact(*columns([(0, 0, 1, 0, 0, 1, 0.2, 0.2)]), tolerance=1e-4)
    assert result.tolerance == float(F32(1e-4))


@pytest.mark.parametrize("position", range(8))
def test_non_finite_triangle_rows_are_outside(position):
    row = [0, 0, 4, 0, 0, 4, 1, 1]
    row[position] = NAN
    cols = columns([row])
    for tolerance in (0.0, 1e-4):
        result = triangle_exact(*cols, tolerance=tolerance)
        assert not result.inside[0]
        assert np.isnan(result.margins).all() and np.isnan(result.mismatch_margin[0])


T_A, T_B, T_C = (0, 0), (4, 0), (1, INF)  # c at infinity straight above


# Worked by hand with a = (0, 0), b = (4, 0), c = (1, ∞):
#   p = (2, 1):  o1 = 4·1 − 0·2 = 4,  o2 = (1−4)(1) − ∞·(2−4) = ∞,
#                o3 = (0−1)(1−∞) − (0−∞)(2−1) = ∞ + ∞ = ∞            → inside
#   p = (-1, 1): o1 = 4,  o2 = −3 − ∞·(−5) = ∞,  o3 = (−1)(−∞) − (−∞)(−2) = ∞ − ∞ → undefined
#   p = (2, -1): o1 = −4, o2 = 3 + ∞ = ∞,  o3 = (−1)(−∞) − (−∞)(1) = ∞   → outside
# Tolerant, p = (2, 1): v0 = (1, ∞), v1 = (4, 0), v2 = (2, 1), Den = 1·0 − ∞·4 = −∞,
#   U = 0·2 − 4·1 = −4, V = 1·1 − ∞·2 = −∞; flipped: Den = ∞, U = 4, V = ∞;
#   U + eps·Den = ∞, V + eps·Den = ∞, (1 + eps)·Den − U − V = ∞ − ∞ → undefined.
def test_triangle_with_infinite_vertex():
    cols = columns([(*T_A, *T_B, *T_C, 2, 1), (*T_A, *T_B, *T_C, -1, 1), (*T_A, *T_B, *T_C, 2, -1)])
    strict = triangle_exact(*cols)
    np.testing.assert_array_equal(strict.inside, [True, False, False])
    np.testing.assert_array_equal(strict.signs, [[1, 1, 1], [1, 1, 0], [-1, 1, 1]])
    kinds = [[margin_kind(m) for m in row] for row in strict.margins]
    assert kinds == [["fin", "inf", "inf"], ["fin", "inf", "nan"], ["fin", "inf", "inf"]]
    assert strict.margins[0, 0] == 2.0**24  # a horizontal edge: one nonzero term
    # the third row is explained by misjudging o1 alone; the second only by an infinity
    np.testing.assert_array_equal(strict.mismatch_margin, [2.0**24, INF, 2.0**24])
    assert [triangle_inside_fraction(row) for row in zip(*cols)] == [True, False, False]
    tolerant = triangle_exact(*cols, tolerance=1e-4)
    assert not tolerant.inside.any()
    np.testing.assert_array_equal(tolerant.signs[0], [1, 1, 0])
    assert [margin_kind(m) for m in tolerant.margins[0]] == ["inf", "inf", "nan"]
    assert tolerant.mismatch_margin[0] == INF
    for tolerance in (0.0, 1e-4):
        assert_triangle_matches_fractions(cols, tolerance)


def test_triangle_with_infinite_point_is_defined_when_no_zero_meets_it():
    # a = (0, 0), b = (4, −1), c = (1, 4), p = (∞, 0):
    #   strict: o1 = 4·0 − (−1)·∞ = ∞, o2 = (−3)(1) − 5·∞ = −∞, o3 = (−1)(−4) − (−4)·∞ = ∞
    #   tolerant: Den = 1·(−1) − 4·4 = −17, U = (−1)·∞ − 4·0 = −∞, V = 1·0 − 4·∞ = −∞;
    #   flipped: Den = 17, U = V = ∞: slacks ∞, ∞, 17·(1 + eps) − ∞ − ∞ = −∞
    cols = columns([(0, 0, 4, -1, 1, 4, INF, 0)])
    strict = triangle_exact(*cols)
    np.testing.assert_array_equal(strict.signs, [[1, -1, 1]])
    assert not strict.inside[0] and (strict.margins == INF).all()
    tolerant = triangle_exact(*cols, tolerance=1e-4)
    np.testing.assert_array_equal(tolerant.signs, [[1, 1, -1]])
    assert not tolerant.inside[0] and (tolerant.margins == INF).all()
    assert strict.mismatch_margin[0] == tolerant.mismatch_margin[0] == INF
    for tolerance in (0.0, 1e-4):
        assert_triangle_matches_fractions(cols, tolerance)


def test_tolerant_flip_uses_the_exact_sign_of_a_finite_den():
    # a = (−2^-100, 0), b = (1, 1), c = (3, 3): Den = (3 + e)·1 − 3·(1 + e) = −2e < 0 with
    # e = 2^-100, but float64 rounds it to 0.  p = (∞, 0): U = 1·∞ − (1 + e)·0 = ∞,
    # V = (3 + e)·0 − 3·∞ = −∞; the flip makes the slacks −∞, ∞, −2e·(1 + eps) + ∞ − ∞.
    tiny = 2.0**-100
    cols = columns([(-tiny, 0, 1, 1, 3, 3, INF, 0)])
    result = triangle_exact(*cols, tolerance=1e-4)
    np.testing.assert_array_equal(result.signs, [[-1, 1, 0]])
    assert not result.inside[0]
    assert_triangle_matches_fractions(cols, 1e-4)


def test_triangle_mismatch_margin():
    margins = np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    signs = np.array([[1, 1, 1], [1, 1, -1], [-1, -1, 1]])
    # outside rows: flip the one odd orientation, or the other two, whichever is cheaper
    np.testing.assert_array_equal(triangle_mismatch_margin(signs, margins), [1.0, 2.0, 2.0])
    np.testing.assert_array_equal(triangle_mismatch_margin(signs, margins, 1e-4), [1.0, 3.0, 2.0])


def test_triangle_margins_grow_away_from_edge():
    # a horizontal edge has a single nonzero term, so its margin is 0 or 2^24; use y = x
    cols = columns([(12, 12, 24, 24, -12, 24, 17.3, steps(17.3, n)) for n in range(6)])
    margins = triangle_margins(*cols)[:, 0]
    assert margins[0] == 0 and (np.diff(margins) > 0).all()
    result = triangle_exact(*cols)
    np.testing.assert_array_equal(result.inside, [False] + [True] * 5)
    np.testing.assert_array_equal(result.mismatch_margin, margins)


@pytest.mark.parametrize("tolerance", [0.0, 1e-4])
@pytest.mark.parametrize(
    "centre",
    [(100, A[1]), (74.4069519, 8.6093819), ((B[0] + C[0]) / 2, (B[1] + C[1]) / 2), (100, 8.12979)],
    ids=["horizontal-edge", "regression-point", "sloped-edge", "eps-boundary"],
)
def test_triangle_grids(centre, tolerance):
    rows = [(*A, *B, *C, x, y) for x, y in ulp_grid(*centre)]
    assert_triangle_matches_fractions(columns(rows), tolerance)


def test_kettner_diagonal_grid():
    # p on the line y = x through a and b whenever its two coordinates are equal
    rows = [(12, 12, 24, 24, -12, 24, x, y) for x, y in ulp_grid(17.3, 17.3)]
    cols = columns(rows)
    assert_triangle_matches_fractions(cols)
    on_line = cols[6] == cols[7]
    assert (triangle_margins(*cols)[on_line, 0] == 0).all()


@pytest.mark.parametrize("tolerance", [0.0, 1e-4])
@pytest.mark.parametrize("offset", [1e3, 1e5])
def test_triangle_random_rows_at_offset(offset, tolerance):
    rng = np.random.default_rng(int(offset))
    n = 1500
    vertices = offset + rng.uniform(-10, 10, (6, n))
    # p near an edge: a random point on one edge plus a tiny offset
    t, jitter = rng.uniform(0, 1, n), rng.normal(0, 1e-4, (2, n))
    p = vertices[0:2] + t * (vertices[2:4] - vertices[0:2]) + jitter
    assert_triangle_matches_fractions([x.astype(F32) for x in (*vertices, *p)], tolerance)


@pytest.mark.parametrize("tolerance", [0.0, 1e-4, 3.0])
def test_triangle_random_bit_patterns(tolerance):
    rng = np.random.default_rng(3)
    assert_triangle_matches_fractions([random_bits(rng, 1000) for _ in range(8)], tolerance)
    assert_triangle_matches_fractions([random_magnitudes(rng, 1000) for _ in range(8)], tolerance)


def test_triangle_margins_are_accurate():
    rng = np.random.default_rng(4)
    cols = [random_magnitudes(rng, 400) for _ in range(8)]
    for tolerance in (0.0, 1e-4):
        filtered = triangle_margins(*cols, tolerance=tolerance)
        exact = triangle_oracle._triangle(cols, tolerance, use_filter=False).margins
        np.testing.assert_allclose(filtered, exact, rtol=1e-6, atol=0)
    # the exact path itself, on orientations computed with Fractions
    finite = np.isfinite(cols).all(axis=0)
    want = []
    for row in zip(*(c[finite] for c in cols)):
        ax, ay, bx, by, cx, cy, px, py = (Fraction(float(v)) for v in row)
        edges = (((ax, ay), (bx, by)), ((bx, by), (cx, cy)), ((cx, cy), (ax, ay)))
        terms = [((x1 - x0) * (py - y0), (y1 - y0) * (px - x0)) for (x0, y0), (x1, y1) in edges]
        want.append([float(abs(x - y) / (abs(x) + abs(y)) * 2**24) if x or y else 0.0 for x, y in terms])
    exact = triangle_oracle._triangle(cols, 0.0, use_filter=False).margins
    np.testing.assert_allclose(exact[finite], want, rtol=1e-12, atol=0)


# ---------------------------------------------------------------- infinities, random


def with_infinities(rng, cols, p=0.1):
    """cols with each slot independently replaced by ±inf with probability p."""
    out = []
    for c in cols:
        c = c.copy()
        hit = rng.random(len(c)) < p
        c[hit] = rng.choice([F32(np.inf), F32(-np.inf)], hit.sum())
        out.append(c)
    return out


def zero_prone_columns(rng, n):
    """Small integers (so zeros and equal coordinates are common) mixed with random floats."""
    small = rng.integers(-2, 3, (8, n)).astype(F32)
    wide = rng.uniform(-10, 10, (8, n)).astype(F32)
    return list(np.where(rng.random((8, n)) < 0.5, small, wide))


def test_sector_random_rows_with_infinities():
    rng = np.random.default_rng(6)
    n = 1500
    cols = with_infinities(rng, zero_prone_columns(rng, n))
    cols[4] = np.abs(cols[4]) * 10  # r2 mostly passes, so the angle test matters
    assert_sector_matches_fractions(cols)
    result = sector_exact(*cols)
    infinite_rows = ~np.isfinite(cols).all(axis=0)
    # every kind of outcome shows up among the rows with an infinity
    assert result.inside[infinite_rows].any() and (~result.inside[infinite_rows]).any()
    for margin in (result.radius_margin, result.angle_margin):
        assert np.isinf(margin).any() and np.isnan(margin).any()
        assert np.isfinite(margin[infinite_rows]).any()
    assert_sector_matches_fractions(with_infinities(rng, [random_magnitudes(rng, n) for _ in range(8)]))


@pytest.mark.parametrize("tolerance", [0.0, 1e-4, -0.5])
def test_triangle_random_rows_with_infinities(tolerance):
    rng = np.random.default_rng(7)
    n = 1000
    cols = with_infinities(rng, zero_prone_columns(rng, n))
    assert_triangle_matches_fractions(cols, tolerance)
    result = triangle_exact(*cols, tolerance=tolerance)
    infinite_rows = ~np.isfinite(cols).all(axis=0)
    assert np.isinf(result.margins).any() and np.isnan(result.margins).any()
    assert (np.abs(result.signs[infinite_rows]) == 1).all(axis=1).any()  # defined rows too
    if tolerance == 0.0:
        assert result.inside[infinite_rows].any()
    assert_triangle_matches_fractions(with_infinities(rng, [random_magnitudes(rng, n) for _ in range(8)]), tolerance)


# ---------------------------------------------------------------- special inputs


SUBNORMAL_MAX = np.nextafter(F32(2.0**-126), F32(0))


@pytest.mark.parametrize(
    "value, special",
    [
        (NAN, True),
        (INF, True),
        (-INF, True),
        (1e-45, True),
        (-1e-45, True),
        (SUBNORMAL_MAX, True),
        (-SUBNORMAL_MAX, True),
        (-0.0, True),
        (0.0, False),
        (2.0**-126, False),
        (-(2.0**-126), False),
        (1.0, False),
        (-3.5, False),
        (np.finfo(F32).max, False),
        (np.finfo(F32).min, False),
    ],
)
def test_has_special_input_each_kind(value, special):
    normal = np.array([1.0, 1.0], dtype=F32)
    cell = np.array([value, 2.0], dtype=F32)
    np.testing.assert_array_equal(has_special_input(normal, cell, normal), [special, False])
    np.testing.assert_array_equal(has_special_input(cell), [special, False])


def test_has_special_input_rows():
    cols = columns(
        [
            (0, 0, 1, 0, 100, 0.5, 3, 4),
            (0, -0.0, 1, 0, 100, 0.5, 3, 4),
            (0, 0, 1, 0, 100, 0.5, 3, 1e-40),
            (0, 0, 1, 0, 100, 0.5, 3, INF),
            (2.0**-126, 0, 1, 0, 100, 0.5, 3, 4),
        ]
    )
    np.testing.assert_array_equal(has_special_input(*cols), [False, True, True, True, False])
    assert has_special_input(*[np.zeros(0, F32)] * 8).shape == (0,)
    with pytest.raises(TypeError):
        has_special_input(np.zeros(2))
    with pytest.raises(ValueError):
        has_special_input(np.zeros(2, F32), np.zeros(3, F32))


# ---------------------------------------------------------------- volume


def test_many_random_rows_complete():
    rng = np.random.default_rng(5)
    n = 200_000
    phi = rng.uniform(0, 2 * np.pi, n)
    cx, cy, px, py = rng.uniform(-100, 100, (4, n))
    r2, k = rng.uniform(0, 1e4, n), rng.uniform(-1, 1, n)
    sector_cols = [cx, cy, np.cos(phi), np.sin(phi), r2, k, px, py]
    triangle_cols = [rng.uniform(-100, 100, n) for _ in range(8)]
    start = time.perf_counter()
    result = sector_exact(*[x.astype(F32) for x in sector_cols])
    middle = time.perf_counter()
    triangle = triangle_exact(*[x.astype(F32) for x in triangle_cols])
    end = time.perf_counter()
    print(f"\n{n} sector rows: {middle - start:.3f} s, {n} triangle rows: {end - middle:.3f} s")
    assert result.inside.shape == triangle.inside.shape == (n,)
    assert np.isfinite(result.mismatch_margin).all()
