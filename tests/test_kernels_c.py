"""The C kernels through real builds and a real worker: table, boundary rule, SIMD tails, overhead."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sectorbench.families.scene_kinds import generate, make_scene
from sectorbench.measure.messages import LoopRef
from sectorbench.measure.worker import Worker
from sectorbench.native.build import BuildConfig, build

SECTOR_KERNELS = ["naive", "basic", "nosqrt", "bittrick", "sse2", "sse2_nosqrt"]
F = np.float32
MINUS_ZERO = F(-0.0)
NAN = F(np.nan)
ALONG_U = (F(0.7139028310775757), F(-0.7002447843551636))  # (p-c)/|p-c|.u rounds to 1.00000012


def sector_case(cx, cy, ux, uy, r, theta, px, py, cos_theta=None, r2=None):
    r, theta = F(r), F(theta)
    return {
        "cx": F(cx),
        "cy": F(cy),
        "ux": F(ux),
        "uy": F(uy),
        "r": r,
        "theta": theta,
        "r2": F(r * r) if r2 is None else F(r2),
        "cos_theta": F(np.cos(np.float64(theta))) if cos_theta is None else F(cos_theta),
        "px": F(px),
        "py": F(py),
    }


# (name, case, expected inside, applies to the r/theta kernel too)
BOUNDARY_CASES = [
    ("on the arc (3,4), r2=25", sector_case(0, 0, 0.6, 0.8, 5, 1.0, 3, 4), False, True),
    # one ulp inside: |D| = sqrtf(24.999998) rounds to 5 = r, so the r/theta kernel may miss it (rounding)
    ("just inside the arc", sector_case(0, 0, 0.6, 0.8, 5, 1.0, 3, np.nextafter(F(4), F(0))), True, False),
    ("just outside the arc", sector_case(0, 0, 0.6, 0.8, 5, 1.0, 3, np.nextafter(F(4), F(5))), False, True),
    ("apex, wide sector", sector_case(0.25, -0.5, 1, 0, 1, 2.5, 0.25, -0.5), False, True),
    ("apex, narrow sector", sector_case(0.25, -0.5, 1, 0, 1, 0.5, 0.25, -0.5), False, True),
    ("apex at -0.0", sector_case(0, 0, 0, 1, 1, 2.5, MINUS_ZERO, MINUS_ZERO), False, True),
    ("apex -0.0 vs +0.0", sector_case(MINUS_ZERO, MINUS_ZERO, 0, 1, 1, 2.0, 0, 0), False, True),
    ("edge ray, cos=0, u=(1,0), p=(0,1)", sector_case(0, 0, 1, 0, 2, np.pi / 2, 0, 1, cos_theta=0.0), False, False),
    ("edge ray, cos=0, p=(0,-1)", sector_case(0, 0, 1, 0, 2, np.pi / 2, 0, -1, cos_theta=0.0), False, False),
    ("edge ray, cos=-0.0", sector_case(0, 0, 1, 0, 2, np.pi / 2, 0, 1, cos_theta=MINUS_ZERO), False, False),
    (
        "edge ray, cos=-0.0, u=(1,-0.0)",
        sector_case(0, 0, 1, MINUS_ZERO, 2, np.pi / 2, 0, 1, cos_theta=MINUS_ZERO),
        False,
        False,
    ),
    ("edge ray, p=(-0.0,1)", sector_case(0, 0, 1, 0, 2, np.pi / 2, MINUS_ZERO, 1, cos_theta=0.0), False, False),
    ("inside of the cos=0 edge", sector_case(0, 0, 1, 0, 2, np.pi / 2, 1e-6, 1, cos_theta=0.0), True, True),
    ("behind, cos=0", sector_case(0, 0, 1, 0, 2, np.pi / 2, -1e-6, 1, cos_theta=0.0), False, True),
    ("behind the apex, wide sector", sector_case(0, 0, 1, 0, 2, 2.5, -0.5, 0), False, True),
    ("beside the apex, wide sector", sector_case(0, 0, 1, 0, 2, 2.5, -0.5, 0.5), True, True),
    (
        "straight along u, dot rounds past 1",
        sector_case(0, 0, *ALONG_U, 2, 0.01, 0.5430470108985901, -0.5326576828956604),
        True,
        True,
    ),
    ("NaN point", sector_case(0, 0, 1, 0, 2, 1.0, NAN, 0), False, True),
    ("NaN direction", sector_case(0, 0, NAN, 0, 2, 2.5, 0.5, 0), False, True),
    ("NaN cos_theta", sector_case(0, 0, 1, 0, 2, 1.0, 0.5, 0, cos_theta=NAN), False, False),
    ("clearly inside", sector_case(0, 0, 1, 0, 2, 1.0, 0.5, 0.1), True, True),
    ("clearly outside angle", sector_case(0, 0, 1, 0, 2, 1.0, -0.5, 0.1), False, True),
]


def pairs_scene(cases: list[dict]):
    columns = {
        name: np.array([c[name] for c in cases], dtype=np.float32)
        for name in ("cx", "cy", "ux", "uy", "r", "theta", "r2", "cos_theta")
    }
    points = {name: np.array([c[name] for c in cases], dtype=np.float32) for name in ("px", "py")}
    return make_scene("cases", "sector", {**columns, **points}, layout="pairs")


def test_table_lists_the_article_kernels(o2_kernels):
    names = [k.name for k in o2_kernels]
    for name in SECTOR_KERNELS:
        assert name in names
    by_name = {k.name: k for k in o2_kernels}
    assert by_name["sse2"].loop == "sse2 x4 b1" and by_name["sse2"].lanes == 4 and by_name["sse2"].isa == ("sse2",)
    assert by_name["basic"].loop == "scalar b1" and by_name["basic"].lanes == 1
    # kernels of one loop shape and arity share a NoOperation; other shapes have their own
    assert by_name["basic"].overhead_key == by_name["naive"].overhead_key != by_name["sse2"].overhead_key
    assert by_name["naive"].takes == ("cx", "cy", "ux", "uy", "r", "theta")
    assert by_name["basic"].takes == ("cx", "cy", "ux", "uy", "r2", "cos_theta")
    assert by_name["recast_dot"].known_bad and not by_name["orient"].known_bad
    assert by_name["naive"].rounding_bound == 16 and by_name["recast_cross"].tolerance == pytest.approx(1e-4)
    # x86-64 always has SSE2: every kernel that needs no more runs on any x86-64 machine
    assert all(k.runnable for k in o2_kernels if set(k.isa) <= {"sse2"})
    # the others run exactly where the CPU has what they need (AVX-512 comes and goes as the VM moves)
    flags = set(Path("/proc/cpuinfo").read_text().split("flags")[1].split("\n")[0].split())
    for k in o2_kernels:
        assert k.runnable == all(f.replace(".", "_") in flags for f in k.isa), k.name


@pytest.mark.parametrize("kernel", SECTOR_KERNELS)
def test_boundary_rule(o2_worker, scratch, kernel):
    applicable = [(n, c, e) for n, c, e, for_rtheta in BOUNDARY_CASES if for_rtheta or kernel != "naive"]
    o2_worker.load(pairs_scene([c for _, c, _ in applicable]), scratch)
    answers = o2_worker.evaluate(kernel)
    wrong = [name for (name, _, expected), got in zip(applicable, answers) if bool(got) != expected]
    assert not wrong, f"{kernel} wrong on: {wrong}"


@pytest.mark.parametrize("kernel", SECTOR_KERNELS)
def test_agrees_with_exact_oracle_away_from_boundary(o2_worker, scratch, kernel):
    from sectorbench.families.sector import oracle

    scene = generate("uniform", 40, 700, 11)
    o2_worker.load(scene, scratch)
    got = o2_worker.evaluate(kernel)
    n, m = scene.n_shapes, scene.n_points
    grid = {name: np.repeat(scene.column(name), m) for name in ("cx", "cy", "ux", "uy", "r2", "cos_theta")}
    px, py = np.tile(scene.column("px"), n), np.tile(scene.column("py"), n)
    exact = oracle.sector_inside(grid["cx"], grid["cy"], grid["ux"], grid["uy"], grid["r2"], grid["cos_theta"], px, py)
    mismatches = np.flatnonzero(got.ravel() != exact)
    if mismatches.size:
        radius_margin, angle_margin = oracle.sector_margins(
            *(grid[k][mismatches] for k in ("cx", "cy", "ux", "uy", "r2", "cos_theta")), px[mismatches], py[mismatches]
        )
        assert np.minimum(radius_margin, angle_margin).max() <= 16, f"{kernel}: mismatch far from the boundary"
    assert mismatches.size <= 3


@pytest.mark.parametrize("m", range(1, 41))
def test_simd_tails_count_only_real_points(o2_worker, scratch, m):
    scene = generate("uniform", 3, m, m)
    o2_worker.load(scene, scratch)
    reference = o2_worker.evaluate("basic")
    for kernel in ("sse2", "sse2_nosqrt"):
        grid = o2_worker.evaluate(kernel)
        assert grid.shape == (3, m)
        assert np.array_equal(grid, reference), kernel
        for mode in ("inline", "call"):
            hits = o2_worker.sample(LoopRef(kernel, mode), calls=1).hits
            assert hits == reference.sum(), (kernel, mode)


def test_simd_answer_does_not_depend_on_lane(o2_worker, scratch):
    """Point j's answer is the same whatever the vector position it lands in."""
    scene = generate("uniform", 8, 40, 2)
    o2_worker.load(scene, scratch)
    full = o2_worker.evaluate("sse2_nosqrt")
    for shift in (1, 2, 3):
        columns = {k: scene.column(k) for k in ("cx", "cy", "ux", "uy", "r", "theta", "r2", "cos_theta")}
        points = {name: scene.column(name)[shift:] for name in ("px", "py")}
        shifted = make_scene("shifted", "sector", {**columns, **points})
        o2_worker.load(shifted, scratch)
        assert np.array_equal(o2_worker.evaluate("sse2_nosqrt"), full[:, shift:])


def test_count_matches_grid_for_every_kernel_and_mode(o2_worker, scratch):
    scene = generate("article", 30, 200, 0)
    o2_worker.load(scene, scratch)
    for kernel in SECTOR_KERNELS:
        total = o2_worker.evaluate(kernel).sum()
        for mode in ("inline", "call"):
            assert o2_worker.sample(LoopRef(kernel, mode), calls=1).hits == total


def test_noop_loops_count_nothing_at_O3(scratch):
    """The NoOperation loops run and count nothing (that they are not optimised away, that
    their work grows with the tests, is counted to the instruction in tests/test_instructions.py)."""
    with Worker(build(BuildConfig.parse("-O3"))) as worker:
        worker.load(generate("uniform", 100, 20000, 0), scratch)
        for kernel in ("basic", "sse2"):
            for mode in ("inline", "call"):
                reply = worker.sample(LoopRef(kernel, mode, noop=True), calls=3)
                assert reply.hits == 0 and reply.seconds > 0
