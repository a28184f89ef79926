"""Coverage by construction: every declared cell of every family holds rows on both sides of
its boundary piece, exact ones for the predicate families, and those rows alone catch the
mutants that are wrong only there (docs/coverage.md)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from sectorbench import families
from sectorbench.check.coverage import coverage
from sectorbench.check.verify import VerifyConfig, _nominal_kernel, verify
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
    result = coverage(family, CASES)
    assert not result.passed
    assert len(result.empty) >= len(result.cells) // 2
    assert all(cell.first == 0 for cell in result.empty if family == "sector")


def _constructed(family):
    fam = families.get(family)
    cases = case_set(fam, [("exact cells", CONSTRUCTIONS[family].exact_cell_rows())])
    return fam, cases, fam.reference(cases, _nominal_kernel(fam))


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
            "--cc",
            "/nonexistent/cc",
            "--json",
            str(out),
        ],
        env={"SECTORBENCH_CACHE": str(cache), "COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "96/96 cells filled on both sides" in text and "vertex a" in text
    assert not cache.exists()  # nothing was compiled
    saved = json.loads(out.read_text())
    assert saved["kind"] == "coverage" and len(saved["cells"]) == 96
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
    assert "/96 cells filled on both sides" in " ".join(result.output.split())


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
