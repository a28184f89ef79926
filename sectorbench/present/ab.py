"""Tables of the A/B run and of instruction counts (--against, --metric instructions)."""

from __future__ import annotations

from dataclasses import replace

from rich.table import Table

from ..model.results import RunResult
from .literal import literal


def with_sides(run: RunResult) -> RunResult:
    """The run with each base row's kernel named "NAME (base)", for the run table: both sides'
    rows share a kernel name, flags and mode, and the table must tell them apart."""
    rows = [replace(r, kernel=f"{r.kernel} (base)") if r.side == "base" else r for r in run.results]
    return replace(run, results=rows)


def instructions_table(run: RunResult) -> Table:
    """Instructions per test under valgrind: the kernel's loop, its NoOperation twin's, the difference."""
    counted = run.config.get("instructions_tests")
    table = Table(
        title="instructions per test (valgrind callgrind, one pass"
        + (f" over {counted:,} tests" if counted else "")
        + "; deterministic: compare within one compiler and flag set)",
        title_justify="left",
    )
    for name in ("kernel", "flags", "mode", "loop", "NoOp", "net", "note"):
        table.add_column(name, justify="right" if name in ("loop", "NoOp", "net") else "left", no_wrap=name != "note")
    for row in run.results:
        if row.status != "ok" or (row.instructions is None and not row.instructions_reason):
            continue
        name = f"{row.kernel} (base)" if row.side == "base" else row.kernel
        if row.instructions is None:
            reason = f"not counted: {row.instructions_reason}"
            table.add_row(*map(literal, [name, row.flags, row.mode, "–", "–", "–", reason]))
            continue
        tests = row.instructions_tests
        table.add_row(
            literal(name),
            literal(row.flags),
            literal(row.mode),
            f"{row.instructions / tests:.3f}",
            f"{row.overhead_instructions / tests:.3f}",
            f"{row.net_instructions_per_test:.3f}",
            "",
        )
    return table


def uncounted_summary(run: RunResult) -> str | None:
    """One line when --metric instructions counted no row of `run`: that, and why (each
    row's instructions_reason, the kernels it concerns)."""
    rows = [r for r in run.results if r.status == "ok"]
    if not rows or any(r.instructions is not None for r in rows):
        return None
    kernels_by_reason: dict[str, list[str]] = {}
    for row in rows:
        kernels = kernels_by_reason.setdefault(row.instructions_reason or "no count", [])
        if row.kernel not in kernels:
            kernels.append(row.kernel)
    why = "; ".join(
        f"{reason} ({', '.join(kernels[:3])}{f' and {len(kernels) - 3} more' if len(kernels) > 3 else ''})"
        for reason, kernels in kernels_by_reason.items()
    )
    return f"instructions: no row was counted: {why}"
