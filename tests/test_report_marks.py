"""What the run table and the compare matrix show in place of a number that would mislead: a
speedup or ratio on a net time not clearly above 0 ("–"), a ratio without its interval ([n/a]),
each explained under its table (the rows' notes come from measure/timing.net_time itself); and
the notes under a table in its family's own words."""

from __future__ import annotations

import statistics
from dataclasses import replace

from click.testing import CliRunner
from conftest import rendered as render

from sectorbench.cli import main
from sectorbench.measure.runner import _with_speedups
from sectorbench.measure.timing import net_time
from sectorbench.model.results import KernelResult, RunResult, load
from sectorbench.present.report import (
    COMPARE_LEGEND,
    NO_INTERVAL,
    NOISE_RATIO,
    compare_table,
    run_table,
    split,
    unmeasured_lines,
)

TESTS = 1000


def timed_row(kernel: str, flags: str, kernel_ms: list[float], noop_ms: list[float]) -> KernelResult:
    """A row as the runner records it: net time and its notes from timing.net_time."""
    kernel_s, noop_s = [ms / 1e3 for ms in kernel_ms], [ms / 1e3 for ms in noop_ms]
    net = net_time(kernel_s, noop_s)
    return KernelResult(
        kernel=kernel,
        family="sector",
        flags=flags,
        cc="cc",
        mode="inline",
        status="ok",
        hits=100,
        tests=TESTS,
        calls=1,
        samples_s=kernel_s,
        median_s=statistics.median(kernel_s),
        spread=0.1,
        overhead_samples_s=noop_s,
        overhead_s=statistics.median(noop_s),
        net_samples_s=list(net.net_samples_s),
        net_s=net.net_s,
        ns_per_test=net.net_s / TESTS * 1e9,
        warnings=list(net.warnings),
    )


def a_run(rows: list[KernelResult]) -> RunResult:
    scene = {"kind": "uniform", "family": "sector", "sectors": 10, "points": 100, "seed": 1}
    return RunResult(scene=scene, env={}, config={"repeat": 5, "reference": "naive"}, results=rows)


CLEAR = [60.0, 61.0, 60.5, 59.5, 60.2]  # 60 ms a pass against a 10 ms NoOperation
NOOP = [10.0, 10.0, 10.0, 10.0, 10.0]
NOISY = [10.5, 8.0, 10.07, 12.0, 9.0]  # median 0.07 ms above its NoOperation, some rounds below


def test_net_time_notes_are_what_a_row_is_judged_by():
    assert timed_row("naive", "-O2", CLEAR, NOOP).net_above_zero
    assert not timed_row("sse2", "-O2", NOISY, NOOP).net_above_zero
    assert not timed_row("sse2", "-O2", [9.0] * 5, NOOP).net_above_zero  # clamped at 0


def speedup_column(rows: list[KernelResult]) -> dict[str, str]:
    """The run table's speedup cell of each kernel (one build here)."""
    table = run_table(a_run(rows))
    kernels = next(column for column in table.columns if column.header == "kernel")
    speedups = next(column for column in table.columns if column.header == "speedup")
    return dict(zip(map(str, kernels.cells), map(str, speedups.cells)))  # a name is a Text: shown as written


def test_a_speedup_on_a_net_time_not_clearly_above_0_is_not_shown():
    rows = _with_speedups([timed_row("naive", "-O2", CLEAR, NOOP), timed_row("sse2", "-O2", NOISY, NOOP)], "naive")
    assert rows[1].speedup is None  # no ratio of noise (947.8x), in the table or the saved file
    assert speedup_column(rows) == {"naive": "1.0x", "sse2": "–"}
    caption = " ".join(render(run_table(a_run(rows))).split())
    assert "– where the row's net time, or its reference's, is not clearly above 0" in caption
    assert "none for" not in caption


def test_a_noisy_reference_takes_the_speedups_of_its_build_away():
    rows = _with_speedups([timed_row("naive", "-O2", NOISY, NOOP), timed_row("basic", "-O2", CLEAR, NOOP)], "naive")
    assert rows[1].speedup is None
    assert speedup_column(rows) == {"naive": "–", "basic": "–"}


def test_a_clear_speedup_is_shown():
    rows = _with_speedups(
        [timed_row("naive", "-O2", CLEAR, NOOP), timed_row("basic", "-O2", [35.0] * 5, NOOP)], "naive"
    )
    assert speedup_column(rows) == {"naive": "1.0x", "basic": "2.0x"}
    assert "not clearly above 0" not in render(run_table(a_run(rows)))


def matrix_text(rows: list[KernelResult]) -> str:
    return " ".join(render(compare_table(a_run(rows))).split())


def fast_math_cell(rows: list[KernelResult]) -> str:
    table = compare_table(a_run(rows))
    column = next(column for column in table.columns if str(column.header) == "-O2 -ffast-math")
    return next(iter(column.cells)).plain


def test_the_compare_matrix_gives_no_ratio_to_noise_and_says_why():
    rows = [timed_row("sse2", "-O2", CLEAR, NOOP), timed_row("sse2", "-O2 -ffast-math", NOISY, NOOP)]
    assert fast_math_cell(rows) == f"70.000\n{NOISE_RATIO}"  # 0.07 ms over 1000 tests, no ×0.00
    assert f"{NOISE_RATIO}: {COMPARE_LEGEND[NOISE_RATIO]}" in matrix_text(rows)


def test_the_compare_matrix_marks_a_ratio_to_a_first_build_whose_net_is_clamped_at_0():
    # compare --preset article -n 100 -m 10000 --repeat 3: sse2's first build (-O2 -mfpmath=387,
    # call mode) netted 0.000 (clamped): its other cells showed a bare number, neither a ratio nor
    # the ×– the legend explains, while a first build barely above 0 gave every cell its ×–.
    rows = [timed_row("sse2", "-O2", [9.0] * 5, NOOP), timed_row("sse2", "-O2 -ffast-math", CLEAR, NOOP)]
    assert rows[0].ns_per_test == 0.0 and rows[1].net_above_zero
    assert fast_math_cell(rows) == f"50200.000\n{NOISE_RATIO}"
    assert f"{NOISE_RATIO}: {COMPARE_LEGEND[NOISE_RATIO]}" in matrix_text(rows)


def test_the_compare_matrix_explains_a_ratio_without_its_interval():
    # Nine rounds: one at or below the NoOperation leaves the net's 95 % interval above 0
    # (its low end is the second smallest round), but no ratio for that round.
    nine = [60.0, 61.0, 60.5, 59.5, 60.2, 60.1, 60.3, 60.4, 9.0]
    rows = [timed_row("sse2", "-O2", [60.0] * 9, [10.0] * 9), timed_row("sse2", "-O2 -ffast-math", nine, [10.0] * 9)]
    assert rows[1].net_above_zero
    assert fast_math_cell(rows) == f"50200.000\n×1.00 {NO_INTERVAL}"
    text = matrix_text(rows)
    assert f"{NO_INTERVAL}: {COMPARE_LEGEND[NO_INTERVAL]}" in text and f"{NOISE_RATIO}:" not in text


def test_the_compare_matrix_has_a_row_for_each_thread_count():
    """`compare --threads 1 --threads 2` keyed its rows by kernel and mode: the two thread counts'
    rows fell into one cell, and the table showed the last one's times, saying of neither."""
    one = timed_row("sse2", "-O2", CLEAR, NOOP)
    two = replace(timed_row("sse2", "-O2", [35.0] * 5, NOOP), threads=2)
    crashed = replace(one, threads=2, status="crashed", reason="killed by SIGSEGV", flags="-O3")
    run = a_run([one, two, replace(one, flags="-O3"), crashed])
    table = compare_table(run)
    assert [str(column.header) for column in table.columns] == ["kernel", "threads", "-O2", "-O3"]
    lines = render(table).splitlines()
    assert any("sse2" in line and " 1 " in line and "50200.000" in line for line in lines)
    assert any("sse2" in line and " 2 " in line and "25000.000" in line and "crashed" in line for line in lines)
    for part in split(table, 30):  # every part of a narrow console's matrix says which count a row is
        assert [str(column.header) for column in part.columns][:2] == ["kernel", "threads"]
    assert unmeasured_lines(run) == ["sse2 [-O3, 2 threads]: crashed: killed by SIGSEGV"]


def test_the_compare_matrix_says_its_ratio_is_not_of_the_medians_shown():
    """The × is the median of the per-round ratios; beside the medians it can contradict them
    (a helper's compare showed 3.285 and 3.695 ns with ×1.02, and plot's heat map of that file
    ×1.12) and the title called it only "×ratio to the first build"."""
    first = timed_row("sse2", "-O2", [50.0, 60.0, 70.0, 80.0, 90.0], NOOP)  # nets 40..80, median 60
    other = timed_row("sse2", "-O2 -ffast-math", [58.0, 50.0, 82.0, 66.0, 74.0], NOOP)  # median 56
    assert fast_math_cell([first, other]).startswith("56000.000\n×0.80 [")  # not 56/60 = ×0.93
    title = " ".join(str(compare_table(a_run([first, other])).title).split())
    assert "the median of the ratios of its rounds to the first build's same rounds" in title
    assert "not the ratio of the medians shown" in title


def test_a_matrix_of_clear_ratios_has_no_legend():
    rows = [timed_row("sse2", "-O2", CLEAR, NOOP), timed_row("sse2", "-O2 -ffast-math", [35.0] * 5, NOOP)]
    table = compare_table(a_run(rows))
    assert table.caption is None and "×0.50" in render(table)


def test_an_aabr_table_speaks_of_checksums_and_says_none_derived_once(tmp_path):
    saved = tmp_path / "aabr.json"
    args = ["run", "--family", "aabr", "-n", "8", "-m", "200", "--repeat", "3", "--min-time", "0.001"]
    result = CliRunner().invoke(main, [*args, "--kernels", "scan,hill", "--flags", "-O2", "--json", str(saved)])
    assert result.exit_code == 0, result.output
    run = load(saved)
    scan = next(r for r in run.results if r.kernel == "scan")
    off = replace(run, results=[replace(r, hits=r.hits + 3) if r is scan else r for r in run.results])
    text = " ".join(render(run_table(off)).split())
    assert "±k: the checksum" in text and "hits differ" not in text and "near the boundary" not in text
    assert "verify --family aabr" in text
    assert "bound: none derived (the hot loop runs inside one test" in text
    assert text.count("none derived") == 1


def test_a_sector_table_speaks_of_hits():
    run = replace(a_run([timed_row("naive", "-O2", CLEAR, NOOP)]), exact_count=97)
    text = " ".join(render(run_table(run)).split())
    assert "±k: hits differ by k from the exact oracle's count 97" in text and "verify --family sector" in text


def test_a_build_whose_answers_differ_is_marked_and_never_the_fastest():
    """The probe's `-I` dir whose math.h makes sqrtf(x) x: basic's hits 127 774 against the exact
    count 124 717, faster than -O2, was shown in bold green as the fastest build.  A build within
    rounding of the exact count (+1, the band allows 2) is not marked and may be the fastest."""
    exact = 124717
    rows = [
        replace(timed_row("basic", "-O2", [40.0] * 5, NOOP), hits=exact),
        replace(timed_row("basic", "-O2 -ffast-math", [38.0] * 5, NOOP), hits=exact + 1),
        replace(timed_row("basic", "-O2 -I/tmp/broken", [30.0] * 5, NOOP), hits=exact + 3057),
    ]
    run = replace(a_run(_with_speedups(rows, "basic")), exact_count=exact, count_allowance={"basic": 2})
    table = compare_table(run)
    cells = {str(column.header): next(iter(column.cells)) for column in table.columns}
    broken = cells["-O2 -I/tmp/broken"]
    assert "✗ answers differ: +3057 hits" in broken.plain and "green" not in str(broken.style)
    assert cells["-O2 -ffast-math"].style == "bold green" and "✗" not in cells["-O2 -ffast-math"].plain
    assert "✗ answers differ: this build's answers are not the kernel's" in matrix_text_of(run)
    # run's table: the same rule (compare/answers.py) gives the row a note and takes its speedup away
    table = run_table(run)
    flags = next(column for column in table.columns if column.header == "flags")
    speedups = next(column for column in table.columns if column.header == "speedup")
    speedup = dict(zip(map(str, flags.cells), map(str, speedups.cells)))
    assert speedup["-O2 -I/tmp/broken"] == "–" and speedup["-O2 fast"] == "1.0x"
    caption = " ".join(str(table.caption or "").split())
    assert f"answers differ from the exact oracle's count {exact} by +3057 hits (float32 rounding allows ±2)" in caption


def matrix_text_of(run: RunResult) -> str:
    return " ".join(render(compare_table(run)).split())
