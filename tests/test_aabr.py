"""The aabr family: run and verify with every kernel, ties, record boundaries,
the BCS build report, the exact oracle's teeth, and the turning-sector box lookup."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from sectorbench.check.verify import VerifyConfig, verify
from sectorbench.cli import main
from sectorbench.families import get
from sectorbench.families.aabr import oracle, turning
from sectorbench.families.aabr.cases import polygon_cases, square, ulp_steps
from sectorbench.families.aabr.polygons import ellipse_polygon, record_keys, regular_polygon, rotation_inputs
from sectorbench.families.scene_kinds import make_scene
from sectorbench.measure.runner import RunConfig, run
from sectorbench.measure.timing import TimingConfig

KERNELS = ("scan", "scan_avx2", "scan_avx512", "hill", "bcs_search", "bcs_coherent")
FAMILY = get("aabr")


def evaluate(worker, scratch, kernel, polygons, rotations):
    """A kernel's (maxX, maxY, minX, minY) for every polygon at every rotation: (N, M, 4)."""
    columns = {"poly": np.arange(len(polygons), dtype=np.float32), **rotations}
    from sectorbench.families.aabr.polygons import pack

    worker.load(make_scene("test", "aabr", columns, extra=pack(polygons)), scratch)
    return worker.evaluate(kernel)


def runnable(o2_kernels):
    return [k.name for k in o2_kernels if k.family == "aabr" and k.runnable]


def test_every_kernel_is_registered(o2_kernels):
    names = {k.name for k in o2_kernels if k.family == "aabr"}
    assert set(KERNELS) <= names


def test_verify_passes_every_kernel_on_adversarial_cases():
    result = verify(VerifyConfig(family="aabr", cases=400))
    assert result.passed, [(k.kernel, k.verdict, k.mismatches, k.failing[:2]) for k in result.kernels]
    groups = set(result.groups)
    assert {"square", "regular", "record boundaries +-2 ulp", "near-duplicate vertices", "collinear lattice"} <= groups
    assert {"huge 1e6", "tiny 1e-6", "needle 1e6 x 1e-6"} <= groups
    by_name = {k.kernel: k for k in result.kernels}
    for name in ("scan", "bcs_search", "bcs_coherent", "hill"):
        k = by_name[name]
        assert k.mismatches["logic-bug"] == 0 and k.loop_checks > 0
    # hill assumes convexity: it is judged only on polygons convex in float32
    assert by_name["hill"].cases < by_name["scan"].cases


def test_run_reports_the_bcs_build_apart_and_all_kernels_agree():
    timing = TimingConfig(repeat=1, min_sample_s=0.001)
    result = run(RunConfig(scene="polygons16-coherent", sectors=6, points=200, timing=timing, threads=(1, 2)))
    rows = {(r.kernel, r.threads): r for r in result.results}
    assert {k for k, _ in rows} >= {"scan", "hill", "bcs_search", "bcs_coherent"}
    for (name, _), r in rows.items():
        if r.status == "skipped":
            continue
        assert r.status == "ok", (name, r.reason)
        if name.startswith("bcs"):
            assert r.index_build_s > 0 and r.index_bytes > 0
        else:
            assert r.index_build_s is None and r.index_bytes is None
    # the two BCS lookups find the same record, whatever the threads: equal checksums
    checksums = {r.hits for (name, _), r in rows.items() if name.startswith("bcs")}
    assert len(checksums) == 1
    # a generic polygon (R = 4m + 1 records): (R + 1) * 4 + R * 8 bytes, 6 polygons of 16 vertices
    assert rows[("bcs_search", 1)].index_bytes == 6 * (66 * 4 + 65 * 8)


def test_square_at_zero_ties_follow_the_rules(o2_worker, o2_kernels, scratch):
    """maxX is vertex 0 or 3, maxY 0 or 1, minX 1 or 2, minY 2 or 3; the scans take the lowest."""
    rotations = rotation_inputs([0.0])
    allowed = ({0, 3}, {0, 1}, {1, 2}, {2, 3})
    for name in runnable(o2_kernels):
        got = evaluate(o2_worker, scratch, name, [square()], rotations)[0, 0]
        assert all(int(g) in a for g, a in zip(got, allowed)), (name, got)
        if name.startswith("scan"):
            assert list(got) == [0, 0, 1, 2], name
    oracle_answer, _, _ = oracle.judge_polygon(*square(), rotations["c"], rotations["s"])
    assert list(oracle_answer[0]) == [0, 0, 1, 2]


def test_records_start_exactly_at_the_keys_verify_aims_at(o2_worker, scratch):
    """At every record key the BCS answer changes, and not one ulp before: the Python
    keys (polygons.record_keys) are the C build's, so verify's +-1 ulp cases hit them."""
    rng = np.random.default_rng(5)
    for polygon in (ellipse_polygon(rng, 12), regular_polygon(8, 1.0, 1)):
        keys = record_keys(*polygon)
        assert len(keys) > 0
        at = evaluate(o2_worker, scratch, "bcs_search", [polygon], rotation_inputs(keys))[0]
        before = evaluate(o2_worker, scratch, "bcs_search", [polygon], rotation_inputs(ulp_steps(keys, (-1,))))[0]
        assert np.all((at != before).any(axis=1))


def test_coherent_walk_is_independent_of_its_start(o2_worker, scratch):
    """bcs_coherent over a sequence equals bcs_search at every rotation, also across 0/2pi
    and back and forth over record keys."""
    rng = np.random.default_rng(2)
    polygon = ellipse_polygon(rng, 64)
    keys = record_keys(*polygon)
    angles = np.concatenate([ulp_steps(keys[::7], (-1, 0, 1, 0)), [6.2831850, 0.0, 3.0, 6.0, 0.001]])
    rotations = rotation_inputs(angles)
    walk = evaluate(o2_worker, scratch, "bcs_coherent", [polygon], rotations)
    search = evaluate(o2_worker, scratch, "bcs_search", [polygon], rotations)
    assert np.array_equal(walk, search)


def test_oracle_flags_a_wrong_vertex_beyond_rounding():
    """A swapped answer is a mismatch with a margin far beyond the bound; the right one is not."""
    rng = np.random.default_rng(1)
    polygon = ellipse_polygon(rng, 32)
    rotations = rotation_inputs(rng.uniform(0, 2 * np.pi, 50))
    right, _, _ = oracle.judge_polygon(*polygon, rotations["c"], rotations["s"])
    _, ok, margin_ok = oracle.judge_polygon(*polygon, rotations["c"], rotations["s"], right)
    assert not ok.any() and not margin_ok.any()
    wrong = right[:, [2, 3, 0, 1]]
    _, bad, margin = oracle.judge_polygon(*polygon, rotations["c"], rotations["s"], wrong)
    assert bad.all() and (margin > 1e5).all()
    _, bad, margin = oracle.judge_polygon(*polygon, rotations["c"], rotations["s"], np.full_like(right, 99))
    assert bad.all() and np.isinf(margin).all()


def test_oracle_agrees_with_fractions_on_ties_and_near_ties():
    rng = np.random.default_rng(3)
    rows = [("square", square(), rotation_inputs(ulp_steps(np.array([0, np.pi / 2], np.float32), (-1, 0, 1))))]
    octagon = regular_polygon(8, 1.0, 1)
    rows.append(("regular", octagon, rotation_inputs(ulp_steps(record_keys(*octagon), (-1, 0, 1)))))
    cases = polygon_cases(FAMILY, rows)
    FAMILY.self_check(cases, rng, len(cases))


def test_turning_sector_lookup_contains_the_tight_box():
    """Every side of the looked-up box contains the tight sector box, for half-angles from
    1e-3 to pi - 1e-3, r from 1e-3 to 1e6, facing angles at and next to every key."""
    rng = np.random.default_rng(11)
    worst, unpadded_short = 0.0, 0
    thetas = [*rng.uniform(1e-3, np.pi - 1e-3, 30), np.pi / 2, np.pi / 4, 1e-3, np.pi - 1e-3, 2.0]
    for theta in np.array(thetas, np.float32):
        r = np.float32(10.0 ** rng.uniform(-3, 6))
        keys, codes = turning.build_table(theta)
        phi = np.concatenate([rng.uniform(0, 2 * np.pi, 200), ulp_steps(keys[1:-1], (-2, -1, 0, 1, 2))])
        phi = np.asarray(phi, np.float32)
        phi = phi[phi.astype(np.float64) < 2 * np.pi]
        box = turning.lookup_box(keys, codes, r, theta, phi)
        assert turning.contains(box, r, theta, phi).all(), theta
        assert turning.contains(turning.direct_box(r, theta, phi), r, theta, phi).all(), theta
        worst = max(worst, float(turning.excess(box, r, theta, phi).max()))
        unpadded = box - np.float32(float(r) * turning.PAD_LOOKUP) * np.array([1, 1, -1, -1], np.float32)
        unpadded_short += int(turning.cuts(unpadded, r, theta, phi).sum())
    # the box exceeds the tight box by its pad (16 units of r 2^-24) plus rounding
    assert worst < 24
    # without the pad, rounding cuts the sector: the pad is needed
    assert unpadded_short > 0


def test_cli_run_and_verify(tmp_path):
    runner = CliRunner()
    out = runner.invoke(main, ["run", "--scene", "polygons8", "-n", "3", "-m", "40", "--repeat", "1", "--flags", "-O2"])
    assert out.exit_code == 0, out.output
    assert "bcs_coherent" in out.output
    out = runner.invoke(
        main, ["verify", "--family", "aabr", "--cases", "100", "--kernels", "scan,bcs_search", "--flags", "-O2"]
    )
    assert out.exit_code == 0, out.output


@pytest.mark.parametrize("kind", ["polygons", "polygons-coherent", "regular", "polygons1024"])
def test_scenes_are_reproducible(kind):
    from sectorbench.families import scene_kinds as scenes

    a, b = scenes.generate(kind, 3, 20, 7), scenes.generate(kind, 3, 20, 7)
    assert a.digest() == b.digest()
    assert scenes.generate(kind, 3, 20, 8).digest() != a.digest()


def test_hill_survives_fma_contraction():
    """-march=native lets the compiler fuse a*b - c*d into an FMA, whose sign is not
    antisymmetric: hill's half-plane tests then misplace e0 itself (margins of 1.7e7
    before its products were pinned)."""
    from sectorbench.native.build import BuildConfig

    native = BuildConfig.parse("-O3 -march=native")
    result = verify(VerifyConfig(family="aabr", cases=200, kernels=("hill",), builds=(native,)))
    assert result.passed and result.kernels[0].mismatches["logic-bug"] == 0, result.kernels[0].failing[:2]


def test_verify_input_files_are_refused_with_a_reason(tmp_path):
    path = tmp_path / "cases.npz"
    np.savez(path, poly=np.zeros(1, np.float32))
    out = CliRunner().invoke(main, ["verify", "--family", "aabr", "--input", str(path), "--flags", "-O2"])
    assert out.exit_code == 2 and "reads no case files" in out.output, out.output
