"""Options shared by several commands, and the conversions they need."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import click

from ..compare.gate import MAX_THRESHOLDS_BYTES, GateConfig, load_thresholds
from ..errors import SectorbenchError
from ..families import all_families, scene_options
from ..model.kernels import NAME_SEPARATOR
from ..model.results import (
    RESULTS_DIR,
    check_directory,
    check_output,
    guard_command_files,
    guard_more_inputs,
    name_too_long,
    refuse_directory_spelling,
    regular_file,
    same_file,
)
from ..model.text import shortened_path
from ..native.build import DEFAULT_CC, KERNELS_DIR, BuildConfig, repeated_build, source_kernel_rows, source_reads


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


class SceneChoice(RegistryChoice):
    """--scene: the families' scene kinds are listed; their older spellings (Family.scene_aliases,
    e.g. a kind with its size in its name) are accepted too."""

    def __init__(self, families=all_families):
        super().__init__(lambda: [kind for f in families() for kind in f.scenes])
        self.families = families

    def convert(self, value, param, ctx):
        if any(value in f.scene_aliases for f in self.families()):
            return value
        return super().convert(value, param, ctx)


def scene_option(default_help: str):
    return click.option("--scene", default=None, type=SceneChoice(), help=f"Scene kind {default_help}.")


def comma_list(ctx, param, values) -> tuple[str, ...]:
    """Accept both --kernels a,b and --kernels a --kernels b; an option given but empty is an error."""
    items = tuple(item.strip() for value in values for item in value.split(NAME_SEPARATOR) if item.strip())
    if values and not items:
        raise click.BadParameter("is empty; leave the option out for the default", ctx, param)
    return items


def not_empty(ctx, param, value):
    """An option that names something (a kernel) given but empty is an error, as comma_list's
    are: `plot --kernel ''` drew a bar chart, as if --kernel had been left out."""
    if value is not None and not value.strip():
        raise click.BadParameter("is empty; leave the option out for the default", ctx, param)
    return value


class OutputPath(click.Path):
    """An output file's path.  An empty one is refused as empty: pathlib reads "" as ".", which
    was then refused as "a directory"; one spelt as a directory ("newdir/") as a directory:
    pathlib drops the "/", and a file named newdir was written."""

    def __init__(self):
        super().__init__(dir_okay=False, path_type=Path)

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value:
            self.fail("is an empty path: give the file to write", param, ctx)
        if isinstance(value, str | bytes):
            try:
                refuse_directory_spelling(value)
            except SectorbenchError as exc:
                self.fail(str(exc), param, ctx)
        return super().convert(value, param, ctx)


OUTPUT_PATH = OutputPath()


class InputPath(click.Path):
    """An input file's path: one that exists and is no directory.  A path the system refuses
    as too long is said to be, and so is one behind a folder this user may not enter: click's
    stat failed on either and it read "does not exist" (`regress /root/base.json` as a CI
    runner's user, of a file that was there)."""

    def __init__(self):
        super().__init__(exists=True, dir_okay=False, path_type=Path)

    def convert(self, value, param, ctx):
        try:
            os.stat(value)
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:
                self.fail(name_too_long(value), param, ctx)
            if exc.errno == errno.EACCES:  # stat needs no right on the file: a folder on its path refused
                self.fail(
                    f"{shortened_path(os.fsdecode(value))}: cannot be reached, a folder on its path is closed to "
                    "this user (Permission denied)",
                    param,
                    ctx,
                )
        except (TypeError, ValueError):  # not a path at all (a NUL in it): click's own check says so
            pass
        return super().convert(value, param, ctx)


INPUT_PATH = InputPath()


def unique(ctx, param, values) -> tuple:
    """A repeatable option whose values must differ (the same one twice would double rows)."""
    seen = set()
    for value in values:
        key = value.resolve() if isinstance(value, Path) else value
        if key in seen:
            raise click.BadParameter(f"{str(value)!r} is given twice", ctx, param)
        seen.add(key)
    return tuple(values)


#: The largest file each option that reads one whole takes, and why: refused, from its size,
#: before any work (a 2 GB file was read for 10 s into 4.2 GB, or handed to the compiler).
READ_LIMITS = {
    "sources": (64 * 2**20, "a C file of kernels is kilobytes; the compiler would take minutes and gigabytes"),
    "against_source": (64 * 2**20, "a C file of kernels is kilobytes; the compiler would take minutes and gigabytes"),
    "thresholds": (MAX_THRESHOLDS_BYTES, "a thresholds file is a few lines of TOML"),
}


def regular_files(ctx, param, value):
    """Files read whole (a C source, a TOML): regular ones only, within READ_LIMITS, refused
    before any work.  A FIFO would block its reader, and the compiler or a parser would read
    a device for ever."""
    limit, why = READ_LIMITS.get(param.name, (None, ""))
    for path in value if isinstance(value, tuple) else (value,):
        if path is not None:
            try:
                size = regular_file(path).st_size
            except SectorbenchError as exc:
                raise click.BadParameter(str(exc), ctx, param) from None
            if limit is not None and size > limit:
                raise click.BadParameter(
                    f"{path} is {size:,} bytes, more than the {limit:,} allowed ({why})", ctx, param
                )
    return value


def unique_regular_files(ctx, param, values) -> tuple:
    return unique(ctx, param, regular_files(ctx, param, values))


#: What --kernels selects when not given (measure/selection.select): the help of every command
#: that takes it says so in these words.
KERNELS_DEFAULT = (
    "the family's C kernels, known-bad ones left out; the Python peers (numpy, numba, kdtree) "
    "run only when named (`sectorbench kernels` lists every name)"
)

#: A seed: any integer numpy's SeedSequence takes, which is any integer >= 0.
SEED = click.IntRange(min=0)


def build_configs(flags: tuple[str, ...], cc: tuple[str, ...], sources=()) -> tuple[BuildConfig, ...]:
    """Every compiler x flag set; the same build named twice is refused (it would be measured twice)."""
    named = [(compiler, text) for compiler in cc for text in flags]
    configs = tuple(BuildConfig.parse(text, compiler, sources) for compiler, text in named)
    repeated = repeated_build(configs)
    if repeated:
        (_, first), (compiler, again) = (named[place] for place in repeated)
        raise click.UsageError(
            f"the build {build_text(compiler, again)} is given twice"
            + (f" (as {first!r} and {again!r})" if first != again else "")
            + ": give each --flags and --cc once"
        )
    if configs and sources:
        refuse_sources_without_kernels(configs[0])
    return configs


def refuse_sources_without_kernels(config: BuildConfig) -> None:
    """A --source that declares no kernel (empty, or helpers only) is refused before any work:
    the run would time the built-in kernels alone and look like a run of the user's.  What the
    source includes is an input of the command, as the source is (guard_more_inputs)."""
    for source in config.extra_sources:
        if source_kernel_rows(config, source) == 0:
            raise SectorbenchError(
                f"--source {source} declares no kernel (a kernel is a row SB_KERNEL makes: docs/extending.md)"
            )
        guard_more_inputs(source_reads(config, source), f"a file --source {source} includes")


def build_text(cc: str, flags: str) -> str:
    return f"--cc {cc} --flags {flags!r}" if cc != DEFAULT_CC else f"--flags {flags!r}"


def build_options(default_flags: tuple[str, ...]):
    def decorate(command):
        command = click.option(
            "--cc",
            "cc",
            multiple=True,
            callback=unique,
            default=(DEFAULT_CC,),
            help="C compiler (repeatable: every compiler builds every flag set) [default: $CC, else cc].",
        )(command)
        command = click.option(
            "--flags",
            "flags",
            multiple=True,
            default=default_flags,
            show_default=True,
            help='Compiler flags as one string, e.g. "-O2 -msse2" (repeatable: one build each).',
        )(command)
        command = click.option(
            "--source",
            "sources",
            multiple=True,
            callback=unique_regular_files,
            type=INPUT_PATH,
            help="Your own C file of kernels to link in (repeatable; docs/extending.md) [default: none].",
        )(command)
        command = click.option(
            "--disable-isa",
            "disable_isa",
            multiple=True,
            callback=comma_list,
            help="Treat these CPU features as missing (e.g. sse2): their kernels are skipped [default: none].",
        )(command)
        return command

    return decorate


def output_options(command):
    command = click.option(
        "--json",
        "json_path",
        type=OUTPUT_PATH,
        help="Write the results as JSON here [default: not written].",
    )(command)
    command = click.option(
        "--force", is_flag=True, help="Replace existing output files (regular files only) [default: refuse]."
    )(command)
    return command


def parse_exports(ctx, param, values) -> tuple:
    """--export FORMAT=PATH, repeatable, as (format, Path) pairs."""
    from ..compare.export import parse_export

    try:
        return tuple(parse_export(value) for value in values)
    except SectorbenchError as exc:
        raise click.BadParameter(str(exc).removeprefix(f"--export {values[0]!r}: "), ctx, param) from None


def export_option(command):
    """--export FORMAT=PATH (repeatable): the result also in a format a dashboard reads."""
    from ..compare.export import FORMATS

    return click.option(
        "--export",
        "exports",
        multiple=True,
        callback=parse_exports,
        metavar="FORMAT=PATH",
        help=f"Also write the result as {', '.join(sorted(FORMATS))} (see docs/exports.md), repeatable"
        " [default: none].",
    )(command)


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
        help="Smallest slowdown that counts, a fraction up to 1 (0.10 = 10 %): the interval's lower bound must "
        "exceed it; given, it is the default over --thresholds' own.",
    )(command)
    command = click.option(
        "--thresholds",
        type=INPUT_PATH,
        callback=regular_files,
        help="TOML file of per-kernel thresholds (docs/gate.md) [default: --threshold for all].",
    )(command)
    command = click.option(
        "--normalize",
        help="Compare times as ratios to this kernel of the same run ('overhead': each kernel's own NoOperation)"
        " [default: raw times].",
    )(command)
    command = click.option(
        "--markdown",
        "markdown_path",
        type=OUTPUT_PATH,
        help="Also write the comparison as a Markdown table here [default: not written].",
    )(command)
    return command


def make_gate_config(alpha, threshold, thresholds, normalize) -> GateConfig:
    """The gate's settings; a --threshold given on the command line is the default over the
    --thresholds file's own (the file's had silently won), as a command line wins over a file."""
    per_kernel = load_thresholds(thresholds) if thresholds else {}
    given = bool(given_options(click.get_current_context(), ("threshold",)))
    default = {"default": threshold}
    merged = {**per_kernel, **default} if given else {**default, **per_kernel}
    return GateConfig.from_thresholds(merged, alpha=alpha, normalize=normalize)


def check_outputs(force: bool, *paths: Path | None, save: bool = False, inputs=()) -> None:
    """Fail before building or measuring, not after, when an output would be refused.

    Each path: nothing there, or a regular file and --force; its directory exists and
    takes new files.  --save: results/ of the current directory is, or can be made, such
    a directory.  No two outputs may be the same file, and no output may be one of the
    command's `inputs` (the same inode, however it is named), even with --force: an
    output replacing the baseline it is compared with would lose the baseline.
    """
    guard_command_files(inputs, paths)  # checked again when each output is written
    written: dict[str, Path] = {}
    for path in paths:
        if path is None:
            continue
        alias = stream_alias(path)
        if alias is not None:
            raise SectorbenchError(
                f"{path} is an open stream of this process"
                + (f" ({alias})" if alias != os.path.abspath(path) else "")
                + ", not a regular file: write to a file; "
                "a file behind it is not one the command was named, and is never replaced, even with --force"
            )
        for source in inputs:
            if source is not None and same_file(path, source):
                raise SectorbenchError(
                    f"{path} is the same file as the input {source}: outputs never replace inputs, even with --force"
                )
        # the real path, its folders' links followed too: `--json o.json --export pyperf=here/o.json`
        # (here -> .) passed as two files, and with --force the export replaced the JSON
        target = os.path.realpath(check_output(path, force))
        if Path(target).is_relative_to(os.path.realpath(KERNELS_DIR)):
            raise SectorbenchError(
                f"{path} is in sectorbench's own C sources ({KERNELS_DIR}), which the command builds: "
                "outputs never replace inputs, even with --force"
            )
        if target in written:
            raise SectorbenchError(f"{written[target]} and {path} are the same file: give each output its own path")
        written[target] = path
    if save:
        check_directory(RESULTS_DIR, create=True, what="--save: ")
        saves_into = os.path.realpath(RESULTS_DIR)
        for target, path in written.items():
            # `--save --json results` in an empty directory: the run wrote the file results,
            # then could not make results/ there, and its results went to a rescue file
            if target == saves_into:
                raise SectorbenchError(
                    f"{path} is where --save makes its directory ({RESULTS_DIR}/): give the output another path"
                )


#: Paths that name a process's open descriptors rather than files: a file reached through one
#: (`--json /dev/stdout >> keep.txt`) is the shell's, not one named to the command.
STREAM_ALIASES = ("/dev/stdin", "/dev/stdout", "/dev/stderr")


def stream_alias(path: Path) -> str | None:
    """The descriptor alias (/dev/stdout, /dev/fd/N, /proc/PID/fd/N) that `path` is or whose
    symbolic links lead through, else None."""
    current = os.path.abspath(path)
    for _ in range(40):  # a loop of links ends here; check_output then says what it is
        parts = Path(current).parts
        if current in STREAM_ALIASES or current.startswith("/dev/fd/") or (parts[1:2] == ("proc",) and "fd" in parts):
            return current
        # the folders' links resolved too: a link to /proc/self/fd led `fds/1` past the check
        folder = os.path.realpath(os.path.dirname(current))
        if folder != os.path.dirname(current):
            current = os.path.join(folder, os.path.basename(current))
            continue
        if not os.path.islink(current):
            return None
        current = os.path.normpath(os.path.join(os.path.dirname(current), os.readlink(current)))
    return None


def refuse_unused_gate_options(ctx: click.Context, baseline) -> None:
    """--markdown, --normalize, --thresholds, --alpha, --threshold, --confirm/--no-confirm mean
    nothing without --baseline."""
    if baseline is not None:
        return
    given = given_options(ctx, ("markdown_path", "normalize", "thresholds", "alpha", "threshold", "confirm"))
    refuse_unused(given, "with --baseline")


def given_options(ctx: click.Context, names) -> list[str]:
    """The options among the parameters `names` that were given (not left to their default),
    as spelt (a flag's off form, --no-confirm, when that was given)."""

    def spelt(param) -> str:
        off = getattr(param, "secondary_opts", None) and ctx.params.get(param.name) is False
        return param.secondary_opts[0] if off else param.opts[0]

    params = {param.name: param for param in ctx.command.params}
    return [
        spelt(params[name])
        for name in names
        if ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)
    ]


def refuse_unused(given: list[str], where: str) -> None:
    """Options that mean nothing here are refused, not silently ignored: "--x, --y only apply `where`"."""
    if given:
        raise click.UsageError(f"{', '.join(given)} only appl{'y' if len(given) > 1 else 'ies'} {where}")


#: --threads (run, compare, query) at most this many times the CPUs this process may use:
#: beyond that the threads only queue for the same cores and the timing measures the
#: scheduler, and a mistyped huge count would allocate per-thread state for minutes.
MAX_THREADS_PER_CPU = 8


def max_threads() -> int:
    from ..measure.runner import available_cpus

    return MAX_THREADS_PER_CPU * available_cpus()


def checked_threads(value, option: str = "--threads") -> int:
    """A thread count as given (an integer, or 'all': the CPUs this process may use), within
    1..max_threads(); else SectorbenchError."""
    from ..measure.runner import ALL_THREADS, available_cpus

    try:
        count = available_cpus() if str(value).strip() == ALL_THREADS else int(str(value).strip())
    except ValueError:
        raise SectorbenchError(f"{option} must be a whole number or 'all' (got {value!r})") from None
    if not 1 <= count <= max_threads():
        raise SectorbenchError(
            f"{option} must be from 1 to {max_threads()} ({MAX_THREADS_PER_CPU} x the CPUs this process may use);"
            f" got {value}"
        )
    return count


def _parse_threads(ctx, param, values):
    from ..measure.runner import parse_threads

    for value in values:
        checked_threads(value)
    return parse_threads(values)


def threads_option(command):
    """--threads N|all, repeatable: each kernel is timed at each thread count, in the same rounds."""
    from ..measure.runner import RunConfig

    return click.option(
        "--threads",
        "threads",
        multiple=True,
        default=tuple(str(count) for count in RunConfig.threads),
        show_default=True,
        callback=_parse_threads,
        help="Threads, shapes split among them: a number or 'all' (the CPUs this process may use); repeatable.",
    )(command)


class SceneCommand(click.Command):
    """A command that also takes every family's scene options (Family.scene_options), read from
    the registry when first needed, as RegistryChoice is: a family module that fails to
    import is then one line, like every other error.  They reach the callback as keyword
    arguments, None when not given.  `families` (a callable, default every family) narrows
    them to the scenes of the families the command answers for."""

    def __init__(self, *args, families=all_families, **kwargs):
        super().__init__(*args, **kwargs)
        self.families = families

    def get_params(self, ctx):
        if not getattr(self, "_scene_params", None):
            options = scene_options(self.families())
            self._scene_params = [_scene_param(option, self.families) for option in options.values()]
        params = super().get_params(ctx)
        after = next((i + 1 for i, param in enumerate(params) if param.name == "scene"), len(params))
        return [*params[:after], *self._scene_params, *params[after:]]


def _scene_param(option, families) -> click.Option:
    default = _scene_default(option.name, families)
    if option.type is bool:
        shown = "on" if default else "off"
        return click.Option(
            [f"--{option.name}/--no-{option.name}"], default=None, help=f"{option.help} [default: {shown}]."
        )
    shown = "" if default is None or "[default" in option.help else f" [default: {default:g}]"
    return click.Option([f"--{option.name}"], type=option.type, default=None, help=f"{option.help}{shown}.")


def _scene_default(name: str, families):
    """The default of a scene option: its value in the first generator that takes it."""
    import inspect

    for family in families():
        for generate in family.scenes.values():
            parameter = inspect.signature(generate).parameters.get(name)
            if parameter is not None and parameter.kind is parameter.KEYWORD_ONLY:
                return parameter.default
    return None


def given_scene_options(values: dict) -> dict:
    """The scene options the user gave (the others are None: the scene's defaults apply)."""
    names = set(scene_options())
    return {name: value for name, value in values.items() if name in names and value is not None}


def family_option(help_text: str):
    return click.option(
        "--family",
        type=RegistryChoice(lambda: [f.name for f in all_families()]),
        default=None,
        help=help_text,
    )


def broadphase_option(command):
    """--broadphase, repeatable: the choices of every family that has broadphases.  One given
    twice is refused, as --mode and --flags are: it would be timed twice, into duplicate rows
    that a gate or an export then refuses."""
    return click.option(
        "--broadphase",
        "broadphases",
        multiple=True,
        callback=unique,
        type=RegistryChoice(lambda: list(dict.fromkeys(b for f in all_families() for b in f.broadphases()))),
        help="none: every pair (the kernels); another: its index of the points first, timed end to end "
        "(repeatable) [default: the scene's: none on small scenes, the measured fastest index at game scale].",
    )(command)
