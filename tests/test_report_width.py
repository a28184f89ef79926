"""Tables fit the terminal they are printed in (80 and 120 columns): columns are left out or
spread over several tables, and no number, kernel name or verdict is ever cut.  Real results
from small real runs."""

from __future__ import annotations

import io
import json

import pytest
from click.testing import CliRunner
from rich.console import Console

from sectorbench.check.verify import KernelVerdict, VerifyResult
from sectorbench.cli import main
from sectorbench.model.results import load
from sectorbench.present.report import (
    GATE_DROP,
    RUN_DROP,
    VERIFY_DROP,
    abbreviate_flags,
    compare_table,
    fit,
    gate_table,
    min_width,
    run_table,
    shown_speedup,
    speedup_cell,
    split,
)
from sectorbench.present.report import verify_table as verify_table_of

SMALL = ["-n", "20", "-m", "500", "--repeat", "3", "--min-time", "0.001"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    where = tmp_path_factory.mktemp("widths")
    runs = {
        "run": ["run", *SMALL, "--flags", "-O2", "--flags", "-O2 -ffast-math", "--mode", "inline", "--mode", "call"],
        "compare": [
            "compare",
            *SMALL,
            "--kernels",
            "naive,basic,sse2_nosqrt",
            *("--flags", "-O0", "--flags", "-O2", "--flags", "-O2 -ffast-math"),
        ],
    }
    for name, args in runs.items():
        result = CliRunner().invoke(main, [*args, "--json", str(where / f"{name}.json")])
        assert result.exit_code == 0, result.output
    return {name: load(where / f"{name}.json") for name in runs}


def render(tables, width: int) -> str:
    console = Console(width=width, file=io.StringIO(), color_system=None, force_terminal=False)
    for table in tables if isinstance(tables, list) else [tables]:
        console.print(table)
    return console.file.getvalue()


def assert_fits(text: str, width: int, whole: list[str]) -> None:
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= width
    cells = {cell.strip() for line in text.splitlines() for cell in line.split("│")}
    missing = [word for word in whole if word not in cells and f" {word} " not in f" {text} "]
    assert not missing, f"cut or missing: {missing[:5]}\n{text}"


@pytest.mark.parametrize("width", [80, 120])
def test_run_table_fits_and_keeps_every_number_it_shows(saved, width):
    run = saved["run"]
    text = render(fit(run_table(run), width, RUN_DROP, whole_lines=True), width)
    ok = [r for r in run.results if r.status == "ok"]
    assert_fits(text, width, [r.kernel for r in run.results] + [f"{r.ns_per_test:.3f}" for r in ok])
    assert all(speedup_cell(speedup) in text for r in ok if (speedup := shown_speedup(r, run.results)))
    # one line per row: each row's line holds its kernel, its flags and its mode.  The rows are
    # the lines between the header's rule and the first blank line; footnotes below may well
    # start a wrapped line with a kernel's name.
    lines = text.splitlines()
    body_start = next(i for i, line in enumerate(lines) if "───" in line) + 1
    body_end = next((i for i in range(body_start, len(lines)) if not lines[i].strip()), len(lines))
    rows = lines[body_start:body_end]
    assert len(rows) == len(run.results), text
    for line, r in zip(rows, sorted(run.results, key=lambda r: r.kernel != run.config["reference"])):
        assert line.split()[0] == r.kernel and f" {abbreviate_flags(r.flags)} " in line and f" {r.mode} " in line
    assert "left out to fit" in text or width >= 120  # at 80 columns, columns go before lines wrap


def test_run_table_is_whole_when_there_is_room(saved):
    text = render(fit(run_table(saved["run"]), 400, RUN_DROP, whole_lines=True), 400)
    assert "left out" not in text and "NoOp" in text and "spread" in text


def test_the_reference_kernel_comes_first_and_abbreviations_are_spelt_out(saved):
    run = saved["run"]
    text = render(fit(run_table(run), 120, RUN_DROP, whole_lines=True), 120)
    first = next(
        line for line in text.splitlines() if line.split() and line.split()[0] in {r.kernel for r in run.results}
    )
    assert first.split()[0] == run.config["reference"] == "naive"
    assert "-O2 fast" in text and "fast = -ffast-math" in text


@pytest.mark.parametrize("width", [40, 80, 120])
def test_compare_matrix_is_spread_over_tables_that_fit(saved, width):
    run = saved["compare"]
    tables = split(compare_table(run), width)
    text = render(tables, width)
    ok = [r for r in run.results if r.status == "ok" and r.ns_per_test is not None]
    assert_fits(text, width, [f"{r.ns_per_test:.3f}" for r in ok] + ["naive", "basic", "sse2_nosqrt"])
    for flags in ("-O0", "-ffast-math"):
        assert flags in text
    assert (len(tables) > 1) == (min_width(compare_table(run)) > width)
    assert len(tables) > 1 or width > 40
    assert text.count("naive") == len(tables)  # every part repeats the kernel column


def sample_verify() -> VerifyResult:
    counts = {"rounding-band": 3259, "logic-bug": 0, "special-value": 10, "nondeterministic": 0}
    kernels = [
        KernelVerdict("naive", "-O2 -ffast-math", "cc", "ok", cases=352627, rounding_bound=16, mismatches=counts,
                      worst_margin=11.5, verdict="rounding-band"),
        KernelVerdict("sse2_nosqrt", "-O3 -march=native -ffast-math", "cc", "ok", cases=352970, rounding_bound=8,
                      mismatches={**counts, "logic-bug": 2265}, worst_margin=1.68e7, verdict="FAIL"),
        KernelVerdict("avx512", "-O2", "cc", "skipped", reason="needs avx512f, disabled by --disable-isa"),
    ]  # fmt: skip
    return VerifyResult("sector", 0, 352970, {}, {}, kernels)


@pytest.mark.parametrize("width", [80, 120])
def test_verify_table_fits_and_never_cuts_a_verdict(width):
    text = render(fit(verify_table_of(sample_verify()), width, VERIFY_DROP), width)
    assert_fits(text, width, ["rounding-band", "FAIL", "3259", "2265", "naive", "sse2_nosqrt", "-march=native"])


@pytest.mark.parametrize("width", [80, 120])
def test_gate_table_fits(saved, width, tmp_path):
    baseline = tmp_path / "b.json"
    baseline.write_text(json.dumps(saved["run"].to_dict()))
    from sectorbench.compare.gate import gate

    report = gate(load(baseline), saved["run"])
    text = render(fit(gate_table(report), width, GATE_DROP), width)
    assert_fits(
        text,
        width,
        # A verdict of two words ("unchanged code") may wrap at its space, never inside a word.
        [f"{row.current_median_s * 1e3:.3f}" for row in report.rows]
        + [word for row in report.rows for word in row.verdict.split()],
    )
