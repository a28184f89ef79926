"""verify has teeth: it passes the shipped kernels and catches deliberately broken ones."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import needs_gcc

from sectorbench import families
from sectorbench.check.verify import VerifyConfig, verify
from sectorbench.cli import main
from sectorbench.families.base import MAX_BLOCK
from sectorbench.families.sector import oracle as sector_oracle
from sectorbench.families.triangle.cases import ARTICLE_TRIANGLE
from sectorbench.measure.deadlines import ROW_COUNT_SHAPES_MAX
from sectorbench.model.cases import ulp_step
from sectorbench.model.results import SCHEMA_VERSION
from sectorbench.native.build import BuildConfig

DATA = Path(__file__).parent / "data"
BROKEN = BuildConfig.parse("-O2", extra_sources=(DATA / "broken_kernels.c",))
CASES = 1500


@pytest.fixture(scope="module")
def broken_result():
    kernels = ("radius_le", "missing_sign_case", "apex_inside", "naive_unclamped", "lane_dependent")
    return {k.kernel: k for k in verify(VerifyConfig(kernels=kernels, builds=(BROKEN,), cases=CASES, show=5)).kernels}


@pytest.mark.parametrize("family", ["sector", "triangle"])
def test_shipped_kernels_pass_on_the_default_build(family):
    result = verify(VerifyConfig(family=family, cases=CASES))
    assert result.kernels and result.passed, [(k.kernel, k.verdict, k.mismatches) for k in result.kernels]
    for k in (k for k in result.kernels if k.status == "ok"):  # not the ones this CPU cannot run
        assert k.mismatches["logic-bug"] == 0 and k.mismatches["special-value"] == 0
        assert k.worst_margin is None or k.worst_margin <= k.rounding_bound


@pytest.mark.parametrize("kernel", ["radius_le", "missing_sign_case", "apex_inside", "naive_unclamped"])
def test_broken_kernels_are_caught_as_logic_bugs(broken_result, kernel):
    verdict = broken_result[kernel]
    assert verdict.verdict == "FAIL"
    assert verdict.mismatches["logic-bug"] > 0
    assert any(row["class"] == "logic-bug" for row in verdict.failing)
    assert all(row["class"] in ("logic-bug", "special-value") for row in verdict.failing)


def test_radius_le_fails_exactly_on_the_arc(broken_result):
    groups = {row["group"] for row in broken_result["radius_le"].failing}
    assert groups & {"exact arc", "metamorphic: swap x,y", "metamorphic: negate", "metamorphic: rotate 90°"}


def test_apex_rule_fails_at_the_apex(broken_result):
    assert any(row["group"] == "exact apex" for row in broken_result["apex_inside"].failing)


def test_lane_dependence_is_nondeterministic(broken_result):
    verdict = broken_result["lane_dependent"]
    assert verdict.verdict == "FAIL" and verdict.mismatches["nondeterministic"] > 0


def test_recast_dot_caught_on_the_article_case():
    result = verify(VerifyConfig(family="triangle", kernels=("recast_dot", "recast_cross"), cases=200, show=10**6))
    by_name = {k.kernel: k for k in result.kernels}
    article_rows = [row for row in by_name["recast_dot"].failing if row["group"] == "article case"]
    assert len(article_rows) == 1
    row = article_rows[0]
    assert row["class"] == "logic-bug" and row["kernel"] == "outside" and row["oracle"] == "inside"
    assert not any(row["group"] == "article case" for row in by_name["recast_cross"].failing)
    assert by_name["recast_dot"].verdict == "FAIL" and by_name["recast_cross"].verdict != "FAIL"


def test_user_cases_from_npz(tmp_path):
    f32 = {k: np.array([v], dtype=np.float32) for k, v in ARTICLE_TRIANGLE.items()}
    cases = tmp_path / "cases.npz"
    np.savez(cases, **f32)
    result = verify(VerifyConfig(family="triangle", kernels=("recast_dot", "orient"), input_path=cases, show=5))
    by_name = {k.kernel: k for k in result.kernels}
    assert result.cases == 1 and result.seed is None
    assert by_name["recast_dot"].verdict == "FAIL" and by_name["orient"].verdict == "exact"


def test_cli_exit_codes_and_hex_output(tmp_path):
    runner = CliRunner()
    ok = runner.invoke(main, ["verify", "--cases", "300"])
    assert ok.exit_code == 0, ok.output
    assert "rounding-band" in ok.output
    out = tmp_path / "verify.json"
    failed = runner.invoke(
        main,
        [
            "verify",
            "--cases",
            "300",
            "--source",
            str(DATA / "broken_kernels.c"),
            "--kernels",
            "radius_le,basic",
            "--show",
            "2",
            "--json",
            str(out),
        ],
    )
    assert failed.exit_code == 1, failed.output
    assert "FAIL" in failed.output and "0x1." in failed.output  # exact hex floats
    data = json.loads(out.read_text())
    assert data["kind"] == "verify" and data["schema"] == SCHEMA_VERSION
    failing = next(k for k in data["kernels"] if k["kernel"] == "radius_le")["failing"]
    assert len(failing) == 2
    # the hex floats are the row's exact float32 inputs: the same cases, regenerated, hold them
    cases = families.get("sector").cases(300, 0)
    for row in failing:
        for name, text in row["inputs"].items():
            value = cases.columns[name][row["row"]]
            assert np.float32(float.fromhex(text)).tobytes() == value.tobytes() or (np.isnan(value) and text == "nan")


@pytest.mark.parametrize(
    "args,fragment",
    [
        # an unknown family: a name no family will take (a circle family made this exit 0)
        (["verify", "--family", "no_such_family"], "no_such_family"),
        (["verify", "--cases", "0"], "--cases"),
        (["verify", "--family", "sector", "--kernels", "orient"], "not of the sector family"),
        (["verify", "--show", "-1"], "--show"),
        (["verify", "--input", "/no/such/file.npz"], "does not exist"),
        (["verify", "--input", __file__, "--cases", "5"], "--cases"),  # it would be ignored
    ],
)
def test_cli_bad_input(args, fragment):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and fragment in result.output


def test_npz_missing_arrays_is_a_usage_error(tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, px=np.zeros(3, dtype=np.float32))
    result = CliRunner().invoke(main, ["verify", "--input", str(bad)])
    assert result.exit_code == 2 and "missing arrays" in result.output


def test_oracle_self_check_failure_is_an_internal_error(monkeypatch):
    """A fast path that disagrees with Fraction arithmetic must stop verify (exit 2)."""
    original = sector_oracle._float_terms

    def wrong_sign(*columns):
        g, G = original(*columns)
        return -g, G

    monkeypatch.setattr(sector_oracle, "_float_terms", wrong_sign)
    result = CliRunner().invoke(main, ["verify", "--cases", "200"])
    assert result.exit_code == 2 and "self-check" in result.output


def test_ulp_step_walks_representable_values():
    x = np.array([1.0, -1.0, 0.0, -0.0], dtype=np.float32)
    assert np.array_equal(ulp_step(x, 1), np.nextafter(x, np.float32(np.inf)))
    assert np.array_equal(ulp_step(ulp_step(x, 5), -5), np.where(x == 0, np.float32(0), x))


def exact_construction_file(tmp_path, group: str, limit: int) -> Path:
    """A user's --input file holding the first `limit` rows of one exact construction."""
    cases = families.get("sector").cases(200, 0)
    rows = np.flatnonzero(cases.group == group)[:limit]
    names = ("cx", "cy", "ux", "uy", "r2", "cos_theta", "px", "py")
    path = tmp_path / f"{group.replace(' ', '_')}.npz"
    np.savez(path, **{name: cases.columns[name][rows] for name in names})
    return path


@pytest.mark.parametrize("group,limit,broken", [("exact arc", 260, "radius_le"), ("exact apex", 60, "apex_inside")])
def test_input_rows_are_judged_by_arithmetic_not_by_tag(tmp_path, group, limit, broken):
    """Rows from --input carry no tag: exactness is recognised from their values alone."""
    path = exact_construction_file(tmp_path, group, limit)
    result = verify(VerifyConfig(kernels=(broken, "basic"), builds=(BROKEN,), input_path=path, show=1))
    by_name = {k.kernel: k for k in result.kernels}
    assert result.cases == limit
    assert by_name[broken].verdict == "FAIL" and by_name[broken].mismatches["logic-bug"] > 0
    assert by_name["basic"].verdict == "exact"


def test_angle_ge_caught_on_exact_edge_input(tmp_path):
    path = exact_construction_file(tmp_path, "exact edge", 200)
    build = BuildConfig.parse("-O2", extra_sources=(DATA / "mutants.c",))
    result = verify(VerifyConfig(kernels=("m_angle_ge", "sse2_nosqrt"), builds=(build,), input_path=path))
    by_name = {k.kernel: k for k in result.kernels}
    assert by_name["m_angle_ge"].mismatches["logic-bug"] > 0 and by_name["sse2_nosqrt"].verdict == "exact"


def test_the_result_does_not_depend_on_the_batch_size():
    """Cases stream in batches to bound memory; one block per batch must give the same answer."""
    from sectorbench.model.cases import BLOCK_ROWS

    config = VerifyConfig(kernels=("radius_le", "lane_dependent", "basic"), builds=(BROKEN,), cases=CASES, show=3)
    whole = verify(config)
    streamed = verify(dataclasses.replace(config, batch_rows=BLOCK_ROWS))
    assert streamed.cases == whole.cases and streamed.groups == whole.groups
    assert [dataclasses.asdict(k) for k in streamed.kernels] == [dataclasses.asdict(k) for k in whole.kernels]


def test_absurd_case_counts_are_refused_before_anything_is_built():
    result = CliRunner().invoke(main, ["verify", "--cases", "1000000000000"])
    assert result.exit_code == 2 and "hours" in result.output and len(result.output.strip().splitlines()) == 1


def test_loop_check_catches_a_lane_dependent_kernel(broken_result):
    assert broken_result["lane_dependent"].loop_checks > 0


BLIND_SPOTS = BuildConfig.parse("-O2", extra_sources=(DATA / "loop_blind_spots.c",))


@pytest.mark.parametrize(
    "kernel, where, problem",
    [
        ("unrolled_typo", "uniform scene 64 x 4096", "count_inline counts"),
        ("narrow_counter", "uniform scene 64 x 4096", "count_inline counts"),
        # met first on the case rows of radius over 4, counted by the count loops
        ("clamped_count", "", "of 3 copies"),
        ("counting_twin", "M=1", "noop_inline counts"),
    ],
)
def test_loops_wrong_only_beyond_the_small_scenes_fail(blind_result, kernel, where, problem):
    """Each passed verify (its evaluation loops are right, and the small loop scenes have 5
    shapes, at most 1 003 points, radii up to 4 and no NoOperation check) while run counted
    wrong hits or subtracted a NoOperation that counted."""
    verdict = blind_result[kernel]
    assert verdict.verdict == "FAIL" and verdict.mismatches["logic-bug"] > 0, verdict
    assert any(where in row["group"] and problem in row["kernel"] for row in verdict.failing), verdict.failing


def test_count_loops_are_judged_on_every_case_row(blind_result):
    """It passed verify: only the pairs loop met the cases' boundary points, and its count and
    grid loops take them for inside.  Every case row is now counted by each count loop, and
    judged against the oracle as the pairs loop's answer is: an exact row is a logic bug."""
    verdict = blind_result["boundary_count"]
    assert verdict.verdict == "FAIL" and verdict.mismatches["logic-bug"] > 0, verdict
    wrong = [row for row in verdict.failing if "count_inline counts 3 of 3 copies" in row["kernel"]]
    assert wrong and all(row["class"] == "logic-bug" and row["oracle"] == "outside" for row in wrong), verdict.failing
    assert all(row["kernel"].startswith("outside;") for row in wrong), wrong  # its pairs loop was right


def test_a_count_loops_blocked_body_is_judged_on_every_case_row(blind_result):
    """It passed verify: each case row was counted as a scene of one shape, which a loop over 4
    shapes a load takes through its left-over path only, and its 4-shape body takes the arc for
    inside.  A row is now counted over a whole block of copies of its shape and one more."""
    verdict = blind_result["blocked_body"]
    assert verdict.verdict == "FAIL" and verdict.mismatches["logic-bug"] > 0, verdict
    wrong = [row for row in verdict.failing if "count_inline counts" in row["kernel"]]
    assert wrong and all(row["oracle"] == "outside" and row["kernel"].startswith("outside;") for row in wrong), wrong
    # 5 shapes (a block of 4 and one left over) x 3 points: the 4-shape body's 12 tests inside
    assert any("counts 12 of 15 copies" in row["kernel"] for row in wrong), wrong
    assert ROW_COUNT_SHAPES_MAX == MAX_BLOCK + 1  # the widest block a row may declare, and one more


def test_a_count_loop_wrong_from_a_scenes_second_call_is_nondeterministic(blind_result):
    """It passed verify: each count loop ran once a scene, and it is one hit over from the
    second call on the same scene.  Each case row is counted twice."""
    verdict = blind_result["second_call"]
    assert verdict.verdict == "FAIL" and verdict.mismatches["nondeterministic"] > 0, verdict
    assert any(row["class"] == "nondeterministic" for row in verdict.failing), verdict.failing


def test_the_loop_checks_pass_the_shipped_kernels_beside_them(blind_result):
    assert blind_result["basic"].verdict != "FAIL" and blind_result["basic"].mismatches["logic-bug"] == 0
    assert blind_result["basic"].mismatches["nondeterministic"] == 0


@pytest.fixture(scope="module")
def blind_result():
    kernels = ("unrolled_typo", "narrow_counter", "clamped_count", "counting_twin", "boundary_count", "second_call")
    kernels += ("blocked_body", "basic")
    result = verify(VerifyConfig(kernels=kernels, builds=(BLIND_SPOTS,), cases=500, show=40, jobs=1))
    return {v.kernel: v for v in result.kernels}


@pytest.mark.parametrize("flags, fails", [("-O2", True), ("-O2 -ffast-math", False)])
def test_denormal_guards_fail_where_subnormals_are_honoured_only(flags, fails):
    """A subnormal r² taken for an empty sector, a subnormal |D|² for the apex: wrong only on
    the "subnormal lengths" rows, special values (FTZ does the same to a fast-math build's
    |D|², which therefore does not fail there: basic passes)."""
    build_config = BuildConfig.parse(flags, extra_sources=(DATA / "subnormal_guards.c",))
    result = verify(VerifyConfig(kernels=("guards_r2", "guards_d", "basic"), builds=(build_config,), cases=500))
    verdicts = {v.kernel: v for v in result.kernels}
    for guard in ("guards_r2", "guards_d"):
        assert verdicts[guard].mismatches["special-value"] > 0, verdicts[guard]
        assert (verdicts[guard].verdict == "FAIL") is fails
    assert verdicts["basic"].verdict != "FAIL"


@needs_gcc
def test_a_subnormal_square_of_a_normal_length_is_a_special_value(tmp_path):
    """Seed 3's "scale 2^8" copy: |D|² is normal (1.05 x 2^-126) but dx² is not, so FTZ zeroes
    both squares, and a correct naive built with -ffast-math answered outside: a logic bug,
    FAIL (polar and lut too).  A subnormal intermediate is a special value, tolerated for a
    fast-math build; at -O2, which honours subnormals, the same row is answered right.  Built
    with gcc, whose -ffast-math library switches FTZ on as it loads (clang's does not)."""
    row = {"cx": "0x0p+0", "cy": "0x0p+0", "ux": "0x1.e93eacp-1", "uy": "-0x1.2de25ap-2"}
    row |= {"r": "0x1.cb02b2p+7", "theta": "0x1.5688d8p+1", "px": "0x1.f37948p-64", "py": "-0x1.c23e78p-66"}
    columns = {name: np.array([float.fromhex(value)], dtype=np.float32) for name, value in row.items()}
    columns |= {"r2": columns["r"] * columns["r"], "cos_theta": np.cos(columns["theta"]).astype(np.float32)}
    path = tmp_path / "ftz.npz"
    np.savez(path, **columns)
    for flags, special in (("-O2 -ffast-math", 1), ("-O2", 0)):
        config = VerifyConfig(kernels=("naive",), builds=(BuildConfig.parse(flags, cc="gcc"),), input_path=path)
        (naive,) = verify(config).kernels
        assert naive.verdict != "FAIL" and naive.mismatches["logic-bug"] == 0, (flags, naive)
        assert naive.mismatches["special-value"] == special, (flags, naive)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_needle_and_near_pi_cones_are_checked(seed):
    """Kernels wrong only for half-angles within ~0.009 rad of 0 or π (no random θ, and no
    random point, reached them; `run` counted −89 and +8 hits) fail on the extreme half-angle
    rows as logic bugs; basic passes beside them."""
    mutants = ("needle_blind", "near_pi_disc")
    _assert_caught_by("extreme_half_angles.c", mutants, "extreme half-angles", ("basic",), seed)


def _assert_caught_by(source: str, mutants: tuple, group: str, correct: tuple, seed: int) -> None:
    """Each mutant of `source` fails verify with a logic bug among the rows of `group`; the
    correct kernels beside them pass with none."""
    build_config = BuildConfig.parse("-O2", extra_sources=(DATA / source,))
    kernels = (*mutants, *correct)
    result = verify(VerifyConfig(kernels=kernels, builds=(build_config,), cases=300, seed=seed, show=1000, jobs=1))
    verdicts = {v.kernel: v for v in result.kernels}
    for mutant in mutants:
        assert verdicts[mutant].verdict == "FAIL", verdicts[mutant]
        assert any(row["group"] == group and row["class"] == "logic-bug" for row in verdicts[mutant].failing)
    for name in correct:
        assert verdicts[name].verdict != "FAIL" and verdicts[name].mismatches["logic-bug"] == 0


LONG_BLIND_SPOTS = BuildConfig.parse("-O2", extra_sources=(DATA / "long_loop_blind_spots.c",))


@pytest.fixture(scope="module")
def long_blind_result():
    kernels = ("tile_drop", "unrolled_128", "short_index", "basic", "sse2_nosqrt", "avx2_nosqrt_b4")
    result = verify(VerifyConfig(kernels=kernels, builds=(LONG_BLIND_SPOTS,), cases=300, show=40, jobs=1))
    return {v.kernel: v for v in result.kernels}


@pytest.mark.parametrize(
    "kernel, where",
    [
        ("tile_drop", "long scene 2 x 66037"),
        ("unrolled_128", "long scene 1003 x 37"),
        ("short_index", "long scene 2 x 66037"),
    ],
)
def test_loops_wrong_only_on_long_scenes_fail(long_blind_result, kernel, where):
    """Each passed verify (loop scenes of at most 64 shapes and 4 096 points) while run's
    default 1 000 x 100 000 counted wrong: a dropped partial tile of 8 192 points, shapes
    unrolled by 128 with one skipped, a 16-bit point index."""
    verdict = long_blind_result[kernel]
    assert verdict.verdict == "FAIL" and verdict.mismatches["logic-bug"] > 0, verdict
    assert any(where in row["group"] and "count_inline counts" in row["kernel"] for row in verdict.failing)


def test_the_long_scenes_pass_the_shipped_kernels(long_blind_result):
    for name in ("basic", "sse2_nosqrt", "avx2_nosqrt_b4"):
        verdict = long_blind_result[name]
        if verdict.status == "ok":  # not the ones this CPU cannot run
            assert verdict.verdict != "FAIL" and verdict.mismatches["logic-bug"] == 0, verdict


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_unit_u_contract_keeps_the_boundary_mutants_caught(seed):
    """m_edge_ge_wide and m_tiny_radius with only `.contract = "unit u"` added passed verify
    (every exact cell row had |u| ~2^-9 from 1, outside the contract); the unit-u cells catch
    them as logic bugs, and the unit-u kernels that measure the angle pass beside them."""
    mutants, correct = ("u_edge_ge_wide", "u_tiny_radius"), ("localframe", "cross", "polar")
    _assert_caught_by("unit_u_mutants.c", mutants, "exact cells, unit u", correct, seed)


@pytest.mark.parametrize(
    "family, kernel, correct, capped",
    [
        ("sector", "ignores_angle", "lut", ("tolerance of 10 rad",)),
        ("triangle", "always_inside", "recast_cross", ("rounding bound of 1e+30", "tolerance of 1e+30")),
        ("aabr", "vertex_zero", "scan", ("rounding bound of 1e+30",)),
    ],
)
def test_a_declared_bound_or_tolerance_cannot_excuse_anything(family, kernel, correct, capped):
    """A probe's kernels, wrong by logic, passed by declaring enough (a sector kernel with no
    angle test and tolerance 10, a triangle `return 1` with tolerance and bound 1e30 under
    fast-math, an aabr kernel naming vertex 0 with bound 1e30: 'rounding-band', worst margin
    1.68e7).  Each is judged at its family's caps, says so, and fails; the tolerant and
    default-bound kernels beside them pass, their tolerance shown."""
    build_config = BuildConfig.parse("-O2 -ffast-math", extra_sources=(DATA / "over_declared.c",))
    result = verify(VerifyConfig(family=family, kernels=(kernel, correct), builds=(build_config,), cases=300, jobs=1))
    verdicts = {v.kernel: v for v in result.kernels}
    fam = families.get(family)
    wrong = verdicts[kernel]
    assert wrong.verdict == "FAIL" and wrong.mismatches["logic-bug"] > 0, wrong
    assert wrong.rounding_bound <= fam.max_rounding_bound
    assert fam.max_tolerance is None or wrong.tolerance <= fam.max_tolerance
    for words in capped:
        assert any(words in note and "over the" in note for note in wrong.notes), wrong.notes
    assert verdicts[correct].verdict != "FAIL"
    if fam.max_tolerance is not None:
        assert any(note.startswith("tolerance ") for note in verdicts[correct].notes), verdicts[correct].notes


def test_a_declaration_out_of_range_makes_its_row_an_error():
    """A --source row declaring a rounding bound of -5 had verify FAIL a correct kernel on 707
    rows, one declaring a NaN tolerance showed "tolerance nan rad", a blocking factor of 16 can
    overflow its block's 32-bit hit count, 4096 lanes had verify check 8193 tail lengths and
    4095 shifts for every kernel beside it (hours): each row is an error saying why, the others
    judged."""
    build_config = BuildConfig.parse("-O2", extra_sources=(DATA / "over_declared.c",))
    named = ("declares_negative_bound", "declares_nan_tolerance", "declares_block_16", "declares_lanes_65", "basic")
    verdicts = {v.kernel: v for v in verify(VerifyConfig(kernels=named, builds=(build_config,), cases=300)).kernels}
    reasons = {
        "declares_negative_bound": "row error: .rounding_bound = -5: it must be 0 (the family's default) or more",
        "declares_nan_tolerance": "row error: .tolerance = nan: it must be 0 (the family's default) or more",
        "declares_block_16": "row error: blocking factor 16: it must be from 1 to 8",
        "declares_lanes_65": "row error: 65 lanes: it must be from 1 to 64",
    }
    for name, reason in reasons.items():
        assert verdicts[name].status != "ok" and verdicts[name].reason == reason, verdicts[name]
    assert verdicts["basic"].status == "ok" and verdicts["basic"].verdict != "FAIL"


@pytest.mark.parametrize("flags", ["-O2", "-O2 -ffast-math"])
def test_triangles_with_coincident_vertices_are_checked(flags):
    """Only collinear degenerate triangles (c = 2b − a) were generated, so a kernel holding the
    point a in a triangle with a = b = c passed; the coincident-vertex rows catch it as a logic
    bug, and the shipped kernels pass on them."""
    build_config = BuildConfig.parse(flags, extra_sources=(DATA / "mutants.c",))
    kernels = ("t_point_triangle", "orient", "recast_cross")
    result = verify(VerifyConfig(family="triangle", kernels=kernels, builds=(build_config,), cases=300, show=1000))
    verdicts = {v.kernel: v for v in result.kernels}
    assert verdicts["t_point_triangle"].verdict == "FAIL"
    assert any(
        row["group"] == "exact coincident vertices" and row["class"] == "logic-bug"
        for row in verdicts["t_point_triangle"].failing
    )
    for correct in kernels[1:]:
        assert verdicts[correct].verdict != "FAIL" and verdicts[correct].mismatches["logic-bug"] == 0
