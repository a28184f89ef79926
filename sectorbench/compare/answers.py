"""Whether a row's answers differ from what they must be: the one rule behind run's ±k column
and its notes, the compare matrix's ✗ and the saved rows' answers_differ (docs/methodology.md,
"Answers that differ").

A row's count (hits; aabr's checksum) is judged against one yardstick for the whole run:
  - the exact oracle's count of the scene, where the family has it (RunResult.exact_count);
  - else the reference kernel's count in the reference build (the first build it ran in), so
    that with several builds the row that changed is the one marked, not its neighbours.
A row differs when it lies further from the yardstick than float32 rounding allows:
  - from the exact count, the scene's pairs in the row kernel's rounding band (verify's
    allowance for a count loop; RunResult.count_allowance);
  - from the reference kernel's count, both kernels' bands (each may lie that far from the
    exact count), estimated from a sample of the scene's pairs where it is too large to count;
  - for a family that bounds no such difference (aabr: a tied extreme vertex is as right as
    another, so kernels' checksums differ legitimately by any amount) the yardstick of a row is
    its own kernel's count in its reference build, and any difference marks it: the flags, not
    the kernel, changed its answers.
A row whose kernel has no allowance recorded (a file saved before it) is not judged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..model.results import KernelResult, RunResult


@dataclass(frozen=True)
class Yardstick:
    count: int
    text: str  # what it is, for a caption: "the exact oracle's count 124717"


@dataclass(frozen=True)
class Differs:
    """A row whose answers differ: its count minus the yardstick, and what rounding allows."""

    k: int
    allowed: int
    against: str
    unit: str = "hits"  # what the count counts (aabr: its checksum)

    @property
    def amount(self) -> str:
        """The difference with its unit: "+3057 hits", "+173 (checksum)"."""
        return f"{self.k:+d} hits" if self.unit == "hits" else f"{self.k:+d} ({self.unit})"

    @property
    def note(self) -> str:
        allows = f" (float32 rounding allows ±{self.allowed})" if self.allowed else ""
        return f"answers differ from {self.against} by {self.amount}{allows}: run `sectorbench verify` on this build"


def _unit(row: KernelResult) -> str:
    """What a row's count counts, in its family's words: hits, or its own (aabr: checksum)."""
    from ..errors import SectorbenchError
    from ..families import get

    try:
        column = get(row.family).count_column
    except SectorbenchError:  # a saved row of a family this installation lacks
        return "hits"
    return "hits" if column == "hit %" else column


def _counted(row: KernelResult) -> bool:
    return row.status == "ok" and row.hits is not None


def _build(row: KernelResult) -> tuple:
    return (row.cc, row.flags, row.side)


def _reference_kernel(run: RunResult, rows: Sequence[KernelResult]) -> str:
    return next(
        (r.speedup_reference for r in rows if r.speedup_reference), run.config.get("reference") or rows[0].kernel
    )


def _first_count(rows: Sequence[KernelResult], kernel: str) -> KernelResult | None:
    """The kernel's row in the first build it was counted in (the results are in build order)."""
    return next((r for r in rows if r.kernel == kernel), None)


def yardstick(run: RunResult) -> Yardstick | None:
    """The one count every row is shown against (run's ±k column)."""
    rows = [r for r in run.results if _counted(r)]
    if not rows:
        return None
    if run.exact_count is not None:
        return Yardstick(run.exact_count, f"the exact oracle's count {run.exact_count}")
    reference = _reference_kernel(run, rows)
    row = _first_count(rows, reference)
    if row is None:
        return None
    several = len({_build(r) for r in rows}) > 1
    where = f" in the {row.flags} build" if several else ""
    return Yardstick(row.hits, f"the reference kernel {reference}'s count {row.hits}{where}")


def differing(run: RunResult) -> list[Differs | None]:
    """Per row of run.results (aligned), how its answers differ, or None (they do not, or cannot
    be judged)."""
    rows = [r for r in run.results if _counted(r)]
    out: list[Differs | None] = [None] * len(run.results)
    if not rows:
        return out
    allowance = run.count_allowance
    shown = yardstick(run)
    reference = _reference_kernel(run, rows)
    several = len({_build(r) for r in rows}) > 1
    for index, row in enumerate(run.results):
        if not _counted(row):
            continue
        if allowance is None:  # no bound on a legitimate difference: judged against its own kernel
            if run.exact_count is not None:
                continue  # a saved file from before the allowance: not judged
            first = _first_count(rows, row.kernel)
            count = None if first is None else _farthest(row, first.hits)
            if count is None or count == first.hits:
                continue
            where = f" in the {first.flags} build" if several else f" ({first.mode}, {first.threads} threads)"
            out[index] = Differs(count - first.hits, 0, f"{row.kernel}'s count {first.hits}{where}", _unit(row))
            continue
        if shown is None or row.kernel not in allowance:
            continue
        allowed = allowance[row.kernel]
        if run.exact_count is None:  # both counts may lie within their bands of the exact one
            if reference not in allowance:
                continue
            allowed += allowance[reference]
        count = _farthest(row, shown.count)
        if abs(count - shown.count) > allowed:
            out[index] = Differs(count - shown.count, allowed, shown.text, _unit(row))
    return out


def _farthest(row: KernelResult, count: int) -> int:
    """Of the counts the row's rounds returned (hits, and hits_seen where they changed), the
    one farthest from `count`: a kernel is judged on every round, not on its first alone (one
    right in its first round and wrong in every later one was shown as agreeing)."""
    return max([row.hits, *row.hits_seen], key=lambda c: abs(c - count))


def differing_by_row(run: RunResult) -> dict[int, Differs]:
    """The rows whose answers differ, by id() of the row, and how."""
    return {id(row): d for row, d in zip(run.results, differing(run)) if d is not None}


def judged(run: RunResult) -> list[KernelResult]:
    """run.results with each row's answers_differ and answers_note set (as the JSON carries them)."""
    from dataclasses import replace

    return [
        replace(row, answers_differ=d.k if d else None, answers_note=d.note if d else None)
        for row, d in zip(run.results, differing(run))
    ]
