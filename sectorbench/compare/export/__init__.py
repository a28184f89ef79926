"""Results in the formats the dashboards people already run read (docs/exports.md).

One module a format, each with ``render(result) -> str``; ``FORMATS`` maps the name
``--export FORMAT=PATH`` and ``sectorbench export --format`` take to it.

What every format exports: each row's **gross time per test** (a pass's time over the
scene's tests, the NoOperation loop not subtracted), in ns (seconds for pyperf, whose
unit it is), one value per round.  Gross, not net, because these consumers take
ratios of values (pyperf compare_to, github-action-benchmark's alert, Bencher's
thresholds) and net times of a kernel barely slower than its loop can be near zero or
negative in a round (pyperf refuses values <= 0 outright); it is also what the gate
compares (gate.py).  Per test, not per pass, so that a figure does not change with the
scene's size.  The net time per test is carried alongside where a format has room for
it (gbench's counters, gha's extra).

Rows that did not run (skipped, crashed) are left out: there is nothing to chart.  So are
rows whose answers differ (compare/answers.py): the run ranks none of them, and a dashboard
would chart a wrong kernel's time as a point like any other (a build whose sqrtf was broken
was the fastest); the command says which it left out.
"""

from __future__ import annotations

from collections.abc import Callable

from ...errors import SectorbenchError
from ...model.results import KernelResult, RunResult, refuse_directory_spelling, shows_cc
from ...native.build import build_label
from ..answers import Differs, differing
from . import bmf, gbench, gha, pyperf

#: Format name -> render(result) -> text.
FORMATS: dict[str, Callable[[RunResult], str]] = {
    "bmf": bmf.render,
    "gbench": gbench.render,
    "gha": gha.render,
    "pyperf": pyperf.render,
}

__all__ = [
    "FORMATS",
    "benchmark_name",
    "exported_rows",
    "gross_ns_per_test",
    "instructions_per_test",
    "nothing_to_export",
    "parse_export",
    "render",
    "rows_left_out",
]


def exported_rows(result: RunResult) -> list[tuple[str, KernelResult]]:
    """(name, row) of every row with samples whose answers hold, in the result's order."""
    return [(name, row) for name, row, differs in _ran(result) if differs is None]


def rows_left_out(result: RunResult) -> list[tuple[str, str]]:
    """(name, why) of the rows that ran but are not exported: their answers differ."""
    return [(name, differs.note) for name, row, differs in _ran(result) if differs is not None]


def _ran(result: RunResult) -> list[tuple[str, KernelResult, Differs | None]]:
    """(name, row, how its answers differ or None) of every row with samples.  Judged here, as
    run and compare judge them, so that a file saved before rows carried answers_differ is
    judged too."""
    show_cc = shows_cc(row.key for row in result.results)  # the peers' rows have no compiler
    return [
        (benchmark_name(row, show_cc), row, differs)
        for row, differs in zip(result.results, differing(result))
        if row.status == "ok" and row.samples_s
    ]


def nothing_to_export(result: RunResult) -> str | None:
    """Why no row of the result is exported, or None when some are."""
    if exported_rows(result):
        return None
    if rows_left_out(result):
        return "nothing to export: every row that ran gave answers that differ (run `sectorbench verify`)"
    return "nothing to export: no row of the result ran"


def benchmark_name(row: KernelResult, show_cc: bool = False) -> str:
    """family/kernel/flags/mode/threads; the flags part names the compiler when a run has several."""
    flags = build_label(row.cc, row.flags, show_cc)
    return f"{row.family}/{row.kernel}/{flags}/{row.mode}/{row.threads}"


def gross_ns_per_test(row: KernelResult) -> list[float]:
    """The row's rounds as gross ns per test (see the module doc)."""
    tests = row.tests or 1
    return [seconds / tests * 1e9 for seconds in row.samples_s]


def instructions_per_test(row: KernelResult) -> float | None:
    """The row's instructions per test, gross (the whole loop's, as the time): the hardware
    counters' where they ran, else valgrind's count of --metric instructions over the tests
    it counted; None where neither was taken."""
    if row.instructions_per_test is not None:
        return row.instructions_per_test
    if row.instructions is not None and row.instructions_tests:
        return row.instructions / row.instructions_tests
    return None


def render(result: RunResult, fmt: str) -> str:
    if fmt not in FORMATS:
        raise SectorbenchError(f"unknown export format {fmt!r}; choose from {', '.join(sorted(FORMATS))}")
    reason = nothing_to_export(result)
    if reason:
        raise SectorbenchError(reason)
    return FORMATS[fmt](result)


def parse_export(text: str):
    """--export FORMAT=PATH as (format, Path); SectorbenchError naming the problem."""
    from pathlib import Path

    fmt, sep, path = text.partition("=")
    if not sep or not path:
        raise SectorbenchError(f"--export {text!r}: give FORMAT=PATH, e.g. pyperf=bench.json")
    if fmt not in FORMATS:
        raise SectorbenchError(f"--export {text!r}: unknown format {fmt!r}; choose from {', '.join(sorted(FORMATS))}")
    try:
        refuse_directory_spelling(path)
    except SectorbenchError as exc:
        raise SectorbenchError(f"--export {text!r}: {exc}") from None
    return fmt, Path(path)
