"""verify calls every loop as `run` calls it (split shape ranges), and reads case files as users keep them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from sectorbench import families
from sectorbench.check.verify import VerifyConfig, read_input, shape_splits, verify
from sectorbench.cli import main
from sectorbench.errors import SectorbenchError
from sectorbench.families.triangle.cases import ARTICLE_TRIANGLE
from sectorbench.measure.messages import LoopRef
from sectorbench.measure.worker import Worker
from sectorbench.model.split import shape_ranges
from sectorbench.native.build import BuildConfig, build

DATA = Path(__file__).parent / "data"
MUTANTS = BuildConfig.parse("-O2", extra_sources=(DATA / "mutants.c",))


def test_shape_splits_are_run_splits_uneven_ones_and_ones_inside_a_block():
    n, block = 19, 8
    splits = shape_splits(n, block)
    for parts in (2, 3, 4):
        assert splits[f"--threads {parts}"] == shape_ranges(n, parts)
    for name, ranges in splits.items():  # each covers [0, N) with contiguous, non-empty ranges
        assert ranges[0][0] == 0 and ranges[-1][1] == n, name
        assert all(end == begin for (_, end), (begin, _) in zip(ranges, ranges[1:])), name
        assert all(b < e for b, e in ranges), name
    starts = {b for ranges in splits.values() for b, _ in ranges}
    assert any(b % block for b in starts)  # a range that starts inside a block
    sizes = [sorted(e - b for b, e in ranges) for ranges in splits.values()]
    assert any(s[0] == 1 and s[-1] == n - 1 for s in sizes)  # an uneven split


def test_worker_loops_over_a_shape_range(tmp_path):
    """sample and evaluate over a shape range: the parts add up, the range's grid rows are the whole's."""
    family = families.get("sector")
    scene = family.loop_scene(19, 47, np.random.default_rng(3))
    with Worker(build(BuildConfig())) as worker:
        worker.load(scene, tmp_path)
        whole = worker.sample(LoopRef("basic"), calls=1).hits
        grid = worker.evaluate("basic")
        parts = [
            worker.sample(LoopRef("basic", mode, shapes=(b, e)), calls=1).hits
            for mode in ("inline", "call")
            for b, e in shape_ranges(19, 3)
        ]
        share = worker.evaluate("basic", shapes=(5, 12))
    assert whole == int(grid.sum()) > 0
    assert sum(parts[:3]) == sum(parts[3:]) == whole
    assert np.array_equal(share, grid[5:12])


def test_a_count_loop_ignoring_its_shape_range_fails():
    """m_ignores_range counts [0, N) whatever its share: right over all shapes, wrong over a split."""
    result = verify(VerifyConfig(kernels=("m_ignores_range", "basic"), builds=(MUTANTS,), cases=200, show=50))
    by_name = {k.kernel: k for k in result.kernels}
    bad = by_name["m_ignores_range"]
    assert bad.verdict == "FAIL" and bad.mismatches["logic-bug"] > 0
    loop_rows = [row for row in bad.failing if row["group"].startswith("loop check")]
    assert loop_rows and all("shapes [" in row["group"] or "split" in row["group"] for row in loop_rows)
    assert any("split --threads 2" in row["group"] for row in loop_rows)  # the parts do not add up
    assert by_name["basic"].verdict != "FAIL"
    assert by_name["basic"].loop_checks == bad.loop_checks > 0


def test_the_broadphase_narrow_phase_is_checked():
    """The family's broadphases run their narrow phase over candidate lists on 1..3 threads:
    the kernel whose predicate they run gets those checks on top of its own loops."""
    family = families.get("sector")
    with Worker(build(BuildConfig())) as worker:
        worker.load(family.loop_scene(5, 300, np.random.default_rng(0)), Path("/tmp"))
        narrow = worker.sample(LoopRef("grid"), calls=1).extras.narrow_phase
    twin = "sse2_nosqrt" if narrow != "sse2_nosqrt" else "avx2_nosqrt"
    result = verify(VerifyConfig(kernels=(narrow, twin), cases=100))
    by_name = {k.kernel: k for k in result.kernels}
    kinds = [kind for kind in family.broadphases() if kind != "none"]
    assert by_name[narrow].verdict != "FAIL"
    assert by_name[narrow].loop_checks - by_name[twin].loop_checks == 3 * len(kinds)


# ---------------------------------------------------------------- case files as users keep them


def triangle_file(tmp_path, **extra) -> Path:
    """The article's triangle case, three times, with extra columns."""
    columns = {k: np.full(3, v, dtype=np.float32) for k, v in ARTICLE_TRIANGLE.items()}
    path = tmp_path / "cases.npz"
    np.savez(path, **columns, **extra)
    return path


@pytest.mark.parametrize("form", ["bool", "int", "words"])
def test_expected_column_that_agrees_is_accepted(tmp_path, form):
    family = families.get("triangle")
    plain = family.input_cases(triangle_file(tmp_path))
    answer = family.reference(plain, _nominal()).answer
    values = {"bool": answer, "int": answer.astype(np.int64), "words": np.where(answer, "inside", "outside")}[form]
    case_set = read_input(family, triangle_file(tmp_path, expected=values))
    assert np.array_equal(case_set.expected, answer)


def _nominal():
    return families.get("triangle").nominal_kernel()


def test_expected_column_that_disagrees_is_a_case_file_error(tmp_path):
    family = families.get("triangle")
    answer = family.reference(family.input_cases(triangle_file(tmp_path)), _nominal()).answer
    wrong = answer.copy()
    wrong[1] = not wrong[1]
    path = triangle_file(tmp_path, expected=wrong, name=np.array(["first", "second", "third"]))
    with pytest.raises(SectorbenchError, match="disagrees with the oracle on 1 of 3 rows; first: row 1 .name 'second'"):
        read_input(family, path)
    result = CliRunner().invoke(main, ["verify", "--family", "triangle", "--input", str(path)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "disagrees with the oracle" in result.output and "row 1" in result.output


def sector_file(tmp_path, **columns) -> Path:
    """Three sector rows (apex 0, u along x, a point at (1.5, 0)), with `columns` given too."""
    rows = {"cx": 0.0, "cy": 0.0, "ux": 1.0, "uy": 0.0, "px": 1.5, "py": 0.0}
    path = tmp_path / "sectors.npz"
    np.savez(path, **{k: np.full(3, v, dtype=np.float32) for k, v in rows.items()}, **columns)
    return path


def test_both_size_pairs_must_agree_in_a_sector_case_file(tmp_path):
    """r2 1, cos_theta 0.5 beside r 2, theta 0.1 on row 1 was accepted: the oracle judged the
    r2 pair and naive, which reads r, theta and is right on them, failed as a logic bug."""
    theta = np.float32([1.0, 0.1, 1.0])
    agreeing = {"r2": np.float32([4, 4, 4]), "cos_theta": np.cos(theta.astype(np.float64)).astype(np.float32)}
    given = {**agreeing, "r": np.float32([2, 2, 2]), "theta": theta}
    assert len(read_input(families.get("sector"), sector_file(tmp_path, **given))) == 3  # agreeing: accepted
    stale = {**given, "r2": np.float32([4, 1, 4])}
    with pytest.raises(SectorbenchError, match="r disagrees with r2, cos_theta at row 1: 1.0 there, 4.0 from r 2.0"):
        read_input(families.get("sector"), sector_file(tmp_path, **stale))
    r_theta_first = {"r": given["r"], "theta": theta, "cos_theta": np.float32([0.5, 0.5, 0.5])}  # no r2: from r, theta
    result = CliRunner().invoke(main, ["verify", "--input", str(sector_file(tmp_path, **r_theta_first))])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "cos_theta disagrees with r, theta at row 0" in result.output


@pytest.mark.parametrize(
    "values,fragment",
    [(np.array([0, 1, 2]), "row 2 is 2"), (np.array(["inside", "in", "outside"]), "row 1 is 'in'")],
)
def test_expected_column_of_other_values_is_one_clear_line(tmp_path, values, fragment):
    result = CliRunner().invoke(
        main, ["verify", "--family", "triangle", "--input", str(triangle_file(tmp_path, expected=values))]
    )
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1 and fragment in result.output


@pytest.mark.parametrize("dtype", [str, object])
def test_labels_are_carried_into_the_failure_report(tmp_path, dtype):
    labels = np.array(["bug #12", "bug #13", "bug #14"], dtype=dtype)
    path = triangle_file(tmp_path, ticket=labels)
    result = verify(VerifyConfig(family="triangle", kernels=("recast_dot", "orient"), input_path=path, show=5))
    failing = next(k for k in result.kernels if k.kernel == "recast_dot").failing
    rows = [row for row in failing if row["row"] is not None]  # then its loop checks', which fail too
    assert failing[: len(rows)] == rows  # the file's rows first
    assert [row["labels"] for row in rows] == [{"ticket": f"bug #{n}"} for n in (12, 13, 14)]
    shown = CliRunner().invoke(
        main, ["verify", "--family", "triangle", "--kernels", "recast_dot", "--input", str(path), "--show", "2"]
    )
    assert shown.exit_code == 1 and "ticket=bug #12" in shown.output and "ticket=bug #14" not in shown.output


class Payload:
    """An object a hostile case file would have unpickled (it never is)."""

    def __reduce__(self):
        return (print, ("unpickled!",))


def test_an_object_column_is_read_without_running_its_pickle(tmp_path, capfd):
    path = tmp_path / "cases.npz"
    columns = {k: np.full(2, v, dtype=np.float32) for k, v in ARTICLE_TRIANGLE.items()}
    np.savez(path, **columns, note=np.array([Payload(), "x"], dtype=object))
    result = CliRunner().invoke(main, ["verify", "--family", "triangle", "--input", str(path)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "'note'" in result.output and "unpickled!" not in capfd.readouterr().out


def test_other_unusable_columns_still_get_one_clear_line(tmp_path):
    path = triangle_file(tmp_path, weight=np.array([1 + 2j, 0, 1]))
    result = CliRunner().invoke(main, ["verify", "--family", "triangle", "--input", str(path)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1 and "'weight'" in result.output
