"""`regress` and `plot`: work on saved results."""

from __future__ import annotations

from dataclasses import replace

import click

from ..errors import SectorbenchError
from ..measure.timing import MODES
from ..model.text import shown_path
from .ab import count_revision
from .app import load_plain, main, note, run_gate
from .options import (
    INPUT_PATH,
    OUTPUT_PATH,
    check_outputs,
    gate_options,
    make_gate_config,
    not_empty,
    refuse_unused,
)


@main.command("regress")
@click.argument("baseline", type=INPUT_PATH)
@click.argument("current", type=INPUT_PATH)
@gate_options
@click.option(
    "--across-builds",
    is_flag=True,
    help="Pair kernels by name and mode, ignoring compiler and flags (one build per file) [default: off].",
)
@click.option(
    "--force", is_flag=True, help="Replace an existing --markdown file (a regular file only) [default: refuse]."
)
def regress_command(baseline, current, alpha, threshold, thresholds, normalize, markdown_path, across_builds, force):
    """Exit 1 if CURRENT is significantly slower than BASELINE (2 if they cannot be compared).

    A row with valgrind's instruction counts in both files (saved by a run with --metric
    instructions) is gated on the counts, as that run's gate was."""
    from ..compare.gate import as_baseline_build, check_saved_power, comparable_counts

    check_outputs(force, markdown_path, inputs=(baseline, current, thresholds))
    config = make_gate_config(alpha, threshold, thresholds, normalize)
    baseline_result, current_result = load_plain(baseline), load_plain(current)
    paired = None
    if across_builds:
        current_result, paired = as_baseline_build(current_result, baseline_result)
    # counts of another compiler are gated on time, so their rounds must reach alpha too
    current_result = comparable_counts(baseline_result, current_result)
    check_saved_power(baseline_result, current_result, config.alpha)
    counted = any(r.instructions is not None for r in (*baseline_result.results, *current_result.results))

    def revise(report):
        if counted:
            report = count_revision(baseline_result, current_result, report, config)
        return replace(report, warnings=(paired, *report.warnings)) if paired else report

    run_gate(baseline_result, current_result, config, markdown_path, force, str(baseline), str(current), revise=revise)


@main.command("plot")
@click.argument("results", nargs=-1, type=INPUT_PATH)
@click.option("--out", required=True, type=OUTPUT_PATH, help="Image file: .png or .svg.")
@click.option(
    "--chart",
    type=click.Choice(["bar", "heatmap", "trend"]),
    help="[default: trend when --kernel is given, heatmap for several builds, else bar].",
)
@click.option("--kernel", callback=not_empty, help="The kernel a trend follows [default: none, no trend].")
@click.option("--flags", "flags_filter", help="Trend: only this flag set [default: every flag set].")
@click.option("--mode", "mode_filter", type=click.Choice(MODES), help="Trend: only this mode [default: every mode].")
@click.option("--force", is_flag=True, help="Replace an existing image (a regular file only) [default: refuse].")
def plot_command(results, out, chart, kernel, flags_filter, mode_filter, force):
    """Draw saved results: bars with intervals, a flags x kernels heat map, or a kernel's trend.

    A trend without RESULTS reads every saved run under results/.
    """
    from ..compare.gate import check_usable
    from ..model.results import RESULTS_DIR
    from ..present import plot

    chart = chart or ("trend" if kernel else None)
    # a trend without RESULTS reads the saved runs under results/: those are its inputs
    # (`--out t.png --force`, t.png a link to one of them, replaced a saved run with the chart)
    reads = results or (plot.result_files(RESULTS_DIR) if chart == "trend" else ())
    check_outputs(force, out, inputs=reads)  # before anything is read or drawn
    plot.check_out(out, force)
    if chart == "trend":
        if not kernel:
            raise click.UsageError("a trend needs --kernel")
        # an A/B run's head rows, as regress and export take them (its rows come in pairs)
        loaded = [load_plain(p) for p in results] if results else plot.load_results_dir(RESULTS_DIR)
        for path, one in zip(results, loaded):  # what regress refuses is not drawn either
            check_usable(one, str(path))
        if not loaded:
            raise SectorbenchError(f"no saved results under {RESULTS_DIR}")
        for line in plot.trend_warnings(loaded):  # regress refuses another scene, warns of another CPU
            note(line)
        path = plot.trend_chart(loaded, kernel, out, flags=flags_filter, mode=mode_filter, overwrite=force)
    else:
        trend_only = (("--kernel", kernel), ("--flags", flags_filter), ("--mode", mode_filter))
        refuse_unused([name for name, value in trend_only if value], "to --chart trend")
        if len(results) != 1:
            raise click.UsageError("bar and heatmap charts take exactly one RESULT file")
        result = load_plain(results[0])
        check_usable(result, str(results[0]))
        several_builds = len({(r.cc, r.flags) for r in result.results}) > 1
        chart = chart or ("heatmap" if several_builds else "bar")
        draw = plot.heatmap if chart == "heatmap" else plot.bar_chart
        path = draw(result, out, overwrite=force)
    note(f"saved {shown_path(path)}")
