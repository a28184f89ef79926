"""Options shared by several commands, and the conversions they need."""

from __future__ import annotations

from pathlib import Path

import click

from ..build import DEFAULT_CC, BuildConfig
from ..gate import GateConfig, load_thresholds
from ..results import check_output


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


def build_configs(flags: tuple[str, ...], cc: tuple[str, ...], sources=()) -> tuple[BuildConfig, ...]:
    return tuple(BuildConfig.parse(f, compiler, sources) for compiler in cc for f in flags)


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


def refuse_existing(path: Path | None, force: bool) -> None:
    """Fail before measuring, not after, when the output file would be refused."""
    if path is not None:
        check_output(path, force)


def threads_option(command):
    """--threads N|all, repeatable: each kernel is timed at each thread count, in the same rounds."""
    from ..runner import parse_threads

    return click.option(
        "--threads",
        "threads",
        multiple=True,
        default=("1",),
        show_default=True,
        callback=lambda ctx, param, values: parse_threads(values),
        help="Threads, shapes split among them: a number or 'all' (the CPUs this process may use); repeatable.",
    )(command)


def scene_options(command):
    """--world, --rmin, --rmax: the game scenes' sizes; unset, the scene's own default."""
    from ..families.sector.scenes import GAME_RMAX, GAME_RMIN, GAME_WORLD

    for name, default, text in reversed(
        (
            ("world", GAME_WORLD, "Side of the square world"),
            ("rmin", GAME_RMIN, "Smallest sector radius"),
            ("rmax", GAME_RMAX, "Largest sector radius"),
        )
    ):
        command = click.option(
            f"--{name}", name, type=float, default=None, help=f"{text} (game, clustered scenes; default {default:g})."
        )(command)
    return command


def broadphase_option(command):
    """--broadphase none|grid|morton, repeatable."""
    from ..families.sector.broadphase import BROADPHASES

    return click.option(
        "--broadphase",
        "broadphases",
        multiple=True,
        type=click.Choice(BROADPHASES),
        help="none: every pair (the kernels); grid, morton: a point index first, timed end to end "
        "(repeatable; default: none for uniform/article, grid, the measured fastest, for game/clustered).",
    )(command)
