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

Rows that did not run (skipped, crashed) are left out: there is nothing to chart.
"""

from __future__ import annotations

from collections.abc import Callable

from ...errors import SectorbenchError
from ...model.results import KernelResult, RunResult, refuse_directory_spelling, shows_cc
from ...native.build import build_label
from . import bmf, gbench, gha, pyperf

#: Format name -> render(result) -> text.
FORMATS: dict[str, Callable[[RunResult], str]] = {
    "bmf": bmf.render,
    "gbench": gbench.render,
    "gha": gha.render,
    "pyperf": pyperf.render,
}

__all__ = ["FORMATS", "benchmark_name", "exported_rows", "gross_ns_per_test", "parse_export", "render"]


def exported_rows(result: RunResult) -> list[tuple[str, KernelResult]]:
    """(name, row) of every row with samples, in the result's order."""
    show_cc = shows_cc(row.key for row in result.results)  # the peers' rows have no compiler
    return [(benchmark_name(row, show_cc), row) for row in result.results if row.status == "ok" and row.samples_s]


def benchmark_name(row: KernelResult, show_cc: bool = False) -> str:
    """family/kernel/flags/mode/threads; the flags part names the compiler when a run has several."""
    flags = build_label(row.cc, row.flags, show_cc)
    return f"{row.family}/{row.kernel}/{flags}/{row.mode}/{row.threads}"


def gross_ns_per_test(row: KernelResult) -> list[float]:
    """The row's rounds as gross ns per test (see the module doc)."""
    tests = row.tests or 1
    return [seconds / tests * 1e9 for seconds in row.samples_s]


def render(result: RunResult, fmt: str) -> str:
    if fmt not in FORMATS:
        raise SectorbenchError(f"unknown export format {fmt!r}; choose from {', '.join(sorted(FORMATS))}")
    if not exported_rows(result):
        raise SectorbenchError("nothing to export: no row of the result ran")
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
