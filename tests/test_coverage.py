"""Coverage by construction: every declared cell of every family holds rows on both sides of
its boundary piece, exact ones for the predicate families, and those rows alone catch the
mutants that are wrong only there (docs/coverage.md)."""

from __future__ import annotations

import dataclasses
import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from sectorbench import families
from sectorbench.check.coverage import coverage
from sectorbench.check.verify import VerifyConfig, verify
from sectorbench.cli import main
from sectorbench.families.sector import cases as sector_cases
from sectorbench.families.triangle import cases as triangle_cases
from sectorbench.model.cases import case_set
from sectorbench.native.build import BuildConfig

DATA = Path(__file__).parent / "data"
#: Few random rows: the cells must be filled by the constructions, whatever --cases.
CASES = 1000
CONSTRUCTIONS = {"sector": sector_cases, "triangle": triangle_cases}


@pytest.mark.parametrize("family", ["sector", "triangle", "aabr"])
def test_every_declared_cell_holds_rows_on_both_sides(family):
    result = coverage(family, CASES, seed=3)
    assert len(result.cells) >= 12
    assert not result.empty, [(c.piece, c.region, c.first, c.second) for c in result.empty]
    assert not result.undeclared  # every counted row lands in a declared cell


@pytest.mark.parametrize("family", ["sector", "triangle"])
def test_without_the_constructions_most_cells_are_empty(family, monkeypatch):
    """The table can fail: the other generators leave the inside of every sector cell, and
    half the triangle's, without an exact row."""
    module = CONSTRUCTIONS[family]
    names = (*families.get(family).oracle_arrays,)
    monkeypatch.setattr(module, "exact_cell_rows", lambda: {k: [] for k in names})
    if family == "sector":  # the unit-u cells fill them too
        monkeypatch.setattr(module, "unit_u_cell_rows", lambda: {k: [] for k in names})
    result = coverage(family, CASES)
    assert not result.passed
    assert len(result.empty) >= len(result.cells) // 2
    assert all(cell.first == 0 for cell in result.empty if family == "sector")


def _constructed(family):
    fam = families.get(family)
    cases = case_set(fam, [("exact cells", CONSTRUCTIONS[family].exact_cell_rows())])
    return fam, cases, fam.reference(cases, fam.nominal_kernel())


@pytest.mark.parametrize("family", ["sector", "triangle"])
def test_every_constructed_row_is_exact_and_beside_a_piece(family):
    fam, cases, reference = _constructed(family)
    piece, inside, _, counted = fam.coverage_rows(cases, reference)
    assert len(cases) > 1000
    assert counted.all() and (piece != "").all()
    assert 0.2 < inside.mean() < 0.8


def test_sector_rows_on_an_edge_ray_lie_on_it_exactly():
    """With Fractions: D·u = |D|·cos_theta for every on-ray row (|D| exact, as a Pythagorean
    D makes it), at half-angles of both signs of cos θ, not only cos θ = 0."""
    fam, cases, reference = _constructed("sector")
    c = cases.columns
    piece, _, _, _ = fam.coverage_rows(cases, reference)
    on_ray, signs = 0, set()
    for i in np.flatnonzero(np.char.endswith(piece.astype(str), "edge ray")):
        v = {k: Fraction(float(c[k][i])) for k in ("cx", "cy", "ux", "uy", "cos_theta", "px", "py")}
        dx, dy = v["px"] - v["cx"], v["py"] - v["cy"]
        a, s, k = dx * v["ux"] + dy * v["uy"], dx * dx + dy * dy, v["cos_theta"]
        if a * abs(a) == s * k * abs(k):
            on_ray += 1
            signs.add(k > 0)
            assert not reference.answer[i] and reference.exact[i]
    assert on_ray >= 200 and signs == {True, False}


@pytest.mark.parametrize(
    ("family", "mutant", "correct"),
    [
        ("sector", "m_edge_ge_wide", ("basic", "nosqrt", "bittrick", "sse2", "sse2_nosqrt", "avx2_nosqrt")),
        ("sector", "m_tiny_radius", ()),
        ("triangle", "t_vertex_snap", ("orient",)),
    ],
)
def test_the_constructions_alone_catch_the_boundary_mutants(family, mutant, correct, tmp_path):
    """verify --input on the constructed rows only: the mutant wrong only beside a boundary
    away from cos θ = 0 (or at a tiny radius, or beside a triangle's vertex) fails as a logic
    bug; correct kernels pass."""
    fam = families.get(family)
    rows = CONSTRUCTIONS[family].exact_cell_rows()
    path = tmp_path / "cells.npz"
    np.savez(path, **{k: np.asarray(v, dtype=np.float32) for k, v in rows.items()})
    build = BuildConfig.parse("-O2", extra_sources=(DATA / "mutants.c",))
    result = verify(VerifyConfig(family=fam.name, kernels=(mutant, *correct), builds=(build,), input_path=path))
    verdicts = {k.kernel: k for k in result.kernels if k.status == "ok"}
    assert verdicts[mutant].verdict == "FAIL" and verdicts[mutant].mismatches["logic-bug"] > 0
    assert all(verdicts[name].verdict != "FAIL" for name in correct if name in verdicts)


def test_apexes_far_from_the_origin_are_checked():
    """Exact rows beside every piece with the apex at ~1.3e9, ~1.4e18 and ~9.4e22, not only up to
    1e5: a kernel taking the arc for inside beyond |c| = 2^20, and one that holds nothing beyond
    1e16, passed verify at seeds 0 and 3 (one holding nothing beyond 1e22 passed with the apexes
    up to 1.4e18); all three now fail as logic bugs, basic and nosqrt still pass."""
    mutants = ("far_arc_inclusive", "far_culled", "far_culled_1e22")
    _mutants_fail_correct_pass("sector", "far_apex.c", mutants, ("basic", "nosqrt"), seed=3)
    assert "|c| >= 2^20 (1e6)" in sector_cases.offset_labels()


def _mutants_fail_correct_pass(family: str, source: str, mutants: tuple, correct: tuple, seed: int) -> None:
    """verify of tests/data/SOURCE's `mutants` beside shipped `correct` kernels, at -O2: each
    mutant FAILs with logic bugs, no correct kernel FAILs."""
    build = BuildConfig.parse("-O2", extra_sources=(DATA / source,))
    config = VerifyConfig(family=family, kernels=mutants + correct, builds=(build,), cases=CASES, seed=seed)
    verdicts = {k.kernel: k for k in verify(config).kernels}
    for mutant in mutants:
        assert verdicts[mutant].verdict == "FAIL" and verdicts[mutant].mismatches["logic-bug"] > 0, mutant
    assert all(verdicts[name].verdict != "FAIL" for name in correct)


@pytest.mark.parametrize("seed", [1, 2])
def test_triangles_far_from_the_origin_are_checked(seed):
    """Exact rows beside every edge and vertex with a at ~1.3e9 and ~1.4e18, not only up to 1e5:
    a kernel taking the edges for inside beyond |a| = 2^30 failed on a few metamorphic rows
    only, and one holding nothing beyond 1e16 passed verify at seeds 1 and 2; both now fail as
    logic bugs, orient and recast_cross still pass."""
    mutants = ("far_edge_inclusive", "far_parked")
    _mutants_fail_correct_pass("triangle", "far_triangle.c", mutants, ("orient", "recast_cross"), seed=seed)
    assert "|a| >= 2^20 (1e6)" in triangle_cases.offset_labels()


def test_aabr_polygons_far_from_unit_scale_are_checked():
    """Polygons at 2^-40 and 2^60 (and ties at 2^-40, 2^-20, 2^20, 2^60), not only from 1e-6 to
    ~1e8: a kernel taking a polygon below 1e-12 for a point, and one taking a polygon beyond
    1e12 for a parked object, passed verify at every seed; both now fail as logic bugs, the
    shipped kernels still pass, and the coverage table has a radius dimension that shows it."""
    mutants = ("tiny_is_a_point", "huge_is_parked")
    _mutants_fail_correct_pass("aabr", "aabr_far_scales.c", mutants, ("scan", "hill", "bcs_search"), seed=3)
    cells = {(c.piece, c.region): c for c in coverage("aabr", CASES, seed=3).cells}
    for piece in ("record key ±2 ulp", "special angle ±1 ulp"):
        for region in ("radius in [2^-64, 2^-32)", "radius in [2^32, 2^64)"):
            assert cells[(piece, region)].first > 0 and cells[(piece, region)].second > 0, (piece, region)


def test_verify_coverage_prints_the_table_without_building(tmp_path):
    cache = tmp_path / "cache"
    out = tmp_path / "coverage.json"
    result = CliRunner().invoke(
        main,
        [
            "verify",
            "--family",
            "triangle",
            "--coverage",
            "--cases",
            str(CASES),
            "--json",
            str(out),
        ],
        env={"SECTORBENCH_CACHE": str(cache), "COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "102/102 cells filled on both sides" in text and "vertex a" in text
    assert not cache.exists()  # nothing was compiled
    saved = json.loads(out.read_text())
    assert saved["kind"] == "coverage" and len(saved["cells"]) == 102
    assert all(cell["inside"] > 0 and cell["outside"] > 0 for cell in saved["cells"])


def test_verify_coverage_refuses_input_in_one_line(tmp_path):
    path = tmp_path / "cases.npz"
    np.savez(path, cx=np.zeros(1))
    result = CliRunner().invoke(main, ["verify", "--coverage", "--input", str(path)])
    assert result.exit_code == 2
    assert "--coverage counts the generated cases" in result.output and "Traceback" not in result.output


def test_verify_coverage_without_family_covers_the_first_family_as_verify_checks_it():
    """It was "unknown family None"; verify's own default is the first registered family."""
    result = CliRunner().invoke(main, ["verify", "--coverage", "--cases", "200"], env={"COLUMNS": "200"})
    assert result.exit_code in (0, 1) and "unknown family" not in result.output, result.output
    assert f"coverage: {families.all_families()[0].name} family" in result.output


def test_verify_coverage_exits_1_on_an_empty_cell(monkeypatch):
    names = families.get("triangle").oracle_arrays
    monkeypatch.setattr(triangle_cases, "exact_cell_rows", lambda: {k: [] for k in names})
    result = CliRunner().invoke(main, ["verify", "--family", "triangle", "--coverage", "--cases", str(CASES)])
    assert result.exit_code == 1, result.output
    assert "/102 cells filled on both sides" in " ".join(result.output.split())


@pytest.mark.parametrize("region", ["θ < 0.01 (needle)", "θ > π − 0.01 (near π)"])
def test_needle_and_near_pi_cones_are_cells_of_their_own(region, monkeypatch):
    """Filled by the extreme half-angle part (no other generator puts a point inside a needle
    or behind a near-π cone); with that part drawing random sectors instead, its cells empty."""
    cells = [c for c in coverage("sector", CASES, seed=3).cells if c.region == region]
    assert len(cells) == 4 and all(c.filled for c in cells), cells
    monkeypatch.setattr(
        sector_cases, "_extreme_half_angles", lambda rng, units: sector_cases.random_sectors(rng, units * 16)
    )
    emptied = [c for c in coverage("sector", CASES, seed=3).cells if c.region == region]
    assert sum(not c.filled for c in emptied) >= 3, emptied


def test_unit_u_constructions_fill_every_cell_inside_the_contract():
    """The cells again with |u|² within 2^-20 of 1, every row exact: a kernel declaring
    "unit u" is judged on them (the other constructions' |u| is ~2^-9 from 1).  The needle and
    near-π regions are the extreme half-angle part's, whose u is unit too."""
    fam = families.get("sector")
    cases = case_set(fam, [("exact cells, unit u", sector_cases.unit_u_cell_rows())])
    reference = fam.reference(cases, fam.nominal_kernel())
    piece, inside, regions, counted = fam.coverage_rows(cases, reference)
    unit_u = dataclasses.replace(fam.nominal_kernel(), contract="unit u")
    assert fam.applicable(unit_u, cases).all() and reference.exact.all() and counted.all()
    filled = {(p, r, bool(i)) for labels in regions for p, r, i in zip(piece, labels, inside) if p and r}
    wanted = [(p, r) for p, r in fam.coverage_cells() if "needle" not in r and "near π" not in r]
    assert len(wanted) == 84
    assert [(p, r) for p, r in wanted if not {(p, r, True), (p, r, False)} <= filled] == []


def test_unit_u_on_ray_rows_lie_outside_the_angle_to_u_too():
    """The oracle's edge ray is D·u = |D|·cos θ; a unit-u kernel may test the angle to u, whose
    ray is D·u = |D|·|u|·cos θ.  Each on-ray row is outside both (Fractions), so an inside
    answer is wrong whatever the kernel measures; the unit-u band leaves them judged."""
    from sectorbench.families.sector.oracle import unit_u_band

    fam = families.get("sector")
    cases = case_set(fam, [("exact cells, unit u", sector_cases.unit_u_cell_rows())])
    c = cases.columns
    on_ray = 0
    for i in range(len(cases)):
        v = {k: Fraction(float(c[k][i])) for k in ("cx", "cy", "ux", "uy", "cos_theta", "px", "py")}
        dx, dy = v["px"] - v["cx"], v["py"] - v["cy"]
        a, s, k, u2 = dx * v["ux"] + dy * v["uy"], dx * dx + dy * dy, v["cos_theta"], v["ux"] ** 2 + v["uy"] ** 2
        if s and a * abs(a) == s * k * abs(k):
            on_ray += 1
            assert a * abs(a) < s * u2 * k * abs(k), i  # outside the angle to u as well
    assert on_ray >= 60
    assert not unit_u_band(c).any()


def test_unit_u_band_excuses_rows_the_unit_reading_decides():
    """On the oracle's ray of a wide sector with |u| > 1 the angle to u is below θ: inside for
    a unit-u kernel, outside for the oracle, so either answer is right there (margin 0, not
    exact).  With |u| < 1 both say outside, and the row stays exact."""
    from sectorbench.families.sector.oracle import unit_u_band

    def on_ray(p1, p2):  # u = (p1, p2)·2^-12, D = (-1, 0): D·u = -p1·2^-12 = |D|·cos θ
        values = dict(cx=0.0, cy=0.0, ux=p1 / 4096, uy=p2 / 4096, r2=4.0, cos_theta=-p1 / 4096, px=-1.0, py=0.0)
        return {k: np.array([v], dtype=np.float32) for k, v in values.items()}

    assert 972**2 + 3979**2 == 2**24 + 9 and 1058**2 + 3957**2 == 2**24 - 3
    assert unit_u_band(on_ray(972, 3979))[0]
    assert not unit_u_band(on_ray(1058, 3957))[0]
    fam = families.get("sector")
    unit_u = dataclasses.replace(fam.nominal_kernel(), contract="unit u")
    cases = case_set(fam, [("probe", {k: v.astype(np.float64) for k, v in on_ray(972, 3979).items()})])
    assert fam.reference(cases, fam.nominal_kernel()).exact[0]
    judged = fam.reference(cases, unit_u)
    assert not judged.exact[0] and judged.margin[0] == 0
