"""sectorbench.verify(...) from a test suite: a value to assert on, with a readable message."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import sectorbench
from sectorbench.check.api import Report

DATA = Path(__file__).parent / "data"


def test_a_correct_kernel_passes():
    report = sectorbench.verify(source=DATA / "correct_variants.c", kernels="c_sector_double", cases=500, seed=1)
    assert isinstance(report, Report) and report.passed, report.summary()
    kernel = report.kernel("c_sector_double")
    assert kernel.passed and kernel.verdict in ("exact", "rounding-band") and kernel.cases == report.cases > 0
    assert kernel.mismatches["logic-bug"] == 0 and kernel.loop_checks > 0 and kernel.failing == []


def test_a_logic_bug_fails_with_a_readable_message():
    """The README's five-line test, on a mutant: the assertion message names the kernel, the bug
    class and the first failing rows as exact hex floats that float.fromhex reads back."""
    report = sectorbench.verify(
        source=str(DATA / "mutants.c"), kernels=["m_angle_ge", "sse2_nosqrt"], cases=500, show=2
    )
    with pytest.raises(AssertionError) as failure:
        assert report.passed, report.summary()
    message = str(failure.value)
    assert message.startswith("sectorbench.verify FAILED: sector family")
    assert "m_angle_ge [-O2]: FAIL" in message and "sse2_nosqrt [-O2]: FAIL" not in message
    bad = report.kernel("m_angle_ge")
    assert not bad.passed and bad.mismatches["logic-bug"] > 0 and len(bad.failing) == 2
    for row in bad.failing:
        assert all(float.fromhex(text) == float.fromhex(text) for text in row["inputs"].values())  # not NaN
        line = " ".join(f"{k}={v}" for k, v in row["inputs"].items())
        assert line in message and f"kernel {row['kernel']}, oracle {row['oracle']}" in message
    assert all(line.strip() in message for line in report.summary().splitlines())  # pytest re-indents it
    assert len(report.summary().splitlines()) == 1 + 1 + 2 + 1  # head, the mutant, its two rows, sse2_nosqrt


def test_sectorbench_verify_is_the_api_after_the_module_is_imported():
    """The API's name is not shadowed by verify's module (it lives in check/)."""
    import sectorbench.check.verify  # noqa: F401

    assert callable(sectorbench.verify)
    report = sectorbench.verify(kernels="orient", cases=200)
    assert report.family == "triangle" and report.passed, report.summary()
    assert str(report) == report.summary()


@pytest.mark.parametrize(
    "arguments,name",
    [
        ({"cases": 0}, "cases"),
        ({"cases": "/no/such/cases.npz"}, "cases"),
        ({"cases": str(DATA / "mutants.c")}, "cases"),  # not a case file: a SectorbenchError naming the file
        ({"seed": -1}, "seed"),
        ({"kernels": 5}, "kernels"),
        ({"kernels": "no_such_kernel"}, "kernels"),
        ({"kernels": "orient,basic"}, "kernels"),
        ({"source": "/no/such/kernel.c"}, "source"),
        ({"family": "no_such_family"}, "family"),  # not "circle": a family may take that name
        ({"flags": []}, "flags"),
        ({"flags": "-O2 '"}, "flags"),
        ({"jobs": 0}, "jobs"),
        ({"strict_special": "no"}, "strict_special"),  # truthy: it asked for the strict check
        ({"kernel_timeout": 0}, "kernel_timeout"),
        ({"kernel_timeout": float("nan")}, "kernel_timeout"),
        ({"kernels": ""}, "kernels"),  # these two verified every default kernel
        ({"kernels": " , "}, "kernels"),
        ({"cases": 10**12}, "cases"),  # a SectorbenchError worded for the CLI: "--cases ... would take"
        ({"cc": "no-such-cc"}, "cc"),  # a BuildError saying "set --cc or $CC"
        # the same build twice was checked twice, into twin rows (the CLI refuses `--flags` twice)
        ({"flags": ["-O2", "-O2"], "kernels": "basic", "cases": 10}, "flags"),
        ({"flags": ["-O2", " -O2 "], "kernels": "basic", "cases": 10}, "flags"),
        # a SectorbenchError after the build: "two kernels are named m_angle_ge (mutants.c:22 and mutants.c:22)"
        ({"source": [str(DATA / "mutants.c")] * 2, "kernels": "m_angle_ge", "cases": 10}, "source"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(arguments, name):
    with pytest.raises(ValueError, match=rf"^{name}\b") as raised:
        sectorbench.verify(**arguments)
    assert "--cases" not in str(raised.value) and "--cc" not in str(raised.value)  # worded for the API


def test_an_empty_kernels_string_is_quoted_as_given():
    """The message quoted the string split at its commas: "kernels is empty (got [' ', ' '])"."""
    with pytest.raises(ValueError, match=r"^kernels is empty \(got ' , '\)"):
        sectorbench.verify(kernels=" , ")


def test_numpy_integers_are_integers():
    """A notebook's np.int64(50) was refused: 'cases must be a positive number of rows'."""
    report = sectorbench.verify(kernels="basic", cases=np.int64(50), seed=np.int64(1))
    assert report.passed and report.seed == 1 and type(report.seed) is int, report.summary()
    # show and jobs too: they raised "show must be an integer >= 0 (got np.int64(3))"
    report = sectorbench.verify(kernels="basic", cases=50, show=np.int64(3), jobs=np.int64(1))
    assert report.passed and type(report.result.env["jobs"]) is int, report.summary()


@pytest.mark.parametrize(
    "arguments,message",
    [
        ({"kernels": "basc"}, "unknown kernel basc (did you mean basic?)"),
        ({"family": "triangle", "kernels": "basic"}, "basic is a sector kernel, not a triangle one"),
        ({"kernels": "basic,orient"}, "basic is a sector kernel, orient is a triangle kernel: name kernels of one"),
    ],
)
def test_a_wrong_kernel_name_is_said_as_the_cli_says_it(arguments, message):
    """It listed every kernel with no suggestion, and a wrong family read "kernels: family
    'triangle', basic are of the families sector"."""
    with pytest.raises(ValueError, match="^kernels: ") as raised:
        sectorbench.verify(cases=10, **arguments)
    assert message in str(raised.value)


def test_a_kernel_that_hangs_does_not_pass(private_cache):
    """Its verdict is timed-out after kernel_timeout, and neither it nor the report passes."""
    report = sectorbench.verify(source=DATA / "unruly_kernels.c", kernels="hangs,basic", cases=300, kernel_timeout=1.0)
    assert report.kernel("hangs").verdict == "timed-out" and not report.kernel("hangs").passed
    assert report.kernel("basic").passed and not report.passed


def test_a_case_file_gets_the_loop_checks_too(tmp_path):
    """verify --input (cases="x.npz") used to skip every loop check: m_tail_mask, right on any
    rows and wrong only in its count loops' tails, passed on a case file."""
    path = tmp_path / "cases.npz"
    rows = {"cx": 0.0, "cy": 0.0, "ux": 1.0, "uy": 0.0, "r2": 4.0, "cos_theta": 0.5, "px": 1.0, "py": 0.25}
    np.savez(path, **{k: np.full(3, v, dtype=np.float32) for k, v in rows.items()})
    report = sectorbench.verify(source=DATA / "mutants.c", kernels="m_tail_mask,basic", cases=str(path), show=5)
    bad, basic = report.kernel("m_tail_mask"), report.kernel("basic")
    assert report.cases == 3 and not bad.passed and bad.mismatches["logic-bug"] > 0, report.summary()
    # Its case rows fail through its count loops (the pairs loop is right), its loops as well.
    case_rows = [row for row in bad.failing if not row["group"].startswith("loop check")]
    assert case_rows and all(row["kernel"].startswith("inside; count_inline counts 8 of 9 copies") for row in case_rows)
    assert any(row["group"].startswith("loop check") for row in bad.failing), bad.failing
    assert basic.passed and basic.loop_checks == bad.loop_checks > 0
