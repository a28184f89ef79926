"""run --against / --against-source (same-job A/B), --confirm, and --metric instructions."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from ..errors import SectorbenchError
from ..interrupts import scratch_directory
from ..measure.instructions import METRICS
from .app import note, result_json, run_gate, stdout, write_exports, write_json

TIME, INSTRUCTIONS = METRICS


def metric_option(what_counts_do: str):
    """--metric, its help ending in what the command does with the counts."""

    def option(command):
        return click.option(
            "--metric",
            type=click.Choice(METRICS),
            default=TIME,
            show_default=True,
            help="instructions: also count each loop's instructions once under valgrind (deterministic); "
            + what_counts_do,
        )(command)

    return option


def _scene(config):
    from ..families.scene_kinds import generate

    return generate(config.scene, config.sectors, config.points, config.seed, config.scene_options)


def with_metric(config, metric: str, measured):
    """measured()'s result, with valgrind's instruction counts when --metric instructions asks
    for them: counted within the --kernel-timeout and --max-minutes the run had."""
    from ..measure.deadlines import Budget, Deadlines

    budget = Budget.minutes_from_now(config.max_minutes)  # the run's, begun with it
    result = measured()
    if metric != INSTRUCTIONS:
        return result
    from ..measure.instructions import CountedBuild, annotate

    # Without valgrind every row's reason says so: print_instructions, or the gate, says it once.
    builds = [CountedBuild(b, "head" if config.base_builds else None) for b in config.builds]
    builds += [CountedBuild(b, "base") for b in config.base_builds]
    return annotate(result, builds, _scene(config), lambda what: note(what), Deadlines(config.kernel_timeout), budget)


def print_instructions(result, metric: str, gated: bool = False) -> None:
    """The counts' table; with no row counted, one line saying why instead (a gate that
    follows says it itself, among its warnings: `gated`)."""
    if metric != INSTRUCTIONS:
        return
    from ..present.ab import instructions_table, uncounted_summary

    if any(r.instructions is not None for r in result.results):
        stdout().print(instructions_table(result))
    elif not gated and (line := uncounted_summary(result)):
        stdout().print(line, highlight=False, markup=False)


def count_revision(baseline, current, report, gate_config, check_rounds: int | None = None, same_job: bool = True):
    """The report gated on instruction counts where both sides have them, the rest on time
    with one warning line saying why (compare.gate.uncounted_line).

    check_rounds: the rounds the current side was timed in, whose power was not checked before
    timing because counts need none: refused now if a row left to time cannot reach alpha with
    them, against as many of its own (same_job: run --against) or the baseline's saved rounds
    (run --baseline, which had refused 3 rounds against 5 before timing though every row was
    to be counted)."""
    from ..compare.gate import (
        UNCHANGED_CODE,
        check_ab_rounds,
        check_power,
        comparable_counts,
        gate_counts,
        uncounted_line,
        uncounted_rows,
        with_counts_noted,
    )
    from ..present.report import COUNTS_COMPARED

    current = comparable_counts(baseline, current)  # counts of another compiler: gated on time
    report = gate_counts(baseline, current, report)
    counted = sum(1 for r in report.rows if r.counted)
    if counted:
        note(f"instructions: {counted} row(s) gated on valgrind's counts: {COUNTS_COMPARED}")
    timed = {r.key for r in uncounted_rows(report) if r.verdict != UNCHANGED_CODE}
    if check_rounds is not None and timed:
        try:
            if same_job:
                check_ab_rounds(check_rounds, gate_config.alpha)
            else:
                timed_rows = [row for row in baseline.results if row.key in timed]
                check_power(replace(baseline, results=timed_rows), check_rounds, gate_config.alpha)
        except SectorbenchError as exc:
            raise SectorbenchError(f"{uncounted_line(report, baseline, current)}; and {exc}") from None
    return with_counts_noted(report, baseline, current)


def _restricted(config, keys, normalize):
    """The run config re-measuring only `keys` (and the kernel --normalize divides by)."""
    from ..compare.gate import OVERHEAD

    broadphases = [k.kernel for k in keys if k.kernel in config.broadphases and k.kernel != "none"]
    names = {k.kernel for k in keys if k.kernel not in broadphases}
    if normalize not in (None, OVERHEAD):
        names.add(normalize)
    flagged_builds = {(k.cc, k.flags) for k in keys}
    chosen = [i for i, b in enumerate(config.builds) if (b.cc, " ".join(b.flags)) in flagged_builds]
    return replace(
        config,
        kernels=tuple(sorted(names)),
        builds=tuple(config.builds[i] for i in chosen) or config.builds[:1],
        base_builds=tuple(config.base_builds[i] for i in chosen) if config.base_builds else (),
        modes=tuple(m for m in config.modes if m in {k.mode for k in keys}),
        threads=tuple(t for t in config.threads if t in {k.threads for k in keys}),
        broadphases=tuple(broadphases) or (("none",) if config.broadphases else ()),
    )


def gate_revision(config, baseline, current, gate_config, confirm: bool, metric: str, against_label=None):
    """What runs between the gate and its output: the counts' verdicts, then --confirm."""
    from ..compare.against import confirm as confirm_rows
    from ..compare.against import split
    from ..compare.gate import OVERHEAD, gate
    from .measure import measure

    def measure_again(keys):
        note(f"confirm: re-measuring {len(keys)} flagged row(s) in fresh rounds")
        again = measure(_restricted(config, keys, gate_config.normalize), against_label=against_label)
        if config.base_builds:
            base, head = split(again)
            return gate(base, head, gate_config)
        wanted = set(keys)
        if gate_config.normalize not in (None, OVERHEAD):  # and the rows theirs are divided by
            wanted |= {k.with_kernel(gate_config.normalize) for k in keys}
        base_rows = [r for r in baseline.results if r.key in wanted]
        return gate(replace(baseline, results=base_rows), again, gate_config)

    def revise(report):
        if metric == INSTRUCTIONS:
            report = count_revision(
                baseline, current, report, gate_config, config.timing.repeat, same_job=bool(config.base_builds)
            )
        if confirm:
            report, _ = confirm_rows(report, measure_again)  # its lines are among the report's warnings
        return report

    return revise


def _build_base(ab) -> None:
    """Build the base side first (cached: the run loads these same libraries), so that its
    compile error names the side: the compiler's message alone reads as the working tree's."""
    from ..native.build import BuildError, build

    for config in ab.base_builds:
        try:
            build(config)
        except SectorbenchError as exc:
            # still a BuildError, so the compiler's messages are quoted under the line (as a
            # plain SectorbenchError they were one line with every newline shown as \n)
            kind = BuildError if isinstance(exc, BuildError) else SectorbenchError
            raise kind(f"the base side ({ab.label}): {exc}") from None


def run_ab(
    config, against, against_source, sources, gate_config, confirm, metric, json_path, force, save, markdown, exports
):
    """run --against REF / --against-source OLD.c: both sides in one run, the run table, the A/B gate.

    --export writes the head's rows: a dashboard tracks the code as it is now, and the base is
    only its reference in this run (the JSON keeps both sides)."""
    from ..compare.against import against_ref, split
    from ..compare.against import against_source as against_file
    from ..present.ab import with_sides
    from ..present.report import RUN_DROP, fit, run_table
    from .measure import measure

    if against:
        try:
            here = Path.cwd()
        except FileNotFoundError:  # removed since the shell entered it
            raise SectorbenchError(f"--against {against}: the current directory no longer exists") from None
    with scratch_directory("sectorbench-against-") as scratch:
        if against:
            ab = against_ref(against, config.builds, tuple(sources), scratch, here)
        else:
            ab = against_file(against_source, config.builds, tuple(sources))
        _build_base(ab)  # a base that does not compile is the first line said, and the only one
        for line in ab.notes:
            note(line)
        config = replace(config, builds=ab.head_builds, base_builds=ab.base_builds)
        result = with_metric(config, metric, lambda: measure(config, gate_config=gate_config, against_label=ab.label))
        result = replace(result, config={**result.config, "against": ab.label})
        console = stdout()
        console.print(fit(run_table(with_sides(result)), console.width, RUN_DROP))
        print_instructions(result, metric, gated=True)
        write_json(result, json_path, force, save)
        base, head = split(result)
        write_exports(head, exports, force, gated=True)
        revise = gate_revision(config, base, head, gate_config, confirm, metric, ab.label)
        run_gate(
            base,
            head,
            gate_config,
            markdown,
            force,
            f"base {ab.label}",
            "head",
            rescue=result_json(result),
            revise=revise,
        )
