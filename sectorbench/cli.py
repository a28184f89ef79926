"""The command line: the only module that prints or chooses exit codes.

Exit status: 0 ok, 1 a check failed (verify, regress), 2 usage, build or internal error.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from . import SectorbenchError, __version__
from .build import DEFAULT_CC, BuildConfig
from .families import all_families
from .gate import GateConfig, load_thresholds
from .results import check_output, load, save, timestamped_path, write_text_atomic
from .runner import RunConfig, run
from .scenes import kinds as scene_kinds
from .timing import DEFAULT_MIN_SAMPLE_S, DEFAULT_REPEAT, MODES, TimingConfig
from .verify import VerifyConfig

#: `run` compares the article's pair by default: plain -O2 and -O2 with fast math
#: (the article's default vs /fp:fast builds).
DEFAULT_RUN_FLAGS = ("-O2", "-O2 -ffast-math")

#: Tables going to a file or pipe are not squeezed into 80 columns.
PIPED_WIDTH = 160
stderr = Console(stderr=True)


def stdout() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=PIPED_WIDTH)


class OneLineErrors(click.Group):
    """Report every user error as one line on stderr with exit status 2, never a traceback."""

    def main(self, args=None, prog_name="sectorbench", complete_var=None, standalone_mode=True, **extra):
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.Abort:
            click.echo("sectorbench: interrupted", err=True)
            code = 130
        except click.ClickException as exc:
            click.echo(f"sectorbench: error: {exc.format_message()}", err=True)
            code = 2
        except SectorbenchError as exc:
            click.echo(f"sectorbench: error: {exc}", err=True)
            code = 2
        except Exception as exc:  # a bug: one line unless asked for the traceback
            if os.environ.get("SECTORBENCH_DEBUG"):
                raise
            click.echo(
                f"sectorbench: internal error: {type(exc).__name__}: {exc} (set SECTORBENCH_DEBUG=1 for the traceback)",
                err=True,
            )
            code = 2
        if standalone_mode:
            sys.exit(code if isinstance(code, int) else 0)
        return code


class RegistryChoice(click.Choice):
    """A choice among names the family registry knows, read when first needed.

    Reading the registry imports the family modules (the user's too, from
    $SECTORBENCH_FAMILIES), which may fail; deferring it to parsing time turns that
    failure into one line like every other error, instead of a traceback at import.
    """

    def __init__(self, names):
        self._names = names
        super().__init__((), case_sensitive=True)

    @property
    def choices(self):
        return tuple(self._names())

    @choices.setter
    def choices(self, _):
        pass


def comma_list(ctx, param, values) -> tuple[str, ...]:
    """Accept both --kernels a,b and --kernels a --kernels b."""
    return tuple(item.strip() for value in values for item in value.split(",") if item.strip())


def make_progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
    )


def build_configs(flags: tuple[str, ...], cc: tuple[str, ...], sources=()) -> tuple[BuildConfig, ...]:
    return tuple(BuildConfig.parse(f, compiler, sources) for compiler in cc for f in flags)


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sectorbench")
def main():
    """Benchmark and verify float32 point-in-sector kernels written in C."""
    all_families()  # a family module that fails to import stops here, in one line


def build_options(default_flags: tuple[str, ...]):
    def decorate(command):
        command = click.option(
            "--cc",
            "cc",
            multiple=True,
            default=(DEFAULT_CC,),
            show_default=True,
            help="C compiler (repeatable to compare compilers; default $CC or cc).",
        )(command)
        command = click.option(
            "--flags",
            "flags",
            multiple=True,
            default=default_flags,
            show_default=True,
            help='Compiler flags as one string, e.g. "-O2 -msse2" (repeatable).',
        )(command)
        command = click.option(
            "--source",
            "sources",
            multiple=True,
            type=click.Path(exists=True, dir_okay=False, path_type=Path),
            help="Your own C file of kernels to link in (repeatable; see the README).",
        )(command)
        command = click.option(
            "--disable-isa",
            "disable_isa",
            multiple=True,
            callback=comma_list,
            help="Treat these CPU features as missing (e.g. sse2): their kernels are skipped.",
        )(command)
        return command

    return decorate


def output_options(command):
    command = click.option(
        "--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Write the results as JSON here."
    )(command)
    command = click.option("--force", is_flag=True, help="Replace an existing --json file.")(command)
    return command


def gate_options(command):
    command = click.option(
        "--alpha",
        default=GateConfig.alpha,
        show_default=True,
        help="Significance level of the one-sided Mann-Whitney test.",
    )(command)
    command = click.option(
        "--threshold",
        default=GateConfig.threshold,
        show_default=True,
        help="Smallest slowdown that counts (0.10 = 10 %); the interval's lower bound must exceed it.",
    )(command)
    command = click.option(
        "--thresholds",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="TOML file of per-kernel thresholds (see the README).",
    )(command)
    command = click.option(
        "--normalize",
        help="Compare times as ratios to this kernel of the same run ('overhead': each kernel's own NoOperation).",
    )(command)
    command = click.option(
        "--markdown",
        "markdown_path",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Also write the comparison as a Markdown table here.",
    )(command)
    return command


def make_gate_config(alpha, threshold, thresholds, normalize) -> GateConfig:
    per_kernel = load_thresholds(thresholds) if thresholds else {}
    return GateConfig.from_thresholds({"default": threshold, **per_kernel}, alpha=alpha, normalize=normalize)


def run_gate(baseline, current, config, markdown_path, force, baseline_label, current_label) -> None:
    from .gate import gate
    from .report import gate_markdown, gate_table

    report = gate(baseline, current, config)
    stdout().print(gate_table(report))
    if markdown_path is not None:
        write_text_atomic(markdown_path, gate_markdown(report, baseline_label, current_label), overwrite=force)
        stderr.print(f"saved {markdown_path}")
    names = ", ".join(f"{r.kernel} [{r.flags}, {r.mode}]" for r in report.regressions)
    stderr.print(
        f"{len(report.regressions)} regression(s)"
        + (f": {names}" if names else "")
        + f", {len(report.improvements)} improvement(s)"
    )
    click.get_current_context().exit(report.exit_code)


def refuse_existing(path: Path | None, force: bool) -> None:
    """Fail before measuring, not after, when the output file would be refused."""
    if path is not None:
        check_output(path, force)


def write_json(result, json_path: Path | None, force: bool, save_to_results: bool = False, label: str = "run"):
    for path, overwrite in ((json_path, force), (timestamped_path(label=label) if save_to_results else None, False)):
        if path is not None:
            save(result, path, overwrite=overwrite)
            stderr.print(f"saved {path}")


@main.command("run")
@click.option(
    "-n", "--sectors", default=RunConfig.sectors, show_default=True, help="N: shapes (sectors, triangles, ...)."
)
@click.option("-m", "--points", default=RunConfig.points, show_default=True, help="M: points.")
@click.option("--seed", default=RunConfig.seed, show_default=True, help="Scene seed.")
@click.option(
    "--scene",
    default=RunConfig.scene,
    show_default=True,
    type=RegistryChoice(lambda: scene_kinds()),
    help="Scene kind (see the README).",
)
@click.option(
    "--kernels",
    multiple=True,
    callback=comma_list,
    help="Kernels to time, e.g. naive,sse2 (default: all of the family).",
)
@build_options(DEFAULT_RUN_FLAGS)
@click.option(
    "--mode",
    "modes",
    multiple=True,
    default=RunConfig.modes,
    show_default=True,
    type=click.Choice(MODES),
    help="inline: predicate inlined in the loop; call: called through a pointer per test (repeatable).",
)
@click.option("--repeat", default=DEFAULT_REPEAT, show_default=True, help="Samples (rounds) per kernel.")
@click.option(
    "--min-time",
    "min_sample_s",
    default=DEFAULT_MIN_SAMPLE_S,
    show_default=True,
    help="Minimum seconds per sample; the call count is calibrated to reach it.",
)
@output_options
@click.option("--save", "save_to_results", is_flag=True, help="Also save a timestamped JSON under results/.")
@click.option(
    "--baseline",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Gate this run against a saved result: exit 1 on a significant regression.",
)
@gate_options
def run_command(
    sectors,
    points,
    seed,
    scene,
    kernels,
    flags,
    cc,
    sources,
    disable_isa,
    modes,
    repeat,
    min_sample_s,
    json_path,
    force,
    save_to_results,
    baseline,
    alpha,
    threshold,
    thresholds,
    normalize,
    markdown_path,
):
    """Time kernels over a seeded scene, NoOperation overhead subtracted."""
    refuse_existing(json_path, force)
    gate_config = make_gate_config(alpha, threshold, thresholds, normalize)
    baseline_result = load(baseline) if baseline else None
    config = RunConfig(
        scene=scene,
        sectors=sectors,
        points=points,
        seed=seed,
        kernels=kernels,
        builds=build_configs(flags, cc, sources),
        modes=modes,
        timing=TimingConfig(repeat=repeat, min_sample_s=min_sample_s),
        disable_isa=disable_isa,
    )
    result = measure_with_progress(config)
    from .report import run_table

    stdout().print(run_table(result))
    write_json(result, json_path, force, save_to_results)
    if baseline_result is not None:
        run_gate(baseline_result, result, gate_config, markdown_path, force, str(baseline), "this run")


def measure_with_progress(config: RunConfig):
    with make_progress() as bar:
        task = bar.add_task("starting", total=None)

        def progress(what: str, total: int | None = None) -> None:
            if total is not None:
                bar.update(task, total=total, completed=0, description=what)
            else:
                bar.update(task, advance=1, description=what)

        return run(config, progress)


#: compare's default builds: the issue's flag ladder, from unoptimised to native fast math.
COMPARE_FLAGS = ("-O0", "-O2", "-O2 -msse2", "-O2 -ffast-math", "-O3 -march=native", "-O3 -march=native -ffast-math")
#: The article's two tables: x87 (Win32 default) vs SSE2 scalar code, each with and without fast math.
#: On x86-64, -mfpmath=387 is what the article's build without /arch:SSE2 was.
ARTICLE_PRESET = dict(
    flags=("-O2 -mfpmath=387", "-O2 -mfpmath=387 -ffast-math", "-O2", "-O2 -ffast-math"),
    scene="article",
    modes=("call",),
)
COMPARE_REPEAT = 10  # 10 paired rounds give a 95 % interval that is not just min..max


@main.command("compare")
@click.option("--preset", type=click.Choice(["article"]), help="article: its flag pairs, its data, its call loop.")
@click.option("-n", "--sectors", default=RunConfig.sectors, show_default=True)
@click.option("-m", "--points", default=RunConfig.points, show_default=True)
@click.option("--seed", default=RunConfig.seed, show_default=True)
@click.option("--scene", type=RegistryChoice(lambda: scene_kinds()), help="Scene kind [default: uniform].")
@click.option("--kernels", multiple=True, callback=comma_list)
@build_options(COMPARE_FLAGS)
@click.option("--mode", "modes", multiple=True, type=click.Choice(MODES), help="Loop mode(s) [default: inline].")
@click.option("--repeat", default=COMPARE_REPEAT, show_default=True)
@click.option("--min-time", "min_sample_s", default=DEFAULT_MIN_SAMPLE_S, show_default=True)
@output_options
@click.option("--save", "save_to_results", is_flag=True, help="Also save a timestamped JSON under results/.")
def compare_command(
    preset,
    sectors,
    points,
    seed,
    scene,
    kernels,
    flags,
    cc,
    sources,
    disable_isa,
    modes,
    repeat,
    min_sample_s,
    json_path,
    force,
    save_to_results,
):
    """Time the kernels under several flag sets and compilers in the same rounds; print the matrix."""
    import shutil

    from .report import compare_table, run_table

    if preset == "article":
        flags_defaulted = (
            click.get_current_context().get_parameter_source("flags") == click.core.ParameterSource.DEFAULT
        )
        flags = ARTICLE_PRESET["flags"] if flags_defaulted else flags
        scene = scene or ARTICLE_PRESET["scene"]
        modes = modes or ARTICLE_PRESET["modes"]
    refuse_existing(json_path, force)
    installed = tuple(c for c in dict.fromkeys(cc) if shutil.which(c))
    for missing in dict.fromkeys(c for c in cc if c not in installed):
        stderr.print(f"compiler {missing!r} is not installed: its builds are left out")
    if not installed:
        raise SectorbenchError(f"none of the compilers is installed: {', '.join(cc)}")
    config = RunConfig(
        scene=scene or RunConfig.scene,
        sectors=sectors,
        points=points,
        seed=seed,
        kernels=kernels,
        builds=build_configs(flags, installed, sources),
        modes=modes or RunConfig.modes,
        timing=TimingConfig(repeat=repeat, min_sample_s=min_sample_s),
        disable_isa=disable_isa,
    )
    result = measure_with_progress(config)
    console = stdout()
    console.print(run_table(result))
    console.print(compare_table(result))
    write_json(result, json_path, force, save_to_results, label="compare")


@main.command("regress")
@click.argument("baseline", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("current", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@gate_options
@click.option(
    "--across-builds",
    is_flag=True,
    help="Pair kernels by name and mode, ignoring compiler and flags (one build per file).",
)
@click.option("--force", is_flag=True, help="Replace an existing --markdown file.")
def regress_command(baseline, current, alpha, threshold, thresholds, normalize, markdown_path, across_builds, force):
    """Exit 1 if CURRENT is significantly slower than BASELINE (2 if they cannot be compared)."""
    from .gate import as_baseline_build

    config = make_gate_config(alpha, threshold, thresholds, normalize)
    baseline_result, current_result = load(baseline), load(current)
    if across_builds:
        current_result = as_baseline_build(current_result, baseline_result)
    run_gate(baseline_result, current_result, config, markdown_path, force, str(baseline), str(current))


@main.command("plot")
@click.argument("results", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="Image file: .png or .svg.")
@click.option(
    "--chart",
    type=click.Choice(["bar", "heatmap", "trend"]),
    help="Default: trend when --kernel is given, heatmap for several builds, else bar.",
)
@click.option("--kernel", help="The kernel a trend follows.")
@click.option("--flags", "flags_filter", help="Trend: only this flag set.")
@click.option("--mode", "mode_filter", type=click.Choice(MODES), help="Trend: only this mode.")
@click.option("--force", is_flag=True, help="Replace an existing image.")
def plot_command(results, out, chart, kernel, flags_filter, mode_filter, force):
    """Draw saved results: bars with intervals, a flags x kernels heat map, or a kernel's trend.

    A trend without RESULTS reads every saved run under results/.
    """
    from . import plot
    from .results import RESULTS_DIR

    chart = chart or ("trend" if kernel else None)
    if chart == "trend":
        if not kernel:
            raise click.UsageError("a trend needs --kernel")
        loaded = [load(p) for p in results] if results else plot.load_results_dir(RESULTS_DIR)
        if not loaded:
            raise SectorbenchError(f"no saved results under {RESULTS_DIR}")
        path = plot.trend_chart(loaded, kernel, out, flags=flags_filter, mode=mode_filter, overwrite=force)
    else:
        if len(results) != 1:
            raise click.UsageError("bar and heatmap charts take exactly one RESULT file")
        result = load(results[0])
        several_builds = len({(r.cc, r.flags) for r in result.results}) > 1
        chart = chart or ("heatmap" if several_builds else "bar")
        draw = plot.heatmap if chart == "heatmap" else plot.bar_chart
        path = draw(result, out, overwrite=force)
    stderr.print(f"saved {path}")


@main.command("verify")
@click.option(
    "--family",
    type=RegistryChoice(lambda: [f.name for f in all_families()]),
    default="sector",
    show_default=True,
    help="The family whose kernels to check.",
)
@click.option("--kernels", multiple=True, callback=comma_list, help="Kernels to check (default: the family's).")
@build_options(("-O2",))
@click.option(
    "--cases",
    default=VerifyConfig.cases,
    show_default=True,
    type=click.IntRange(min=1),
    help="Rows per random generator (near-boundary, exact and special cases come on top).",
)
@click.option("--seed", default=VerifyConfig.seed, show_default=True)
@click.option(
    "--show",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Print the first K wrong inputs of each kernel.",
)
@click.option("--strict-special", is_flag=True, help="Fail fast-math builds on NaN/inf/subnormal/-0.0 inputs too.")
@click.option(
    "--input",
    "input_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Check these cases (.npz, one row per pair) instead of generated ones.",
)
@output_options
def verify_command(
    family, kernels, flags, cc, sources, disable_isa, cases, seed, show, strict_special, input_path, json_path, force
):
    """Check kernels against the exact oracle; exit 1 if any fails."""
    from .report import failing_inputs_table, verify_table
    from .verify import verify

    refuse_existing(json_path, force)
    config = VerifyConfig(
        family=family,
        kernels=kernels,
        builds=build_configs(flags, cc, sources),
        cases=cases,
        seed=seed,
        strict_special=strict_special,
        show=show,
        input_path=input_path,
        disable_isa=disable_isa,
    )
    with make_progress() as bar:
        task = bar.add_task("verify", total=None)
        result = verify(config, lambda what, total=None: bar.update(task, description=what))
    console = stdout()
    console.print(verify_table(result))
    for verdict in result.kernels:
        if verdict.failing:
            console.print(failing_inputs_table(verdict))
    if json_path is not None:
        write_text_atomic(json_path, json.dumps(result.to_dict(), indent=1) + "\n", overwrite=force)
        stderr.print(f"saved {json_path}")
    click.get_current_context().exit(0 if result.passed else 1)


@main.command("kernels")
@build_options((BuildConfig().flags[0],))
def kernels_command(flags, cc, sources, disable_isa):
    """List the kernels, what each needs, and whether this CPU has it."""
    from .build import build
    from .report import kernels_table
    from .worker import Worker

    config = build_configs(flags[:1], cc[:1], sources)[0]
    with Worker(build(config), disable_isa) as worker:
        kernels, _ = worker.describe()
    stdout().print(kernels_table(kernels))
