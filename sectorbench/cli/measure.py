"""`run` and `compare`: measure kernels."""

from __future__ import annotations

from pathlib import Path

import click

from .. import SectorbenchError
from ..results import load
from ..runner import RunConfig, run
from ..scenes import kinds as scene_kinds
from ..timing import DEFAULT_MIN_SAMPLE_S, DEFAULT_REPEAT, MODES, TimingConfig
from .app import main, make_progress, run_gate, stderr, stdout, write_json
from .options import (
    RegistryChoice,
    broadphase_option,
    build_configs,
    build_options,
    comma_list,
    gate_options,
    make_gate_config,
    output_options,
    refuse_existing,
    scene_options,
    threads_option,
)

#: `run` compares the article's pair by default: plain -O2 and -O2 with fast math
#: (the article's default vs /fp:fast builds).
DEFAULT_RUN_FLAGS = ("-O2", "-O2 -ffast-math")


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
@scene_options
@click.option(
    "--kernels",
    multiple=True,
    callback=comma_list,
    help="Kernels to time, e.g. naive,sse2 (default: all of the family).",
)
@broadphase_option
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
@threads_option
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
    world,
    rmin,
    rmax,
    kernels,
    broadphases,
    flags,
    cc,
    sources,
    disable_isa,
    modes,
    threads,
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
        threads=threads,
        broadphases=broadphases,
        world=world,
        rmin=rmin,
        rmax=rmax,
    )
    result = measure_with_progress(config)
    from ..report import run_table

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
@threads_option
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
    threads,
    repeat,
    min_sample_s,
    json_path,
    force,
    save_to_results,
):
    """Time the kernels under several flag sets and compilers in the same rounds; print the matrix."""
    import shutil

    from ..report import compare_table, run_table

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
        threads=threads,
    )
    result = measure_with_progress(config)
    console = stdout()
    console.print(run_table(result))
    console.print(compare_table(result))
    write_json(result, json_path, force, save_to_results, label="compare")
