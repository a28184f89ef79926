import time
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest

from sectorbench import oracle
from sectorbench.oracle import (
    OracleSelfCheckError,
    check_fp_environment,
    sector_constraints,
    sector_exact,
    sector_inside,
    sector_inside_fraction,
    sector_margins,
    sector_mismatch_margin,
    self_check_sector,
    self_check_triangle,
    triangle_exact,
    triangle_inside,
    triangle_inside_fraction,
    triangle_margins,
    triangle_mismatch_margin,
)

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
    np.testing.assert_array_equal(
        sector_inside(*cols), [sector_inside_fraction(row) for row in zip(*cols)]
    )
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


def test_fp_environment_is_clean():
    check_fp_environment()


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
@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_non_finite_rows_are_outside(position, bad):
    row = [0, 0, 1, 0, 100, 0, 3, 0]
    row[position] = bad
    cols = columns([row, (0, 0, 1, 0, 100, 0, 3, 0)])
    result = sector_exact(*cols)
    np.testing.assert_array_equal(result.inside, [False, True])
    assert np.isnan(result.radius_margin[0]) and np.isnan(result.angle_margin[0])
    assert np.isnan(result.mismatch_margin[0])
    assert not sector_inside_fraction(row)


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
    cols = [c[0], c[1], np.cos(phi_u), np.sin(phi_u), radius**2, k,
            c[0] + scale * np.cos(phi_p), c[1] + scale * np.sin(phi_p)]
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
    monkeypatch.setattr(oracle, "_sector_reference", lambda row: (True, True, False, False))
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
        exact = oracle._triangle(cols, tolerance, use_filter=False).margins
        np.testing.assert_allclose(filtered, exact, rtol=1e-6, atol=0)
    # the exact path itself, on orientations computed with Fractions
    finite = np.isfinite(cols).all(axis=0)
    want = []
    for row in zip(*(c[finite] for c in cols)):
        ax, ay, bx, by, cx, cy, px, py = (Fraction(float(v)) for v in row)
        edges = (((ax, ay), (bx, by)), ((bx, by), (cx, cy)), ((cx, cy), (ax, ay)))
        terms = [((x1 - x0) * (py - y0), (y1 - y0) * (px - x0)) for (x0, y0), (x1, y1) in edges]
        want.append([float(abs(x - y) / (abs(x) + abs(y)) * 2**24) if x or y else 0.0
                     for x, y in terms])
    exact = oracle._triangle(cols, 0.0, use_filter=False).margins
    np.testing.assert_allclose(exact[finite], want, rtol=1e-12, atol=0)


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
