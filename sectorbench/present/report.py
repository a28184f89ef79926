"""Rich tables built from results; nothing here prints."""

from __future__ import annotations

import copy
import io
import math
from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..compare import answers
from ..compare.gate import OVERHEAD, row_label
from ..compare.stats import paired_ratio_if_defined
from ..errors import SectorbenchError
from ..model.kernels import Kernel
from ..model.results import PEER_CC, KernelResult, RunResult, scene_shapes, shows_cc
from ..model.text import shown_line
from ..native.build import build_label
from .literal import literal


def _number(value: float | None, spec: str = ".3f") -> str:
    return "–" if value is None else format(value, spec)


#: How the notes say that no row has a bound (a reason may begin with it too: see run_notes).
NONE_DERIVED = "none derived"


def run_notes(run: RunResult) -> list[str]:
    """What a reader needs to read the cycles columns: the clock, the bound's model, the counters."""
    notes = []
    cpu = (run.env.get("machine") or {}).get("cpu") or {}
    if not cpu.get("measured_mhz") and cpu.get("clock_failure"):
        notes.append(f"cyc/test, % bound: – (the clock could not be read: {cpu['clock_failure']})")
    if cpu.get("measured_mhz"):
        notes.append(
            f"cyc/test: gross (whole loop) median time x {cpu['measured_mhz']:.0f} MHz, the fastest "
            f"clock reading of the run; bound: llvm-mca's cycles/test for the kernel's hot loop, one core"
            + (
                f" ({models})"
                if (models := ", ".join(sorted({r.bound_model for r in run.results if r.bound_model})))
                else ""
            )
        )
    beaten = sorted({r.kernel for r in run.results if (r.percent_of_bound or 0) > 100})
    if beaten:  # the bound is llvm-mca's model of the loop, not a proof: say where it is wrong
        notes.append(
            f"% bound over 100 ({', '.join(beaten)}): the loop ran faster than llvm-mca's model "
            "of it predicts; read that bound as the model's estimate, not a floor"
        )
    unbound: dict[str, list[str]] = {}  # a bound that cannot be derived is "–": say why, once per reason
    for r in run.results:
        if r.status == "ok" and r.bound_cycles_per_test is None and r.bound_reason and r.threads == 1:
            # The note says "none derived" itself; the runner's reason for a family whose kernels
            # loop inside one test begins with it too (and saved runs keep that): not said twice.
            reason = r.bound_reason.removeprefix(NONE_DERIVED + ": ")
            unbound.setdefault(reason, []).append(r.kernel)
    if any(r.bound_cycles_per_test for r in run.results):
        for reason, kernels in unbound.items():
            notes.append(f"bound – for {', '.join(dict.fromkeys(kernels))}: {reason}")
        # The runner derives no bound for a row of several threads: the "–" there says why too.
        if any(r.status == "ok" and r.threads > 1 and r.bound_cycles_per_test is None for r in run.results):
            notes.append("bound – with more than 1 thread: the bound is one core's (cyc/test there is the whole run's)")
    elif unbound:
        notes.append(f"bound: {NONE_DERIVED} ({'; '.join(unbound)})")
    threads = max((r.threads for r in run.results if r.status == "ok"), default=1)
    if (quota := cpu.get("quota_cores")) is not None and quota < threads:
        # A quota below the threads timed stops the loop for part of every period: the times
        # (4-6x at 0.2 CPUs) and the speedups between them were shown as any others, spread 1 %.
        notes.append(
            f"CPU quota: this process's cgroup may use {quota:g} CPUs (docker --cpus, a runner's limit), "
            f"fewer than the {threads} thread{'s' if threads > 1 else ''} timed: the loops waited for "
            "the quota and their times include the waits; give the run more CPUs"
            + (" or fewer --threads" if threads > 1 else "")
        )
    counters = run.env.get("counters") or {}
    if counters and not counters.get("available"):
        notes.append(f"counters: unavailable ({counters.get('reason')})")
    return notes


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1e3:.2f}"


def _family(results: list[KernelResult]):
    """The results' family (what its count loops return), or the boolean default for a saved
    run whose family this installation does not know."""
    from ..families import Family, get

    try:
        return get(results[0].family) if results else Family()
    except SectorbenchError:
        return Family()


def expected_hits(run: RunResult) -> tuple[dict, str] | None:
    """What each row's count is shown against, as ({RowKey: count}, how it reads), or None: one
    yardstick for the whole run (compare/answers.py), the exact oracle's count where the run has
    one, else the reference kernel's count in the reference build.  Never a majority: of two
    kernels, the wrong one may be first."""
    shown = answers.yardstick(run)
    if shown is None:
        return None
    return {r.key: shown.count for r in run.results if r.status == "ok" and r.hits is not None}, shown.text


def shown_speedup(row: KernelResult, results: Sequence[KernelResult]) -> float | None:
    """row.speedup, or None where it would celebrate noise: a speedup on net time whose row, or
    whose reference row, has a net time not clearly above 0 (KernelResult.net_above_zero; the
    row's note says so, and docs/methodology.md promises such rows are flagged, not celebrated).
    A speedup on gross time (a memory-bound run) does not divide by a net, so it stands."""
    if row.speedup is None or row.speedup_basis == "gross":
        return row.speedup
    reference_key = row.key.with_kernel(row.speedup_reference or row.kernel)
    reference = next((r for r in results if r.key == reference_key and r.side == row.side), None)
    if not row.net_above_zero or (reference is not None and not reference.net_above_zero):
        return None
    return row.speedup


def speedup_cell(speedup: float | None) -> str:
    """1.0x, 37.7x; below 1 two significant digits, so that a row 20 times slower than its
    reference reads 0.044x, not 0.0x (which reads as no time, or no speedup at all)."""
    if speedup is None:
        return "–"
    return f"{speedup:.1f}x" if speedup >= 0.95 else f"{speedup:.2g}x"


def _reference_is_broadphase(row: KernelResult, results: Sequence[KernelResult]) -> bool:
    reference_key = row.key.with_kernel(row.speedup_reference or row.kernel)
    reference = next((r for r in results if r.key == reference_key and r.side == row.side), None)
    return reference is not None and reference.broadphase is not None


def speedup_caption(results: list[KernelResult]) -> str | None:
    """What the speedup column is relative to, and on which time; or that nothing was."""
    ok = [r for r in results if r.status == "ok"]
    if not ok:
        return None
    compared = [r for r in ok if r.speedup_reference is not None]
    if not compared:
        return "speedup: – (no reference kernel ran in any row's build, mode and thread count)"
    references = ", ".join(dict.fromkeys(r.speedup_reference for r in compared if r.speedup_reference))
    # A broadphase row against a kernel is on gross time whatever the table's basis (runner._with_speedups).
    crossed = [r for r in compared if r.broadphase and not _reference_is_broadphase(r, results)]
    basis = next((r.speedup_basis for r in compared if r.speedup_basis and r not in crossed), "net")
    text = f"speedup: {references or 'the reference kernel'}'s {basis} time / the row's, same build, mode and threads"
    if basis == "gross":
        text += (
            "; gross (end to end), not net, because a row is marked memory-bound: there the NoOperation "
            "subtraction removes load time the kernel hides, so net would rank it wrongly"
        )
    if crossed and basis != "gross":
        text += (
            f"; for {', '.join(dict.fromkeys(r.kernel for r in crossed))} (a broadphase, timed end to end): "
            f"{references}'s gross time / the row's, as the broadphase replaces its whole loop"
        )
    missing = sorted({r.kernel for r in ok if r.speedup_reference is None})
    if missing:
        text += f"; none for {', '.join(missing)} (no reference in its build)"
    if any(shown_speedup(r, results) is None for r in compared):
        text += (
            "; – where the row's net time, or its reference's, is not clearly above 0 (its note: a ratio "
            "of noise) or was not measured"
        )
    return text


#: How the run table spells common flags, so that a row stays on one line at 120 columns; the
#: caption spells out every abbreviation it used, and JSON keeps the flags as given.
FLAG_ABBREVIATIONS = {
    "-ffast-math": "fast",
    "-march=native": "native",
    "-mfpmath=387": "x87",
    "-fno-tree-vectorize": "novec",
}


#: The run table's headers over two lines (fit() and RUN_DROP name columns by their one-line names).
RUN_HEADERS = {
    "median ms": "median\nms",
    "NoOp ms": "NoOp\nms",
    "net ms": "net\nms",
    "ns/test": "ns/\ntest",
    "cyc/test": "cyc/\ntest",
    "% bound": "%\nbound",
    "index ms": "index\nms",
    "index KB": "index\nKB",
}


def abbreviate_flags(flags: str) -> str:
    return " ".join(FLAG_ABBREVIATIONS.get(word, word) for word in flags.split())


def _reference_first(results: list[KernelResult], reference: str | None) -> list[KernelResult]:
    """The reference kernel's rows first (its speedup is 1.0x: the others read against it)."""
    return sorted(results, key=lambda r: r.kernel != reference)


def run_table(run: RunResult) -> Table:
    """One line per row at 120 columns: the reference kernel first; flags abbreviated (the
    caption spells them out); a row's problems, skip and crash reasons in numbered notes."""
    results = _reference_first(run.results, run.config.get("reference"))
    show_mode = len({r.mode for r in results}) > 1
    show_threads = len({r.threads for r in results}) > 1 or any(r.threads > 1 for r in results)
    show_bound = any(r.bound_cycles_per_test for r in results)
    show_counters = any(r.ipc for r in results)
    show_index = any(r.index_build_s is not None or r.broadphase for r in results)
    yardstick = expected_hits(run)
    expected, judged_against = yardstick if yardstick else ({}, "")
    show_delta = any(expected.get(r.key) not in (None, r.hits) for r in results if r.status == "ok")
    wrong = answers.differing_by_row(run)  # never ranked: no speedup, a note saying against what
    scene = run.scene
    table = Table(
        title=literal(
            f"{scene['kind']} scene, N={scene_shapes(scene)} x M={scene['points']}, seed {scene['seed']}: "
            f"ms per pass over all N x M tests, median of {run.config.get('repeat')}; "
            "net = median over the rounds of (kernel - its NoOp in the same round)",  # not median - NoOp
            "table.title",
        ),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        collapse_padding=True,
        pad_edge=False,
    )
    table.add_column("kernel", style="bold", no_wrap=True)
    table.add_column("flags", no_wrap=True)
    if show_mode:
        table.add_column("mode")
    if show_threads:
        table.add_column("threads", justify="right")
    family = _family(results)
    numbers = [family.count_column] + (["±k"] if show_delta else [])
    numbers += ["median ms", "spread", "NoOp ms", "net ms", "ns/test", "speedup", "cyc/test"]
    numbers += ["bound", "% bound"] if show_bound else []
    numbers += ["IPC"] if show_counters else []
    numbers += ["index ms", "index KB"] if show_index else []
    for name in numbers:  # two-line headers: the numbers, not the words, set the widths
        table.add_column(RUN_HEADERS.get(name, name), justify="right")
    table.add_column("notes")
    notes: list[str] = []

    def note_number(text: str) -> str:
        if text not in notes:
            notes.append(text)
        return f"[{notes.index(text) + 1}]"

    used_abbreviations = {}
    for r in results:
        flags = (  # a peer's flags cell shows its flags ("—") alone
            abbreviate_flags(r.flags)
            if r.cc == PEER_CC
            else build_label(r.cc, abbreviate_flags(r.flags), r.cc != results[0].cc)
        )
        used_abbreviations.update(
            {short: long for long, short in FLAG_ABBREVIATIONS.items() if long in r.flags.split()}
        )
        cells = [r.kernel, flags]
        if show_mode:
            cells.append(r.mode)
        if show_threads:
            cells.append(str(r.threads))
        if r.status != "ok":
            style = "yellow" if r.status == "skipped" else "red"
            status = Text(r.status, style=style)
            cells += [status, *["–"] * (len(numbers) - 1), note_number(f"{r.kernel}: {r.status}: {r.reason}")]
            table.add_row(*map(literal, cells))
            continue
        delta = []
        if show_delta:
            wanted = expected.get(r.key)
            style = "bold red" if id(r) in wrong else "magenta"
            delta = [Text(f"{r.hits - wanted:+d}", style=style) if wanted not in (None, r.hits) else ""]
        row_notes = [note_number(warning) for warning in r.warnings]
        if id(r) in wrong:
            row_notes.insert(0, note_number(f"{r.kernel} [{r.flags}]: {wrong[id(r)].note}"))
        speedup = None if id(r) in wrong else shown_speedup(r, results)
        cells += [
            family.count_cell(r.hits, r.tests),
            *delta,
            _ms(r.median_s),
            f"{r.spread:.0%}",
            _ms(r.overhead_s),
            _ms(r.net_s),
            "–" if r.ns_per_test is None else f"{r.ns_per_test:.3f}",
            speedup_cell(speedup),
            _number(r.cycles_per_test, ".2f"),
        ]
        if show_bound:
            cells += [_number(r.bound_cycles_per_test, ".2f"), _number(r.percent_of_bound, ".0f")]
        if show_counters:
            cells.append(_number(r.ipc, ".2f"))
        if show_index:
            cells += [_ms(r.index_build_s), "–" if r.index_bytes is None else f"{r.index_bytes / 1024:.1f}"]
        if r.broadphase:
            row_notes.append(
                note_number(
                    f"{r.kernel} [{flags}]: end to end (index build + query), no NoOperation subtracted; "
                    f"narrow phase {r.narrow_phase}, {r.candidates} candidate pairs"
                    + (f", index written {r.index_scatter}" if r.index_scatter else "")
                )
            )
        table.add_row(*map(literal, [*cells, " ".join(row_notes)]))
    captions = []
    if show_delta:
        captions.append(
            "±k: " + family.count_difference.format(expected=judged_against, family=results[0].family) + "."
        )
    if used_abbreviations:
        captions.append("flags: " + ", ".join(f"{short} = {long}" for short, long in used_abbreviations.items()))
    # a note may quote what a kernel printed: its terminal escapes shown, never sent
    captions += [f"[{i + 1}] {shown_line(note)}" for i, note in enumerate(notes)]
    captions += [caption] if (caption := speedup_caption(results)) else []
    if wrong:
        captions.append(
            "speedup: – where the row's answers differ (its note): a kernel that answers otherwise is not ranked"
        )
    captions += run_notes(run)
    if captions:
        table.caption = literal("\n".join(captions), "table.caption")
        table.caption_justify = "left"
    return table


def kernels_table(kernels: list[Kernel], builds: list[str] = ()) -> Table:
    """The kernels of a build; `builds` names the builds the listing is for, when not all."""
    title = "kernels" + (f" ({', '.join(builds)})" if builds else "")
    table = Table(title=literal(title, "table.title"), title_justify="left")
    for name in ("name", "family", "loop", "needs", "here", "takes", "about"):
        table.add_column(name, no_wrap=name == "name")  # a name is never split: it is typed into --kernels
    for k in kernels:
        if k.runnable:
            here = Text("yes", style="green")
        else:
            here = Text(f"no: {k.skip_reason}", style="yellow")
        about = f"{k.summary} (known-bad reference: run only when named)" if k.known_bad else k.summary
        table.add_row(
            *map(literal, [k.name, k.family, k.loop, ", ".join(k.isa) or "–", here, ", ".join(k.takes), about])
        )
    return table


def verify_table(result) -> Table:
    table = Table(
        title=literal(
            f"verify: {result.family} family, {result.cases} cases"
            + (f", seed {result.seed}" if result.seed is not None else ", user input"),
            "table.title",
        ),
        title_justify="left",
    )
    for name, justify in (
        ("kernel", "left"),
        ("flags", "left"),
        ("cases", "right"),
        ("rounding-band", "right"),
        ("logic-bug", "right"),
        ("special-value", "right"),
        ("nondeterministic", "right"),
        ("worst margin", "right"),
        ("bound", "right"),
        ("verdict", "left"),
    ):
        table.add_column(name, justify=justify, no_wrap=name in ("kernel", "flags"))
    styles = {"exact": "green", "rounding-band": "cyan", "FAIL": "bold red"}
    for k in result.kernels:
        if k.status != "ok":
            table.add_row(
                literal(k.kernel),
                literal(k.flags),
                *["–"] * 7,
                Text(shown_line(f"{k.status}: {k.reason}"), style="yellow" if k.status == "skipped" else "red"),
            )
            continue
        counts = [
            str(k.mismatches.get(name, 0))
            for name in ("rounding-band", "logic-bug", "special-value", "nondeterministic")
        ]
        worst = (
            "–" if k.worst_margin is None else ("inf" if k.worst_margin == float("inf") else f"{k.worst_margin:.3g}")
        )
        table.add_row(
            literal(k.kernel),
            literal(k.flags),
            str(k.cases),
            *counts,
            worst,
            f"{k.rounding_bound:g}",
            Text(k.verdict, style=styles.get(k.verdict, ""))
            + Text(shown_line("".join(f"; {note}" for note in getattr(k, "notes", ()))), style="yellow"),
        )
    return table


def failing_inputs_table(verdict) -> Table:
    """The first wrong answers of a kernel; their inputs, as exact hex floats, are in
    failing_inputs_lines (printed below the table, never wrapped or cut: a user pastes them
    into float.fromhex)."""
    table = Table(
        title=literal(
            f"{verdict.kernel} [{verdict.flags}]: first {len(verdict.failing)} wrong answers "
            f"(their inputs below, as exact hex floats)",
            "table.title",
        ),
        title_justify="left",
    )
    labelled = any(row.get("labels") for row in verdict.failing)  # a case file's text columns
    for name in ("row", *(("labels",) if labelled else ()), "group", "class", "margin", "kernel", "oracle"):
        table.add_column(name, no_wrap=name == "row")
    for row in verdict.failing:
        margin = "–" if row["margin"] is None else f"{row['margin']:.3g}"
        labels = (" ".join(f"{k}={v}" for k, v in row.get("labels", {}).items()),) if labelled else ()
        cells = [*labels, row["group"], row["class"], margin, str(row["kernel"])]
        cells += ["–" if row["oracle"] is None else str(row["oracle"])]
        table.add_row(_row_number(row), *map(literal, cells))
    return table


def _row_number(row: dict) -> str:
    return "–" if row["row"] is None else str(row["row"])


def failing_inputs_lines(verdict) -> list[str]:
    """One line per wrong answer with inputs: `row 123: cx=0x1.8p+0 cy=...`."""
    return [
        f"row {_row_number(row)}: " + " ".join(f"{k}={v}" for k, v in row["inputs"].items())
        for row in verdict.failing
        if row["inputs"]
    ]


#: The compare matrix's marks in place of a ratio's interval, and what each means (its legend).
NOISE_RATIO = "×–"
NO_INTERVAL = "[n/a]"
ANSWERS_DIFFER = "✗ answers differ"
#: The rule compare/answers.py applies, in one line for a caption.
ANSWERS_RULE = (
    "its count lies further from the exact oracle's count, or without one from the reference kernel's "
    "in the first build, than float32 rounding allows on this scene (where a family's kernels may answer "
    "differently by ties, from its own kernel's in the first build)"
)
COMPARE_LEGEND = {
    ANSWERS_DIFFER: "this build's answers are not the kernel's: " + ANSWERS_RULE + "; never the fastest, "
    "whatever its time (run `sectorbench verify` on that build)",
    NOISE_RATIO: "no ratio: this build's or the first build's net time is not clearly above 0 "
    "(too small next to the NoOperation to measure; `--table` shows the row's note), and a ratio to "
    "noise is no speedup, nor is any build of that kernel called the fastest",
    NO_INTERVAL: "no interval: in some round this build's or the first build's net time (kernel − "
    "NoOperation) was 0 or below, or they ran a different number of rounds, so the per-round ratios "
    "are undefined; the × is the ratio of the median net times",
}


def compare_table(run: RunResult, confidence: float = 0.95) -> Table:
    """Kernels x builds: net ns/test, the ratio to the first build with its paired interval."""
    several_cc = shows_cc(r.key for r in run.results)
    builds = list(dict.fromkeys(build_label(r.cc, r.flags, several_cc) for r in run.results))
    modes = list(dict.fromkeys(r.mode for r in run.results))
    # A row of the matrix is a kernel in one mode at one thread count: keyed by kernel and mode
    # alone, the rows of `--threads 1 --threads 2` fell into one cell and the last one showed, unnamed.
    threads = list(dict.fromkeys(r.threads for r in run.results))
    # Where a row's net does not hold (measure/validity), the fastest build is the fastest end to end.
    by_gross = any(r.net_valid is False for r in run.results)
    table = Table(
        # The × is the median of the per-round ratios, which can contradict the medians shown
        # (3.285 and 3.695 ns with ×1.02; plot's heat map, of those medians, says ×1.12): said here.
        title=f"net ns/test; ×ratio to the first build: the median of the ratios of its rounds to the "
        f"first build's same rounds, not the ratio of the medians shown, which it can contradict "
        f"[{confidence:.0%} interval]; "
        + ("fastest build by gross time (a row is memory-bound) in green" if by_gross else "fastest build in green"),
        title_justify="left",
    )
    table.add_column("kernel", no_wrap=True, style="bold")
    if len(modes) > 1:
        table.add_column("mode")
    if len(threads) > 1:
        table.add_column("threads", justify="right")
    for build in builds:
        table.add_column(literal(build), justify="right")
    rows = {}
    for r in run.results:
        rows.setdefault((r.kernel, r.mode, r.threads), {})[build_label(r.cc, r.flags, several_cc)] = r
    shown = set()  # which of the legend's marks the matrix shows
    wrong = answers.differing_by_row(run)  # a build whose answers differ is marked and never the fastest
    for (kernel, mode, count), cells in rows.items():
        first = cells.get(builds[0])
        measured = {b: c for b, c in cells.items() if c.status == "ok" and c.ns_per_test is not None}
        speed = {b: c.median_s if by_gross else c.ns_per_test for b, c in measured.items() if id(c) not in wrong}
        # On net time, a build whose net is not clearly above 0 cannot be ranked (its ×– says "a ratio
        # to noise is no speedup"): then no build of the row is called the fastest.
        noise = not by_gross and any(not c.net_above_zero for b, c in measured.items() if b in speed)
        fastest = min(speed, key=speed.get) if speed and not noise else None
        out = [literal(kernel)] + ([literal(mode)] if len(modes) > 1 else [])
        out += [str(count)] if len(threads) > 1 else []
        for build in builds:
            cell = cells.get(build)
            if cell is None or cell.status != "ok" or cell.ns_per_test is None:
                out.append(Text("–" if cell is None else cell.status, style="yellow"))
                continue
            text = f"{cell.ns_per_test:.3f}"
            # A first build measured at a net of 0 (clamped) gets its ×– too, not a bare number.
            if first is not None and first is not cell and first.ns_per_test is not None:
                if not (cell.net_above_zero and first.net_above_zero):
                    text += f"\n{NOISE_RATIO}"
                    shown.add(NOISE_RATIO)
                elif (
                    interval := paired_ratio_if_defined(cell.net_samples_s, first.net_samples_s, confidence)
                ) is not None:
                    text += f"\n×{interval.estimate:.2f} [{interval.low:.2f}, {interval.high:.2f}]"
                elif first.net_s:
                    text += f"\n×{cell.net_s / first.net_s:.2f} {NO_INTERVAL}"
                    shown.add(NO_INTERVAL)
            if id(cell) in wrong:
                text += f"\n{ANSWERS_DIFFER}: {wrong[id(cell)].amount}"
                shown.add(ANSWERS_DIFFER)
                out.append(Text(text, style="bold red"))
                continue
            out.append(Text(text, style="bold green" if build == fastest and len(measured) > 1 else ""))
        table.add_row(*out)
    legend = [f"{mark}: {COMPARE_LEGEND[mark]}" for mark in COMPARE_LEGEND if mark in shown]
    if legend:  # literal: rich would read "[n/a]" as a style tag and drop it
        table.caption = literal("\n".join(legend), "table.caption")
        table.caption_justify = "left"
    return table


def unmeasured_lines(run: RunResult) -> list[str]:
    """Why each cell of compare's matrix that says only "crashed", "timed-out", … was not
    measured: one line each, under the matrix (else only --table said it)."""
    several_cc, several_modes = shows_cc(r.key for r in run.results), len({r.mode for r in run.results}) > 1
    several_threads = len({r.threads for r in run.results}) > 1  # the matrix's threads column
    return [
        f"{r.kernel} [{build_label(r.cc, r.flags, several_cc)}{f', {r.mode}' if several_modes else ''}"
        f"{f', {r.threads} threads' if several_threads else ''}]: {r.status}: {r.reason}"
        for r in run.results
        if r.status != "ok" and r.reason
    ]


def gate_table(report, baseline_label: str | None = None, current_label: str | None = None) -> Table:
    """The gate's rows; its caption says what the two sides are (the Markdown's header does
    too) and lists the kernels only the current side has, as the Markdown does (a kernel new in
    an A/B run's head was left out of the console's table without a word)."""
    table = Table(
        title=literal(
            f"regression gate: α = {report.config.alpha}, threshold {report.config.threshold:.0%}"
            + (f", normalised by {report.config.normalize}" if report.config.normalize else ""),
            "table.title",
        ),
        title_justify="left",
    )
    unit = compared_unit(report)
    show_cc = shows_cc([r.key for r in report.rows] + [f.key for f in report.failures])
    for name in ("kernel", "flags", "mode", "baseline ms", "current ms", "ratio [interval]", "p", "verdict"):
        table.add_column(
            name.replace("ms", unit),
            justify="right" if name in ("baseline ms", "current ms", "p") else "left",
            no_wrap=name in ("kernel", "flags"),
        )
    styles = {
        "regression": "bold red",
        "improvement": "green",
        "unchanged": "",
        "inconclusive": "yellow",
        "unchanged code": "dim",
    }
    for row in report.rows:
        p = row.p_slower if row.ratio >= 1 else row.p_faster
        table.add_row(
            literal(row.kernel),
            literal(build_label(row.cc, row.flags, show_cc)),
            literal(_mode(row.key)),
            *(
                compared_value(row, report.config.normalize, side, lambda seconds: f"{seconds * 1e3:.3f}")
                for side in ("baseline", "current")
            ),
            f"{row.ratio:.3f} [{row.low:.3f}, {row.high:.3f}]",
            f"{p:.3g}" if p == p else "–",  # NaN: a deterministic count, no test made
            Text(row.verdict, style=styles.get(row.verdict, "")),
        )
    for failure in report.failures:
        key = failure.key
        failed = Text(f"FAILED: {failure.text}", "bold red")
        names = (key.kernel, build_label(key.cc, key.flags, show_cc), _mode(key))
        table.add_row(*map(literal, names), "–", "–", "–", "–", failed)
    sides = [f"baseline: {baseline_label}; current: {current_label}"] if baseline_label and current_label else []
    new_show_cc = shows_cc([*(r.key for r in report.rows), *(f.key for f in report.failures), *report.new_kernels])
    new = ", ".join(row_label(key, new_show_cc) for key in report.new_kernels)
    table.caption = literal(
        "\n".join(
            [
                *sides,
                f"ratio: {ratio_note(report)}",
                *counted_note(report),
                *([f"new in current, not compared: {new}"] if new else []),
                *report.warnings,
            ]
        ),
        "table.caption",
    )
    table.caption_justify = "left"
    return table


# --------------------------------------------------------------------------
# Fitting a table to the terminal: columns are left out (or, for the compare matrix,
# spread over several tables) until the table fits; a cell is wrapped at spaces but never
# cut, so no number ever shows as "2…".

#: What goes first when a table is too wide, most expendable first.  A column whose cells
#: are all blank, 0 or – goes before the others listed.
RUN_DROP = ("spread", "NoOp ms", "IPC", "% bound", "bound", "cyc/test", "hit %", "notes", "threads", "net ms")
VERIFY_DROP = (
    "bound",
    "cases",
    "worst margin",
    "nondeterministic",
    "special-value",
    "rounding-band",
    "logic-bug",
)
GATE_DROP = ("p", "mode", "baseline ms", "current ms")


def gate_drop(report) -> tuple[str, ...]:
    """GATE_DROP with the baseline/current columns named as gate_table names them."""
    unit = compared_unit(report)
    return tuple(name.replace("ms", unit) if name.endswith(" ms") else name for name in GATE_DROP)


#: Headers that may break where a reader expects (a single word cannot wrap).
HEADER_BREAKS = {
    "rounding-band": "rounding-\nband",
    "logic-bug": "logic-\nbug",
    "special-value": "special-\nvalue",
    "nondeterministic": "non-\ndeterministic",
}
_BLANK = {"", "0", "–", "-"}


def _plain(cell) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


def _wrappable(table: Table, keep_lines: bool = False) -> Table:
    """A copy whose columns wrap at spaces (folding only a word longer than the column);
    with keep_lines, the columns marked no_wrap (a kernel, its flags) still do not."""
    table = copy.copy(table)
    table.columns = [copy.copy(column) for column in table.columns]
    for column in table.columns:
        if keep_lines and column.no_wrap:  # rich would still narrow it to its longest word, and cut
            column.min_width = max((_measuring_console().measure(cell).maximum for cell in column.cells), default=0)
        else:
            column.no_wrap, column.overflow = False, "fold"
        if isinstance(column.header, str):
            column.header = HEADER_BREAKS.get(column.header, column.header)
    return table


def _measuring_console() -> Console:
    return Console(width=10_000, file=io.StringIO())


def min_width(table: Table) -> int:
    """The narrowest the table can be drawn without folding a word."""
    return _measuring_console().measure(table).minimum


def _settle(table: Table, width: int | None) -> Table:
    """Fix each column's width between its narrowest (longest word) and widest, within `width`.

    rich would narrow the widest columns first, folding a kernel name while numbers keep
    spare room; here every column gets at least its longest word and the rest of the
    width goes to the columns that can use it, in proportion.
    """
    table.columns = [copy.copy(column) for column in table.columns]
    for index, column in enumerate(table.columns):
        column._index = index  # rich pads the first and last columns by their position
    if width is None:
        return table
    console = _measuring_console()
    options = console.options
    ranges = [table._measure_column(console, options, column) for column in table.columns]
    pads = [table._get_padding_width(index) for index in range(len(table.columns))]
    room = width - table._extra_width - sum(r.minimum for r in ranges)
    slack = [r.maximum - r.minimum for r in ranges]
    if room < 0 or room >= sum(slack):
        return table  # nothing to share (too narrow anyway, or everything fits at its widest)
    for column, r, pad, extra in zip(table.columns, ranges, pads, slack):
        column.width = r.minimum - pad + (extra * room) // sum(slack)
    return table


def fit(table: Table, width: int | None, drop: Sequence[str] = (), whole_lines: bool = False) -> Table:
    """`table` narrowed to `width`: columns named in `drop` left out until it fits.

    Columns whose cells are all blank, 0 or – go first, then the others in `drop`
    order; the caption says which were left out.  Rows stay one line while leaving columns
    out can keep them so (no_wrap columns unwrapped) — always with `whole_lines`, else when
    that costs no column; past that, cells wrap at spaces.
    """
    wrapped = _fit(table, width, drop, keep_lines=False)
    if width is None:
        return wrapped
    lines = _fit(table, width, drop, keep_lines=True)
    if min_width(lines) <= width and (whole_lines or len(lines.columns) >= len(wrapped.columns)):
        return lines
    return wrapped


def _fit(table: Table, width: int | None, drop: Sequence[str], keep_lines: bool) -> Table:
    names = {id(column): _plain(column.header).replace("\n", " ") for column in table.columns}
    original = table.columns
    table = _wrappable(table, keep_lines)
    if width is None or min_width(table) <= width:
        return _settle(table, width)
    by_name = {names[id(old)]: new for old, new in zip(original, table.columns)}
    listed = [by_name[name] for name in drop if name in by_name]
    blank = [column for column in listed if all(_plain(cell).strip() in _BLANK for cell in column.cells)]
    dropped = []
    for column in blank + [column for column in listed if column not in blank]:
        if min_width(table) <= width:
            break
        table.columns.remove(column)
        if column not in blank:
            dropped.append(next(name for name, new in by_name.items() if new is column))
    if dropped:
        note = f"left out to fit {width} columns: {', '.join(dropped)} (a wider terminal or --json has them)"
        table.caption = literal(f"{_plain(table.caption)}\n{note}" if table.caption else note, "table.caption")
        table.caption_justify = "left"
    return _settle(table, width)


def split(table: Table, width: int | None, fixed: Sequence[str] = ("kernel", "mode", "threads")) -> list[Table]:
    """`table` as several tables that each fit `width`: its leading columns named in `fixed`
    in each, then as many of the others as fit, in order (at least one a table)."""
    table = _wrappable(table)
    if width is None or min_width(table) <= width:
        return [_settle(table, width)]
    count = 0
    while count < len(table.columns) and _plain(table.columns[count].header) in fixed:
        count += 1
    head, rest = table.columns[:count], table.columns[count:]
    parts: list[list] = []
    for column in rest:
        trial = copy.copy(table)
        trial.columns = [*head, *(parts[-1] if parts else []), column]
        if parts and min_width(trial) <= width:
            parts[-1].append(column)
        else:
            parts.append([column])
    tables = []
    for index, columns in enumerate(parts):
        part = copy.copy(table)
        part.columns = [*head, *columns]
        if index:
            part.title = f"(continued, {index + 1} of {len(parts)})"
        if index < len(parts) - 1:
            part.caption = None
        tables.append(_settle(part, width))
    return tables


# --------------------------------------------------------------------------
# The gate's report as Markdown (for a job summary or a pull request)


def ms_significant(seconds: float) -> str:
    """Milliseconds with 3 significant digits (more only for >= 1000 ms)."""
    value = seconds * 1e3
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    rounded = float(f"{value:.3g}")  # 9.996 -> 10.0, so the digit count below is right
    decimals = max(0, 2 - math.floor(math.log10(abs(rounded))))
    return f"{rounded:.{decimals}f}"


def _percent(fraction: float) -> str:
    return f"{fraction * 100:.3g} %"


def _p(value: float) -> str:
    if value != value:
        return "–"  # NaN: a deterministic count, no test made
    return "< 0.0001" if value < 1e-4 else f"{value:.2g}"


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


#: The gate's baseline/current columns when every row was gated on valgrind's counts.
INSTRUCTIONS_UNIT = "instr/test"
#: Said under a gate table some of whose rows were counted, some timed.
COUNTED_NOTE = (
    "Rows in instr/test were gated on valgrind's instruction counts instead (net instructions "
    "per test; the ratio is of those counts, and a count needs no p)."
)


def counted_note(report) -> list[str]:
    """COUNTED_NOTE, for a gate table some of whose rows were counted and some timed (none when
    every row was counted: its columns' unit says so)."""
    mixed = compared_unit(report) != INSTRUCTIONS_UNIT and any(r.counted for r in report.rows)
    return [COUNTED_NOTE] if mixed else []


def compared_unit(report) -> str:
    """The unit of the gate's baseline/current columns: instr/test when every row was counted
    (--metric instructions), else ms, or the reference they are divided by."""
    if report.rows and all(r.counted for r in report.rows):
        return INSTRUCTIONS_UNIT
    normalize = report.config.normalize
    if normalize is None:
        return "ms"
    return "(÷ NoOperation)" if normalize == OVERHEAD else f"(÷ {normalize})"


#: What the gate's ratio column is: stats.compare's Hodges-Lehmann estimate, which can disagree
#: with the medians beside it (0.301 -> 0.304 ms shown with a ratio of 0.940).
RATIO_NOTE = (
    "the ratio is current / baseline of that quantity as the Hodges–Lehmann estimate, the median of the "
    "ratios of every current round to every baseline round (its interval Moses'), not the ratio of the two "
    "medians shown, which it can contradict"
)


#: What a counted row compares (gate.compared_counts).
COUNTS_COMPARED = (
    "each kernel's net instructions per test under valgrind (--metric instructions; gross on both sides "
    "where either net is not above 0)"
)
#: The ratio of a counted row: a count has no rounds to estimate over.
COUNTS_RATIO_NOTE = "the ratio is current / baseline of those counts"


def ratio_note(report) -> str:
    """What the gate table's ratio column is: of counts when every row was counted, else the
    rounds' estimate (the console had given the latter under a table of counts alone)."""
    return COUNTS_RATIO_NOTE if compared_unit(report) == INSTRUCTIONS_UNIT else RATIO_NOTE


def compared_note(report) -> str:
    """One line saying what the gate compared, which its baseline/current columns show."""
    if compared_unit(report) == INSTRUCTIONS_UNIT:
        return f"Compared: {COUNTS_COMPARED}; {COUNTS_RATIO_NOTE}."
    normalize = report.config.normalize
    what = "each kernel's time per pass (gross: its NoOperation not subtracted), median ms"
    if normalize == OVERHEAD:
        what = "each kernel's time per pass divided by its own NoOperation's in the same round, median ratio"
    elif normalize:
        what = f"each kernel's time per pass divided by {normalize}'s in the same round, median ratio"
    return f"Compared: {what}; {RATIO_NOTE}."


def compared_value(row, normalize: str | None, side: str, ms=ms_significant) -> str:
    """A row's median of the compared quantity (GateRow.baseline_compared or current_compared)."""
    compared, seconds = getattr(row, f"{side}_compared"), getattr(row, f"{side}_median_s")
    if row.counted:
        return f"{compared:.4g} {INSTRUCTIONS_UNIT}"
    if normalize is None:
        return ms(seconds if compared is None else compared)
    return "–" if compared is None else f"{compared:.4g}"


def _summary(report) -> str:
    config = report.config
    counts = [
        *([_plural(len(report.failures), "failure")] if report.failures else []),
        _plural(len(report.regressions), "regression"),
        _plural(len(report.improvements), "improvement"),
        f"{len(report.unchanged)} unchanged",
    ]
    if report.inconclusive:
        counts.append(f"{len(report.inconclusive)} inconclusive")
    if report.unchanged_code:
        counts.append(f"{len(report.unchanged_code)} unchanged code")
    details = [f"α = {config.alpha:g}", f"threshold {_percent(config.threshold)}"]
    special = sorted({(r.kernel, r.threshold) for r in report.rows if r.kernel in config.per_kernel})
    details += [f"{kernel} {_percent(value)}" for kernel, value in special]
    if config.normalize == OVERHEAD:
        details.append("normalised by each kernel's NoOperation")
    elif config.normalize:
        details.append(f"normalised by {config.normalize}")
    return f"{', '.join(counts)} ({', '.join(details)})"


def _mode(key) -> str:
    """A gate row's mode, with its threads when more than one (a row of each thread count)."""
    return key.mode + (f", {key.threads} threads" if key.threads > 1 else "")


def gate_markdown(report, baseline_label: str = "baseline", current_label: str = "current") -> str:
    """GitHub-flavoured Markdown: summary line, table, then new kernels and warnings."""
    rows = report.rows
    show_cc = shows_cc([r.key for r in rows] + [f.key for f in report.failures] + list(report.new_kernels))
    show_threshold = len({r.threshold for r in rows}) > 1
    ratio_name = "ratio (normalised)" if report.config.normalize else "ratio"
    unit = compared_unit(report)
    header = [
        "kernel",
        "flags",
        "mode",
        f"{baseline_label} {unit}",
        f"{current_label} {unit}",
        f"{ratio_name} [{(1 - 2 * report.config.alpha) * 100:.3g} % interval]",
        "p",
        "verdict",
    ]
    if show_threshold:
        header.insert(7, "threshold")
    lines = [_summary(report), "", compared_note(report), ""]
    if note := counted_note(report):
        lines[-1:-1] = ["", *note]
    lines.append("| " + " | ".join(_cell(h) for h in header) + " |")
    lines.append(
        "|" + "|".join("---:" if h not in ("kernel", "flags", "mode", "verdict") else "---" for h in header) + "|"
    )
    for r in rows:
        # The p of the direction the estimate points to; the other is ~1 - p.
        p = r.p_slower if r.ratio >= 1 else r.p_faster
        verdict = f"**{r.verdict}**" if r.verdict in ("regression", "improvement") else r.verdict
        cells = [
            _cell(r.kernel),
            _cell(build_label(r.cc, r.flags, show_cc)),
            _cell(_mode(r.key)),
            *(compared_value(r, report.config.normalize, side) for side in ("baseline", "current")),
            f"{r.ratio:.3f} [{r.low:.3f}, {r.high:.3f}]",
            _p(p),
            verdict,
        ]
        if show_threshold:
            cells.insert(7, _percent(r.threshold))
        lines.append("| " + " | ".join(cells) + " |")
    for failure in report.failures:
        cells = [_cell(failure.key.kernel), _cell(build_label(failure.key.cc, failure.key.flags, show_cc))]
        cells += [_cell(_mode(failure.key)), *(["–"] * (len(header) - 4)), f"**FAILED: {_cell(failure.text)}**"]
        lines.append("| " + " | ".join(cells) + " |")
    if not rows and not report.failures:
        lines.append("| " + " | ".join(["–"] * len(header)) + " |")
    missing = [failure.key for failure in report.failures if failure.status == "missing"]
    if missing:
        lines += ["", f"Missing in {_cell(current_label)} (removed or renamed; each fails the gate):", ""]
        lines += [f"- {_cell(row_label(key, show_cc))}" for key in missing]
    if report.new_kernels:
        lines += ["", f"New in {_cell(current_label)} (not compared):", ""]
        lines += [f"- {_cell(row_label(key, show_cc))}" for key in report.new_kernels]
    if report.warnings:
        lines += ["", "Warnings:", ""]
        lines += [f"- {_cell(w)}" for w in report.warnings]
    return "\n".join(lines) + "\n"
