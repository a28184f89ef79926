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
from .results import save, timestamped_path, write_text_atomic
from .verify import VerifyConfig
from .runner import RunConfig, run
from .scenes import SCENE_FAMILIES
from .timing import DEFAULT_MIN_SAMPLE_S, DEFAULT_REPEAT, MODES, TimingConfig

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
            click.echo(f"sectorbench: internal error: {type(exc).__name__}: {exc} "
                       f"(set SECTORBENCH_DEBUG=1 for the traceback)", err=True)
            code = 2
        if standalone_mode:
            sys.exit(code if isinstance(code, int) else 0)
        return code


def comma_list(ctx, param, values) -> tuple[str, ...]:
    """Accept both --kernels a,b and --kernels a --kernels b."""
    return tuple(item.strip() for value in values for item in value.split(",") if item.strip())


def make_progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=stderr, transient=True)


def build_configs(flags: tuple[str, ...], cc: tuple[str, ...], sources=()) -> tuple[BuildConfig, ...]:
    return tuple(BuildConfig.parse(f, compiler, sources) for compiler in cc for f in flags)


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sectorbench")
def main():
    """Benchmark and verify float32 point-in-sector kernels written in C."""


def build_options(default_flags: tuple[str, ...]):
    def decorate(command):
        command = click.option("--cc", "cc", multiple=True, default=(DEFAULT_CC,), show_default=True,
                               help="C compiler (repeatable to compare compilers; default $CC or cc).")(command)
        command = click.option("--flags", "flags", multiple=True, default=default_flags, show_default=True,
                               help="Compiler flags as one string, e.g. \"-O2 -msse2\" (repeatable).")(command)
        command = click.option("--source", "sources", multiple=True,
                               type=click.Path(exists=True, dir_okay=False, path_type=Path),
                               help="Your own C file of kernels to link in (repeatable; see the README).")(command)
        command = click.option("--disable-isa", "disable_isa", multiple=True, callback=comma_list,
                               help="Treat these CPU features as missing (e.g. sse2): their kernels are skipped.")(command)
        return command
    return decorate


def output_options(command):
    command = click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
                           help="Write the results as JSON here.")(command)
    command = click.option("--force", is_flag=True, help="Replace an existing --json file.")(command)
    return command


def write_json(result, json_path: Path | None, force: bool, save_to_results: bool = False, label: str = "run"):
    for path, overwrite in ((json_path, force), (timestamped_path(label=label) if save_to_results else None, False)):
        if path is not None:
            save(result, path, overwrite=overwrite)
            stderr.print(f"saved {path}")


@main.command("run")
@click.option("-n", "--sectors", default=RunConfig.sectors, show_default=True, help="N: sectors (or triangles).")
@click.option("-m", "--points", default=RunConfig.points, show_default=True, help="M: points.")
@click.option("--seed", default=RunConfig.seed, show_default=True, help="Scene seed.")
@click.option("--scene", default=RunConfig.scene, show_default=True, type=click.Choice(list(SCENE_FAMILIES)),
              help="Scene kind (see the README).")
@click.option("--kernels", multiple=True, callback=comma_list, help="Kernels to time, e.g. naive,sse2 (default: all of the family).")
@build_options(DEFAULT_RUN_FLAGS)
@click.option("--mode", "modes", multiple=True, default=RunConfig.modes, show_default=True, type=click.Choice(MODES),
              help="inline: predicate inlined in the loop; call: called through a pointer per test (repeatable).")
@click.option("--repeat", default=DEFAULT_REPEAT, show_default=True, help="Samples (rounds) per kernel.")
@click.option("--min-time", "min_sample_s", default=DEFAULT_MIN_SAMPLE_S, show_default=True,
              help="Minimum seconds per sample; the call count is calibrated to reach it.")
@output_options
@click.option("--save", "save_to_results", is_flag=True, help="Also save a timestamped JSON under results/.")
def run_command(sectors, points, seed, scene, kernels, flags, cc, sources, disable_isa, modes, repeat, min_sample_s,
                json_path, force, save_to_results):
    """Time kernels over a seeded scene, NoOperation overhead subtracted."""
    if json_path is not None and json_path.exists() and not force:
        raise SectorbenchError(f"{json_path} exists; choose another path or pass --force to replace it")
    config = RunConfig(scene=scene, sectors=sectors, points=points, seed=seed, kernels=kernels,
                       builds=build_configs(flags, cc, sources), modes=modes,
                       timing=TimingConfig(repeat=repeat, min_sample_s=min_sample_s), disable_isa=disable_isa)
    with make_progress() as bar:
        task = bar.add_task("starting", total=None)

        def progress(what: str, total: int | None = None) -> None:
            if total is not None:
                bar.update(task, total=total, completed=0, description=what)
            else:
                bar.update(task, advance=1, description=what)
        result = run(config, progress)
    from .report import run_table
    stdout().print(run_table(result))
    write_json(result, json_path, force, save_to_results)


@main.command("verify")
@click.option("--family", type=click.Choice(["sector", "triangle"]), default="sector", show_default=True)
@click.option("--kernels", multiple=True, callback=comma_list, help="Kernels to check (default: the family's).")
@build_options(("-O2",))
@click.option("--cases", default=VerifyConfig.cases, show_default=True, type=click.IntRange(min=1),
              help="Rows per random generator (near-boundary, exact and special cases come on top).")
@click.option("--seed", default=VerifyConfig.seed, show_default=True)
@click.option("--show", default=0, show_default=True, type=click.IntRange(min=0), help="Print the first K wrong inputs of each kernel.")
@click.option("--strict-special", is_flag=True, help="Fail fast-math builds on NaN/inf/subnormal/-0.0 inputs too.")
@click.option("--input", "input_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Check these cases (.npz, one row per pair) instead of generated ones.")
@output_options
def verify_command(family, kernels, flags, cc, sources, disable_isa, cases, seed, show, strict_special, input_path,
                   json_path, force):
    """Check kernels against the exact oracle; exit 1 if any fails."""
    from .report import failing_inputs_table, verify_table
    from .verify import verify

    if json_path is not None and json_path.exists() and not force:
        raise SectorbenchError(f"{json_path} exists; choose another path or pass --force to replace it")
    config = VerifyConfig(family=family, kernels=kernels, builds=build_configs(flags, cc, sources), cases=cases, seed=seed,
                          strict_special=strict_special, show=show, input_path=input_path, disable_isa=disable_isa)
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
