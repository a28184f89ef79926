"""The shared exact machinery: which float32 steps are exact, and the rule built on it."""

from __future__ import annotations

import numpy as np
import pytest

from sectorbench import families
from sectorbench.errors import SectorbenchError
from sectorbench.families.sector.oracle import exactly_evaluable as sector_evaluable
from sectorbench.families.triangle.oracle import exactly_evaluable as triangle_evaluable
from sectorbench.oracle import exact

F64 = np.float64


def f(*values):
    return np.array(values, dtype=F64)


def test_float32_exact_accepts_float32_values_and_refuses_rounding_and_subnormals():
    got = exact.float32_exact(
        f(0.0, -0.0, 1.0, 2.0**-126, 2.0**-127, 1 + 2.0**-23, 1 + 2.0**-24, 2.0**127, 3e38, np.inf)
    )
    assert got.tolist() == [True, True, True, True, False, True, False, True, False, False]


def test_exact_add_uses_the_rounding_error_not_just_the_result():
    # 2^40 - 2^-40 rounds back to 2^40 in float64 and in float32: equal results, still not exact
    _, ok = exact.exact_sub(f(2.0**40, 1.0, 1.0, 0.5, -0.0), f(2.0**-40, -(2.0**-24), 2.0**-24, 0.25, 0.0))
    assert ok.tolist() == [False, False, True, True, True]


def test_exact_mul_and_sqrt():
    assert exact.exact_mul(f(3.0, 1 + 2.0**-12), f(5.0, 1 + 2.0**-12))[1].tolist() == [True, False]
    root, ok = exact.exact_sqrt(f(25.0, 2.0, 2.0**-20, 0.0))
    assert ok.tolist() == [True, False, True, True] and root[0] == 5.0


@pytest.mark.parametrize("family_name", ["sector", "triangle"])
def test_every_hand_built_exact_construction_is_exact_by_arithmetic(family_name):
    """The rule replaces the hand tags: each construction's boundary constraint is found exact."""
    family = families.get(family_name)
    cases = family.cases(200, 0)
    if family_name == "sector":
        arc, edge, apex = (cases.group == g for g in ("exact arc", "exact edge", "exact apex"))
        radius, angle = sector_evaluable(cases.columns, takes_theta=False)
        assert radius[arc].all() and angle[edge].all() and (radius & angle)[apex].all()
        radius, angle = sector_evaluable(cases.columns, takes_theta=True)
        assert radius[arc].all() and angle[apex].all() and not angle[edge].any()
    else:
        rows = (cases.group == "exact vertex/edge") | (cases.group == "exact degenerate")
        assert triangle_evaluable(cases.columns)[rows].all()


def test_exact_rows_are_logic_bugs_whatever_their_margin():
    """An exact arc row has margin 0; a kernel counting it inside is a logic bug, not rounding."""
    family = families.get("sector")
    cases = family.cases(200, 0)
    kernel = next(k for k in _kernels() if k.name == "basic")
    reference = family.reference(cases, kernel)
    arc = cases.group == "exact arc"
    assert reference.exact[arc].all() and np.isinf(reference.margin[arc]).all()
    assert not reference.exact[cases.group == "random"].any()


def _kernels():
    from sectorbench.measure.worker import Worker
    from sectorbench.native.build import BuildConfig, build

    with Worker(build(BuildConfig.parse("-O2"))) as worker:
        return worker.describe()[0]


def _disc_terms(radius):
    """Inside the disc |p| < r: r*r - px*px - py*py > 0 (homogeneous), or r2 - ... with r2 an input."""

    def terms(r, px, py):
        rr = r * r if radius == "r" else r
        return (rr - px * px - py * py).reshape(-1, 1), (rr + px * px + py * py).reshape(-1, 1)

    return terms


def test_a_constraint_whose_terms_have_different_degrees_is_refused():
    # r2 - px^2 - py^2 with r2 an input: the exact fallback (inputs x 2^149) scaled r2 by 2^149 and
    # the squares by 2^298, so (3, 4) on the circle r2 = 25 came out outside (-1) and (3, 3.9)
    # inside it came out outside too, with no error.
    f32 = lambda *v: np.array(v, dtype=np.float32)  # noqa: E731
    px, py = f32(3, 3, 0.5), f32(4, 3.9, 0.5)
    signs = exact.evaluate_polynomials([f32(5, 5, 0.5), px, py], _disc_terms("r"), use_filter=False)[1]
    assert signs.ravel().tolist() == [0, 1, -1]
    with pytest.raises(SectorbenchError, match=r"^the oracle's constraint 0 of .* is not homogeneous"):
        exact.evaluate_polynomials([f32(25, 25, 0.25), px, py], _disc_terms("r2"), use_filter=False)
